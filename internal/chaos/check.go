package chaos

import (
	"slices"
	"sort"
	"strconv"
	"time"
)

// Rule is a property of cache semantics that a history can break.
type Rule string

// Rules of values (keys written with Set and GetOrLoad's loads); the
// package doc says why they are what they are. A value a read returns must
// be admissible: written by a write w such that no acknowledged write or
// delete x of the key has w before it and the read after it in real time
// (w.Comp < x.Inv and x.Comp < r.Inv). A failed write takes effect, if
// ever, before any acknowledged write or delete that began after it
// returned, unless a fault on the key's nodes may have held it back: so its
// value is admissible until such a write or delete completed. A read of an
// acknowledged Set's value is evidence: a later read may not go back to a
// value older than it. And a miss needs a cause once the key's value is
// known.
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
	// StaleFailedRead is the value of a failed (or cut short) write read
	// after an acknowledged write or delete of the key that began after the
	// failed call returned (Op.Comp; for one cut short by a client kill,
	// the kill) had completed, with no fault on the key's nodes from the
	// failed call's start to that completion: a request does not overtake
	// one sent after it, but a stopped or cut-off node may hold one back.
	StaleFailedRead Rule = "failed write read after its successor"
	// ReadWentBack is a read that returned a value whose write was over
	// (its end, for a failed write as for StaleFailedRead) before the write
	// of a value an earlier read returned began: that earlier read, which
	// ended before this one began, saw the newer value, so the older one
	// was overwritten for good. The newer value's write must be an
	// acknowledged Set: a failed one may have reached one replica only, and
	// a load's value may never have been stored (GetOrLoad hands it to its
	// callers all the same). With replicas the earlier read counts only
	// once that Set returned too (the package doc says why).
	ReadWentBack Rule = "read went back"
	// LostKey is a miss with no explanation: the key's last acknowledged
	// write completed before the miss began, and between that write's start
	// and the miss's end nothing may have removed its value: no delete (an
	// acknowledged one, or a failed one before its successor, as for
	// StaleFailedRead), no expiry (Op.TTL), no eviction on the key's nodes
	// (CheckOptions.Evictions), no fault on them (a server fault, up to
	// CheckOptions.FaultSlack after it ended, or with FailOpen a failed
	// operation of theirs), no end of a migration's window or change of
	// topology (WindowSlack either side). One violation is reported per
	// lost write, naming its first unexplained miss.
	LostKey Rule = "acknowledged value lost"
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
	// Read is the read (or Incr) that saw what it must not; for LostKey,
	// the first miss nothing explains.
	Read *Op
	// Write wrote the value read (for LostKey, the value lost): nil for a
	// counter.
	Write *Op
	// Witness is what makes the value inadmissible: the acknowledged write
	// or delete between Write and Read that completed last before the read
	// (for ReadWentBack, the earlier read that saw the newer value), or for
	// a counter the earlier observation (or the reset) it contradicts; nil
	// when the rule needs none.
	Witness *Op
	// Detail says what was expected, for counters, and for ReadWentBack
	// and LostKey what the checker weighed.
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
	// Explained counts the misses of a value key after an acknowledged
	// write of it, by the first cause found that explains them (see
	// Cause); the others are LostKey's. Misses of a key never acknowledged
	// need no cause and are not counted.
	Explained map[Cause]int
	// Evicted are the nodes that evicted keys (CheckOptions.Evictions),
	// sorted: their keys' misses are explained, and a report says so.
	Evicted []string
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

// Cause is what explains a miss of an acknowledged value (Result.Explained).
type Cause string

// Causes, in the order the checker tries them.
const (
	// ByDelete: a delete of the key, acknowledged or possibly applied.
	ByDelete Cause = "delete"
	// ByExpiry: the value, or one written after it, may have expired.
	ByExpiry Cause = "expiry"
	// ByEviction: a node of the key evicted keys during the run.
	ByEviction Cause = "eviction"
	// ByFault: a server fault on a node of the key.
	ByFault Cause = "fault"
	// ByFailure: with FailOpen, a failed operation on a node of the key,
	// which may have held it down (its writes dropped, its reads missed).
	ByFailure Cause = "failure"
	// ByMigration: the end of a migration's window (the keys the old owners
	// alone held are gone) or a change of topology.
	ByMigration Cause = "migration"
)

// DefaultFaultSlack is CheckOptions.FaultSlack's default: how long after a
// fault ends its effects may last. A breaker opened by it closes only at
// the next probe that succeeds (a FailOpen client drops writes meanwhile),
// a replica's hinted keys are deleted then, and requests held back by a
// stopped or cut-off node are applied when it is back.
const DefaultFaultSlack = 2 * time.Second

// ExpiryGrain is how much earlier than its TTL a value may expire:
// Memcached counts expiries in whole seconds of its own clock.
const ExpiryGrain = time.Second

