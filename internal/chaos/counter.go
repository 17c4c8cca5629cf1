package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// WindowSlack is how long around a migration's end the checker takes a
// counter as possibly reset: a counter the old owner alone held (never
// incremented, read or swept in the window) is out of reach once the window
// ends, and the next Incr starts it again; operations routed just before the
// end may still be under way for about one operation timeout.
const WindowSlack = 2 * time.Second

// A counter is what Incr(key, 1) counts (the harness always adds 1). In a
// cache a counter can lose its value at any time: a Delete, a node's restart
// (which one owns the key the checker does not know, so a restart counts for
// every key), the end of a migration's window (WindowSlack). Each of these is
// a reset, an interval in which the counter may go back to zero: an
// acknowledged delete's call, a failed one's invocation onwards, a restart
// from the kill to the server answering again. Between resets a counter only
// counts. So, for observations a and b of a counter (an acknowledged Incr's
// result, a read's value), where a completed before b began and no reset
// could fall between them (none began before b ended and ended after a
// began):
//
//   - CounterBackwards: b is at least a, and more than a if b is an Incr.
//   - CounterBelow: b is at least the number of acknowledged increments
//     that completed before it began with no reset that could fall between
//     them and b (plus one if b is an Incr): an acknowledged increment is
//     never lost but by a reset.
//
// And for every observation b:
//
//   - CounterAbove: b is at most the number of increments (of any outcome:
//     a failed one may have been applied) invoked before b ended, less
//     those that completed before the last acknowledged delete that
//     completed before b began: a counter never counts what nobody added.
//   - CounterDuplicate: two acknowledged Incrs return the same value only if
//     a reset could fall between them: each increment makes a new value.
//   - CounterGarbage: a read returns an integer.
//
// These are exact under misses: a miss says nothing, and every way a cache
// may lose a counter is a reset; a counter that was not reset must count as
// a single server would.
//
// A Decr (Incr by -1) takes one back, and on Memcached stops at 0 (a
// counter is unsigned there). A decrement may have been applied between
// two observations when its call could have taken effect between them: it
// began before the later one ended and was not over (Op.End) before the
// earlier one began. So, with D that number of decrements:
//
//   - CounterBackwards: b is at least a - D (a's own decrement not
//     counted), and more than that if b is an Incr.
//   - CounterBelow: b is at least the acknowledged increments counted
//     above less every decrement that may have been applied since the
//     counter last started (since the last acknowledged delete over before
//     b began, or ever).
//   - CounterAbove counts increments only: a decrement, or a stop at 0,
//     never raises a counter above them.
//   - CounterDuplicate: two acknowledged Incrs return the same value only if
//     a reset or a decrement could fall between them, and two acknowledged
//     Decrs the same value other than 0 (where Memcached stops) only if a
//     reset or an increment could.
//
// Stopping at 0 only raises a counter above the sum of its deltas, which
// none of these bounds from above but CounterAbove, which ignores
// decrements: they stay exact for Redis's signed counters and sound for
// Memcached's.

// span is an interval in which a counter may have been reset.
type span struct{ start, end int64 }

// globalResets are the resets of every counter: restarts and the end of a
// migration.
func globalResets(h *History) []span {
	var out []span
	for _, f := range h.Faults {
		switch {
		case (h.Info.Replicas > 1 || h.Info.Gutter) && !f.Event() && f.Kind != KillClient:
			// A replica that missed writes during the fault has them
			// purged once it is back (the client's hints): a counter
			// there restarts, as a busy CI run showed (7, then 1). A
			// node with a gutter has the deletes sent to the gutter
			// meanwhile applied then (its hints, the gutter's log), a
			// node restarted empty included: its processes' writes
			// land there before the replays do.
			out = append(out, span{f.Start, after(f.End, int64(WindowSlack))})
		case f.Wipes():
			out = append(out, span{f.Start, f.End})
		}
	}
	if e := h.Info.MigrationEnd; e != 0 {
		out = append(out, span{e - int64(WindowSlack), e + int64(WindowSlack)})
	}
	return out
}

