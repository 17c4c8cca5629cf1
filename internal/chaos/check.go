package chaos

import (
	"sort"
	"strconv"
)

// Rule is a property of cache semantics that a history can break.
type Rule string

// Rules of values (keys written with Set and GetOrLoad's loads). A read may
// miss at any time: eviction, a dead node, a failed-open read. What it
// returns must be admissible: written by a write w such that no
// acknowledged write or delete x of the key has w before it and the read
// after it in real time (w.Comp < x.Inv and x.Comp < r.Inv). A failed write
// has no end (it may be applied at any later time) so it is admissible
// forever after its invocation, and it never makes another one
// inadmissible; neither does a failed delete.
const (
	// StaleRead is a value overwritten by an acknowledged write before the
	// read began.
	StaleRead Rule = "stale read"
	// DeletedRead is a value deleted by an acknowledged delete before the
	// read began.
	DeletedRead Rule = "deleted value read"
	// FutureRead is a value whose write began after the read ended.
	FutureRead Rule = "value read before its write"
	// UnknownValue is a value nobody wrote.
	UnknownValue Rule = "unknown value"
)

// Rules of counters (keys that Incr touches; see checkCounter).
const (
	CounterBackwards Rule = "counter went backwards"
	CounterBelow     Rule = "counter below its acknowledged increments"
	CounterAbove     Rule = "counter above its increments"
	CounterDuplicate Rule = "counter value returned twice"
	CounterGarbage   Rule = "counter not an integer"
)

// Violation is one breach of a rule, with the operations that show it.
type Violation struct {
	Rule Rule
	Key  string
	// Read is the read (or Incr) that saw what it must not.
	Read *Op
	// Write wrote the value read: nil for a counter.
	Write *Op
	// Witness is what makes the value inadmissible: the acknowledged write
	// or delete between Write and Read that completed last before the read, or for a counter the earlier
	// observation (or the reset) it contradicts; nil when the rule needs
	// none.
	Witness *Op
	// Detail says what was expected, for counters.
	Detail string
}

// Result is what Check found.
type Result struct {
	Violations []Violation
	// Ops counts the operations checked, by kind; Reads the reads (keys of
	// GetMulti included) that returned a value, and Misses those that did
	// not; Failed the operations that failed or never completed.
	Ops            map[Kind]int
	Reads, Misses  int
	Failed         int
	Faults, Wipes  int
	Keys, Counters int
}

// Count returns the number of violations of rule.
func (r *Result) Count(rule Rule) int {
	n := 0
	for _, v := range r.Violations {
		if v.Rule == rule {
			n++
		}
	}
	return n
}

// Total returns the number of operations checked.
func (r *Result) Total() int {
	n := 0
	for _, c := range r.Ops {
		n += c
	}
	return n
}

// read is one key's share of a read: a Get, a GetOrLoad, or one key of a
// GetMulti.
type read struct {
	op    *Op
	value string
}

// keyOps is the history of one key.
type keyOps struct {
	writes  []*Op // Set, Load
	deletes []*Op
	incrs   []*Op
	reads   []read
}