// CheckOptions is what the harness knows of a run besides its history.
// The zero value is Check's: every fault may touch every key, and no node
// evicted anything.
type CheckOptions struct {
	// Owners returns the names of the nodes (Fault.Target's, "n3") that
	// may hold key at some time of the run: old and new owners, every
	// replica. Only faults (and failures, with FailOpen) on these explain
	// the key's misses or hold its failed writes back. Nil, or no node
	// for a key: every node.
	Owners func(key string) []string
	// Evictions are the keys each node evicted during the run, by node
	// name (Redis's evicted_keys, Memcached's evictions): a node with any
	// explains every miss of the keys it owns. Nil: none evicted.
	Evictions map[string]int64
	// FailOpen says the clients ran with client.Options.FailOpen: a node
	// they hold down drops writes (acknowledged) and misses reads. A
	// breaker opens on failures, faults or not (timeouts under load), so
	// every failed operation then counts as a fault on its keys' nodes,
	// from its start to FaultSlack after it returned. Check sets it when a
	// process's statistics show a write dropped or a read missed.
	FailOpen bool
	// Failures counts every failed operation as trouble on its own keys
	// (FailOpen: on every key of their nodes): a request that timed out on
	// a node no fault touched (a starved one, under load) may still be
	// applied after one sent later on another connection (Memcached's
	// worker threads, a proxy's goroutines), so its failure voids the
	// order the failed-write rule assumes for its keys, and a replica set
	// may purge a key whose write failed on one replica.
	Failures bool
	// FaultSlack is how long after a fault ends (and, with FailOpen, after
	// a failed operation returns) the node counts as faulted: 0 is
	// DefaultFaultSlack, a negative value none.
	FaultSlack time.Duration
	// Staleness is how far behind the cache a read of one of StaleKinds
	// may be by design: a near cache's MaxAge (Memcached tells no client
	// of a change; a copy filled during a write may hold the value it
	// replaces until then). Such a read (a miss too, for LostKey) is held
	// to the writes, deletes and reads over Staleness before it began,
	// not to those over when it began; any other read to those over when
	// it began. 0: none. The counter rules do not take it (a run with a
	// bound must not read counters through a near cache), but in a gutter
	// run (RunInfo.Gutter) a delete takes effect up to Staleness after it
	// returns (checkCounter).
	Staleness time.Duration
	// StaleKinds are the kinds of read Staleness applies to: those a near
	// cache may answer. Nil: every kind.
	StaleKinds []Kind
}

// staleness returns how far behind the cache a read of kind k may be.
func (o *CheckOptions) staleness(k Kind) int64 {
	if o.StaleKinds != nil && !slices.Contains(o.StaleKinds, k) {
		return 0
	}
	return int64(o.Staleness)
}

// read is one key's share of a read: a Get, a GetOrLoad, or one key of a
// GetMulti.
type read struct {
	op    *Op
	value string
}

// keyOps is the history of one key.
type keyOps struct {
	writes  []*Op // Set, Load, Add, StoreCAS, a SetMulti's share
	deletes []*Op // Delete, a DeleteMulti's share
	incrs   []*Op
	decrs   []*Op
	reads   []read
	misses  []*Op // Gets that missed, GetMultis that completed without the key
}

// Check checks a history against cache semantics: the rules of values for
// every key never incremented, those of counters for every key Incr
// touched. It is CheckWith with no more than the history knows.
func Check(h *History) *Result { return CheckWith(h, CheckOptions{}) }