// resetIndex answers "the latest end of a reset that began before t".
type resetIndex struct {
	start, maxEnd []int64
}

func newResetIndex(spans []span) resetIndex {
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	ix := resetIndex{start: make([]int64, len(spans)), maxEnd: make([]int64, len(spans))}
	m := int64(-1 << 63)
	for i, s := range spans {
		ix.start[i] = s.start
		m = max(m, s.end)
		ix.maxEnd[i] = m
	}
	return ix
}

// latest returns the latest end of the resets that began before t, or
// -inf: an observation that began at or after it is in the same epoch as
// one that ended at t.
func (ix resetIndex) latest(t int64) int64 {
	i := sort.Search(len(ix.start), func(i int) bool { return ix.start[i] >= t })
	if i == 0 {
		return -1 << 63
	}
	return ix.maxEnd[i-1]
}

// obs is one observation of a counter.
type obs struct {
	op    *Op
	value int64
	incr  bool // an acknowledged Incr, not a read
	decr  bool // an acknowledged Decr
	// rank is what CounterBackwards compares a later observation with:
	// value plus the decrements over before op began (plus its own).
	rank int64
}

// timeCount counts the operations that began by a time, and those over
// before one.
type timeCount struct{ inv, end []int64 }

func newTimeCount(ops []*Op) timeCount {
	c := timeCount{inv: make([]int64, len(ops)), end: make([]int64, len(ops))}
	for i, o := range ops {
		c.inv[i], c.end[i] = o.Inv, o.End()
	}
	sort.Slice(c.inv, func(i, j int) bool { return c.inv[i] < c.inv[j] })
	sort.Slice(c.end, func(i, j int) bool { return c.end[i] < c.end[j] })
	return c
}

// begun counts the operations invoked at or before t.
func (c timeCount) begun(t int64) int {
	return sort.Search(len(c.inv), func(i int) bool { return c.inv[i] > t })
}

// over counts the operations over (End) before t.
func (c timeCount) over(t int64) int {
	return sort.Search(len(c.end), func(i int) bool { return c.end[i] >= t })
}

// between counts the operations that may have taken effect in [lo, hi]:
// invoked at or before hi, not over before lo.
func (c timeCount) between(lo, hi int64) int { return c.begun(hi) - c.over(lo) }

// fenwick is a binary indexed tree over positions 1..n answering prefix
// counts and prefix maxima (with the observation that holds it).
type fenwick struct {
	count []int
	best  []*obs
}

func newFenwick(n int) *fenwick {
	return &fenwick{count: make([]int, n+1), best: make([]*obs, n+1)}
}

func (f *fenwick) add(i int, o *obs) {
	for ; i < len(f.count); i += i & -i {
		if o.incr {
			f.count[i]++
		}
		if f.best[i] == nil || f.best[i].rank < o.rank {
			f.best[i] = o
		}
	}
}

// query returns the count of increments and the largest observation at
// positions 1..i.
func (f *fenwick) query(i int) (n int, best *obs) {
	for ; i > 0; i -= i & -i {
		n += f.count[i]
		if b := f.best[i]; b != nil && (best == nil || b.rank > best.rank) {
			best = b
		}
	}
	return n, best
}

// counterText is a counter's value as read, less the spaces Memcached may
// leave after it: a decr that shortens the number pads it instead ("9 "
// after 10; the protocol says the number MAY be space-padded).
func counterText(v string) string { return strings.TrimRight(v, " ") }