// Check checks a history against cache semantics: the rules of values for
// every key never incremented, those of counters for every key Incr
// touched. It is exact for these rules and runs in O(n log n).
func Check(h *History) *Result {
	res := &Result{Ops: make(map[Kind]int)}
	for _, f := range h.Faults {
		if !f.Event() {
			res.Faults++
		}
	}
	keys := make(map[string]*keyOps)
	at := func(k string) *keyOps {
		ko := keys[k]
		if ko == nil {
			ko = new(keyOps)
			keys[k] = ko
		}
		return ko
	}
	for _, o := range h.Ops {
		res.Ops[o.Kind]++
		if o.Status == Failed || o.Status == Pending {
			res.Failed++
		}
		switch o.Kind {
		case Set, Load:
			at(o.Key()).writes = append(at(o.Key()).writes, o)
		case Delete:
			at(o.Key()).deletes = append(at(o.Key()).deletes, o)
		case Incr:
			at(o.Key()).incrs = append(at(o.Key()).incrs, o)
		case Get, GetOrLoad:
			switch o.Status {
			case OK:
				at(o.Key()).reads = append(at(o.Key()).reads, read{o, o.Result})
				res.Reads++
			case Miss:
				res.Misses++
			}
		case GetMulti:
			if o.Status != OK && o.Status != Failed {
				continue
			}
			// A failed multi-get's hits are answers of the nodes that
			// answered: they count.
			for _, k := range o.Keys {
				if v, ok := o.Results[k]; ok {
					at(k).reads = append(at(k).reads, read{o, v})
					res.Reads++
				} else if o.Status == OK {
					res.Misses++
				}
			}
		}
	}
	resets := globalResets(h)
	for _, f := range h.Faults {
		if f.Wipes() {
			res.Wipes++
		}
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ko := keys[k]
		if len(ko.incrs) > 0 {
			res.Counters++
			res.Violations = append(res.Violations, checkCounter(k, ko, resets)...)
		} else {
			res.Keys++
			res.Violations = append(res.Violations, checkValues(k, ko)...)
		}
	}
	sort.SliceStable(res.Violations, func(i, j int) bool {
		return res.Violations[i].Read.Inv < res.Violations[j].Read.Inv
	})
	return res
}

// superseders are the acknowledged writes or deletes of a key, sorted by
// invocation, with the earliest completion among each suffix: the first x
// invoked after time t that completed earliest is min[search(t)].
type superseders struct {
	ops []*Op
	inv []int64
	min []*Op // min[i]: the op of ops[i:] that completed first
}

func newSuperseders(ops []*Op) superseders {
	var acked []*Op
	for _, o := range ops {
		if o.Status == OK {
			acked = append(acked, o)
		}
	}
	sort.Slice(acked, func(i, j int) bool { return acked[i].Inv < acked[j].Inv })
	s := superseders{ops: acked, inv: make([]int64, len(acked)), min: make([]*Op, len(acked)+1)}
	for i := len(acked) - 1; i >= 0; i-- {
		s.inv[i] = acked[i].Inv
		s.min[i] = acked[i]
		if m := s.min[i+1]; m != nil && m.Comp < acked[i].Comp {
			s.min[i] = m
		}
	}
	return s
}

// first returns the acknowledged operation invoked after t that completed
// first, or nil.
func (s superseders) first(t int64) *Op {
	if t == Never {
		return nil
	}
	i := sort.Search(len(s.inv), func(i int) bool { return s.inv[i] > t })
	return s.min[i]
}

// latest returns, of the acknowledged operations invoked after t, the one
// that completed last before u: the witness a report shows, closest to the
// read. It scans, and runs only for violations.
func (s superseders) latest(t, u int64) *Op {
	var best *Op
	for _, o := range s.ops[sort.Search(len(s.inv), func(i int) bool { return s.inv[i] > t }):] {
		if o.Comp < u && (best == nil || o.Comp > best.Comp) {
			best = o
		}
	}
	return best
}

// checkValues applies the rules of values to one key.
func checkValues(key string, ko *keyOps) []Violation {
	byValue := make(map[string]*Op, len(ko.writes))
	for _, w := range ko.writes {
		byValue[w.Value] = w
	}
	sets, dels := newSuperseders(ko.writes), newSuperseders(ko.deletes)
	var out []Violation
	for _, r := range ko.reads {
		w := byValue[r.value]
		switch {
		case w == nil:
			out = append(out, Violation{Rule: UnknownValue, Key: key, Read: r.op, Detail: strconv.Quote(r.value)})
			continue
		case w.Inv > r.op.Comp:
			out = append(out, Violation{Rule: FutureRead, Key: key, Read: r.op, Write: w})
			continue
		}
		// A delete is the worse news, so it is reported first.
		if x := dels.first(w.End()); x != nil && x.Comp < r.op.Inv {
			x = dels.latest(w.End(), r.op.Inv)
			out = append(out, Violation{Rule: DeletedRead, Key: key, Read: r.op, Write: w, Witness: x})
		} else if x := sets.first(w.End()); x != nil && x.Comp < r.op.Inv {
			x = sets.latest(w.End(), r.op.Inv)
			out = append(out, Violation{Rule: StaleRead, Key: key, Read: r.op, Write: w, Witness: x})
		}
	}
	return out
}