// CheckWith checks a history against cache semantics, with what the
// harness knows besides it (opt). It is exact for the rules and runs in
// O(n log n).
func CheckWith(h *History, opt CheckOptions) *Result {
	res := &Result{Ops: make(map[Kind]int), Explained: make(map[Cause]int)}
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
		switch {
		case o.Kind.writesValue() || o.Kind.deletes():
			if o.Status == NotStored {
				continue // a conditional write refused: nothing written
			}
			for _, k := range o.Keys {
				w := keyShare(o, k)
				if o.Kind.deletes() {
					at(k).deletes = append(at(k).deletes, w)
				} else {
					at(k).writes = append(at(k).writes, w)
				}
			}
		case o.Kind == Incr:
			at(o.Key()).incrs = append(at(o.Key()).incrs, o)
		case o.Kind == Decr:
			at(o.Key()).decrs = append(at(o.Key()).decrs, o)
		case o.Kind.singleRead() || o.Kind.multiRead():
			// A failed multi-get's hits are answers of the nodes that
			// answered: they count. Its misses may be its failures, and
			// GetMultiOrLoad's are loaded: neither is checked.
			for _, k := range o.Keys {
				v, hit, checked := readOf(o, k)
				switch {
				case hit:
					at(k).reads = append(at(k).reads, read{o, v})
					res.Reads++
				case checked:
					at(k).misses = append(at(k).misses, o)
					res.Misses++
				}
			}
		}
	}
	resets := globalResets(h)
	delLag := int64(0)
	if h.Info.Gutter {
		delLag = int64(opt.Staleness)
	}
	for _, f := range h.Faults {
		if f.Wipes() {
			res.Wipes++
		}
	}
	c := newChecker(h, opt)
	res.Evicted = c.evicted
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ko := keys[k]
		if len(ko.incrs)+len(ko.decrs) > 0 {
			res.Counters++
			res.Violations = append(res.Violations, checkCounter(k, ko, resets, delLag)...)
		} else {
			res.Keys++
			res.Violations = append(res.Violations, c.checkValues(k, ko, res.Explained)...)
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

// values is the check of one value key: its acknowledged writes and
// deletes, its faults, and the bound of each failed operation's effect.
type values struct {
	c          *checker
	key        string
	sets, dels superseders
	trouble    *trouble // what befell the key's nodes
	lims       map[*Op]int64
}

// end returns when o's effect is over for certain: its completion, or for
// a failed or cut-short operation the completion of its first successor
// (an acknowledged write or delete of the key that began after it
// returned) if no fault on the key's nodes may have held o back until
// then; Never if there is none.
func (v *values) end(o *Op) int64 {
	if e := o.End(); e != Never {
		return e
	}
	if l, ok := v.lims[o]; ok {
		return l
	}
	l := int64(Never)
	if x := v.successor(o); x != nil {
		l = x.Comp
	}
	v.lims[o] = l
	return l
}

// successor returns the first successor of a failed or cut-short o that
// bounds its effect, or nil.
func (v *values) successor(o *Op) *Op {
	ret := v.c.returned(o)
	if ret == Never {
		return nil
	}
	x := v.sets.first(ret)
	if d := v.dels.first(ret); d != nil && (x == nil || d.Comp < x.Comp) {
		x = d
	}
	if x == nil || x.Comp >= v.trouble.firstAfter(o.Inv) {
		return nil
	}
	return x
}

// latestSuccessor returns, of o's successors, the one that completed last
// before u (and before any fault that may have held o back): the witness
// of StaleFailedRead.
func (v *values) latestSuccessor(o *Op, u int64) *Op {
	ret := v.c.returned(o)
	u = min(u, v.trouble.firstAfter(o.Inv))
	x := v.sets.latest(ret, u)
	if d := v.dels.latest(ret, u); d != nil && (x == nil || d.Comp > x.Comp) {
		x = d
	}
	return x
}

// evidence reports whether a read of w's value shows that the cache held
// it, newer than anything written before w began: w is an acknowledged Set
// (or SetMulti's share, Add, StoreCAS: each writes every owner as Set does).
// A failed Set may have reached one replica only, and a load's value may
// never have been stored (GetOrLoad hands it to its callers all the same).
func evidence(w *Op) bool { return w.Kind != Load && w.Kind.writesValue() && w.Status == OK }

// checkValues applies the rules of values to one key, counting the misses
// explained in explained.
func (c *checker) checkValues(key string, ko *keyOps, explained map[Cause]int) []Violation {
	v := &values{c: c, key: key, sets: newSuperseders(ko.writes), dels: newSuperseders(ko.deletes),
		trouble: c.troubleOf(key), lims: make(map[*Op]int64)}
	byValue := make(map[string]*Op, len(ko.writes))
	for _, w := range ko.writes {
		byValue[w.Value] = w
	}
	var out []Violation
	// The reads that returned an admissible value, for ReadWentBack.
	var ok []read
	for _, r := range ko.reads {
		w := byValue[r.value]
		at := r.op.Inv - c.opt.staleness(r.op.Kind) // what the read must have seen: what was over by then
		switch {
		case w == nil:
			out = append(out, Violation{Rule: UnknownValue, Key: key, Read: r.op, Detail: strconv.Quote(r.value)})
			continue
		case w.Inv > r.op.Comp:
			out = append(out, Violation{Rule: FutureRead, Key: key, Read: r.op, Write: w})
			continue
		}
		// A delete is the worse news, so it is reported first.
		if x := v.dels.first(w.End()); x != nil && x.Comp < at {
			x = v.dels.latest(w.End(), at)
			out = append(out, Violation{Rule: DeletedRead, Key: key, Read: r.op, Write: w, Witness: x})
		} else if x := v.sets.first(w.End()); x != nil && x.Comp < at {
			x = v.sets.latest(w.End(), at)
			out = append(out, Violation{Rule: StaleRead, Key: key, Read: r.op, Write: w, Witness: x})
		} else if w.End() == Never && v.end(w) < at {
			x := v.latestSuccessor(w, at)
			out = append(out, Violation{Rule: StaleFailedRead, Key: key, Read: r.op, Write: w, Witness: x})
		} else {
			ok = append(ok, r)
		}
	}
	out = append(out, v.wentBack(ok, byValue)...)
	out = append(out, v.lost(ko, explained)...)
	return out
}