// checkCounter applies the rules of counters to one key. lag is how long
// after it returns a delete may take effect: 0, or with a gutter its
// staleness bound (a delete a process sends through the gutter, holding the
// key's node down, is applied there by the others only when they replay
// the gutter's log, client/gutter.go), so a delete is a reset until lag
// after it ends, and counts for CounterAbove from lag after it completed.
func checkCounter(key string, ko *keyOps, global []span, lag int64) []Violation {
	var out []Violation
	spans := append([]span(nil), global...)
	var ackedDel []*Op
	for _, d := range ko.deletes {
		spans = append(spans, span{d.Inv, after(d.End(), lag)})
		if d.Status == OK {
			ackedDel = append(ackedDel, d)
		}
	}
	resets := newResetIndex(spans)
	decs, incs := newTimeCount(ko.decrs), newTimeCount(ko.incrs)
	sort.Slice(ackedDel, func(i, j int) bool { return ackedDel[i].Comp < ackedDel[j].Comp })
	delInvMax := make([]int64, len(ackedDel)) // latest invocation among deletes completed by index
	for i, d := range ackedDel {
		delInvMax[i] = d.Inv
		if i > 0 {
			delInvMax[i] = max(delInvMax[i], delInvMax[i-1])
		}
	}
	// lastDelete returns the latest invocation of an acknowledged delete
	// over (applied everywhere: lag after it completed) before t, false if
	// none: the counter started again after it.
	lastDelete := func(t int64) (int64, bool) {
		i := sort.Search(len(ackedDel), func(i int) bool { return ackedDel[i].Comp+lag >= t })
		if i == 0 {
			return 0, false
		}
		return delInvMax[i-1], true
	}

	var all []*obs
	for _, ops := range [][]*Op{ko.incrs, ko.decrs} {
		for _, o := range ops {
			if o.Status != OK {
				continue
			}
			n, err := strconv.ParseInt(o.Result, 10, 64)
			if err != nil {
				out = append(out, Violation{Rule: CounterGarbage, Key: key, Read: o, Detail: strconv.Quote(o.Result)})
				continue
			}
			all = append(all, &obs{op: o, value: n, incr: o.Kind == Incr, decr: o.Kind == Decr})
		}
	}
	for _, r := range ko.reads {
		n, err := strconv.ParseInt(counterText(r.value), 10, 64)
		if err != nil {
			out = append(out, Violation{Rule: CounterGarbage, Key: key, Read: r.op, Detail: strconv.Quote(r.value)})
			continue
		}
		all = append(all, &obs{op: r.op, value: n})
	}
	// a's decrements between a and b: decs.between(a.Inv, b.Comp), less
	// a's own, is decs.begun(b.Comp) - (decs.over(a.Inv) + own): b is
	// below a exactly when b.value + decs.begun(b.Comp) < a.rank.
	for _, o := range all {
		o.rank = o.value + int64(decs.over(o.op.Inv))
		if o.decr {
			o.rank++
		}
	}

	// Backwards and below: the observations a with a.Comp < b.Inv, inserted
	// in order of completion, indexed by invocation in decreasing order so
	// that "a.Inv >= L" is a prefix.
	byInvDesc := append([]*obs(nil), all...)
	sort.Slice(byInvDesc, func(i, j int) bool { return byInvDesc[i].op.Inv > byInvDesc[j].op.Inv })
	pos := make(map[*obs]int, len(all))
	for i, o := range byInvDesc {
		pos[o] = i + 1
	}
	byComp := append([]*obs(nil), all...)
	sort.Slice(byComp, func(i, j int) bool { return byComp[i].op.Comp < byComp[j].op.Comp })
	byInv := append([]*obs(nil), all...)
	sort.Slice(byInv, func(i, j int) bool { return byInv[i].op.Inv < byInv[j].op.Inv })
	tree := newFenwick(len(all))
	next := 0
	for _, b := range byInv {
		for next < len(byComp) && byComp[next].op.Comp < b.op.Inv {
			tree.add(pos[byComp[next]], byComp[next])
			next++
		}
		l := resets.latest(b.op.Comp)
		// Positions 1..k hold invocations >= l.
		k := sort.Search(len(byInvDesc), func(i int) bool { return byInvDesc[i].op.Inv < l })
		acked, best := tree.query(k)
		step := int64(0)
		if b.incr {
			step = 1
		}
		// The decrements that may count in b: since the counter last
		// started for certain, or all.
		since := int64(-1 << 63)
		if d, ok := lastDelete(b.op.Inv); ok {
			since = d
		}
		taken := int64(decs.between(since, b.op.Comp))
		switch {
		case best != nil && b.value+int64(decs.begun(b.op.Comp)) < best.rank+step:
			detail := fmt.Sprintf("%d after %d, no reset between", b.value, best.value)
			if d := decs.begun(b.op.Comp) - int(best.rank-best.value); d > 0 {
				detail = fmt.Sprintf("%d after %d, no reset and at most %d decrements between", b.value, best.value, d)
			}
			out = append(out, Violation{Rule: CounterBackwards, Key: key, Read: b.op, Witness: best.op, Detail: detail})
		case b.value+taken < int64(acked)+step:
			detail := fmt.Sprintf("%d, after %d acknowledged increments since the last possible reset", b.value, acked)
			if taken > 0 {
				detail += fmt.Sprintf(" and at most %d decrements", taken)
			}
			out = append(out, Violation{Rule: CounterBelow, Key: key, Read: b.op, Detail: detail})
		}
	}

	// Above: increments invoked before b ended, less those over before the
	// last acknowledged delete that completed before b began.
	for _, b := range all {
		invoked := sort.Search(len(incs.inv), func(i int) bool { return incs.inv[i] >= b.op.Comp })
		gone := 0
		if d, ok := lastDelete(b.op.Inv); ok {
			gone = incs.over(d)
		}
		if limit := int64(invoked - gone); b.value > limit {
			out = append(out, Violation{Rule: CounterAbove, Key: key, Read: b.op,
				Detail: fmt.Sprintf("%d, but at most %d increments could have counted", b.value, limit)})
		}
	}

	// Duplicates: acknowledged Incrs of equal results need a reset or a
	// decrement between, Decrs a reset or an increment (or Memcached's
	// stop at 0).
	out = append(out, duplicates(key, all, resets, func(o *obs) bool { return o.incr }, decs, "decrement")...)
	out = append(out, duplicates(key, all, resets, func(o *obs) bool { return o.decr && o.value != 0 }, incs, "increment")...)
	return out
}

