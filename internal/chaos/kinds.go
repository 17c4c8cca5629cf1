package chaos

// How the checker takes each kind of operation. A multi-key write is one
// write per key (keyShare), each with the operation's times and status but
// for the keys a failed one lists as acknowledged; a read is one read per
// key, its value or its miss.

// writesValue reports whether an operation of kind k writes its Value:
// Set, Load, SetMulti, and Add and StoreCAS unless NotStored.
func (k Kind) writesValue() bool {
	switch k {
	case Set, Load, SetMulti, Add, StoreCAS:
		return true
	}
	return false
}

// deletes reports whether an operation of kind k deletes its keys.
func (k Kind) deletes() bool { return k == Delete || k == DeleteMulti }

// multiWrite reports whether an operation of kind k writes or deletes
// each of several keys.
func (k Kind) multiWrite() bool { return k == SetMulti || k == DeleteMulti }

// singleRead reports whether an operation of kind k reads one key, its
// Result the value read: Get, GetOrLoad, RedisGet, GetItem.
func (k Kind) singleRead() bool {
	switch k {
	case Get, GetOrLoad, RedisGet, GetItem:
		return true
	}
	return false
}

// multiRead reports whether an operation of kind k reads several keys, its
// Results the values found: GetMulti, GetMultiOrLoad.
func (k Kind) multiRead() bool { return k == GetMulti || k == GetMultiOrLoad }

// counts reports whether an operation of kind k changes a counter.
func (k Kind) counts() bool { return k == Incr || k == Decr }

// writes reports whether o may have written (a value, a delete, a count):
// what a report lists beside a violation.
func (o *Op) writes() bool {
	if o.Status == NotStored {
		return false
	}
	return o.Kind.writesValue() || o.Kind.deletes() || o.Kind.counts()
}

// keyShare returns o's share of key: o itself for a single-key operation,
// and for a multi-key write an operation of key alone, acknowledged if o
// was or if o failed but lists key as acknowledged (AckedKey).
func keyShare(o *Op, key string) *Op {
	if !o.Kind.multiWrite() {
		return o
	}
	s := *o
	s.Keys = []string{key}
	s.Results = nil
	if o.Status == Failed && o.Results[key] == AckedKey {
		s.Status, s.Err = OK, ""
	}
	return &s
}

// readOf returns what o read of key: the value and true for a hit, "" and
// false otherwise; checked is false when o tells nothing of key (not a
// read, a read that failed, a miss of GetMultiOrLoad, which loads its
// misses, or of a failed GetMulti, which may be a failure).
func readOf(o *Op, key string) (value string, hit, checked bool) {
	switch {
	case o.Kind.singleRead():
		switch o.Status {
		case OK:
			return o.Result, true, true
		case Miss:
			return "", false, true
		}
	case o.Kind.multiRead():
		if o.Status != OK && o.Status != Failed {
			return "", false, false
		}
		if v, ok := o.Results[key]; ok {
			return v, true, true
		}
		return "", false, o.Kind == GetMulti && o.Status == OK
	}
	return "", false, false
}