// duplicates applies CounterDuplicate to the observations that pick
// chooses: two of one value need a reset, or an operation of undo (named
// undoing), that may fall between them.
func duplicates(key string, all []*obs, resets resetIndex, pick func(*obs) bool, undo timeCount, undoing string) []Violation {
	var out []Violation
	groups := make(map[int64][]*obs)
	for _, o := range all {
		if pick(o) {
			groups[o.value] = append(groups[o.value], o)
		}
	}
	values := make([]int64, 0, len(groups))
	for v := range groups {
		values = append(values, v)
	}
	sort.Slice(values, func(i, j int) bool { return values[i] < values[j] })
	for _, v := range values {
		g := groups[v]
		sort.Slice(g, func(i, j int) bool { return g[i].op.Inv < g[j].op.Inv })
	pairs:
		for i := range g {
			for j := i + 1; j < len(g) && j < i+64; j++ {
				a, b := g[i].op, g[j].op
				lo, hi := min(a.Inv, b.Inv), max(a.Comp, b.Comp)
				if resets.latest(hi) > lo || undo.between(lo, hi) > 0 {
					continue
				}
				detail := fmt.Sprintf("both returned %d, no reset between", v)
				if len(undo.inv) > 0 {
					detail = fmt.Sprintf("both returned %d, no reset or %s between", v, undoing)
				}
				out = append(out, Violation{Rule: CounterDuplicate, Key: key, Read: b, Witness: a, Detail: detail})
				break pairs
			}
		}
	}
	return out
}
