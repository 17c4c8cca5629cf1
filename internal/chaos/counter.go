package chaos

import (
	"fmt"
	"sort"
	"strconv"
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

// span is an interval in which a counter may have been reset.
type span struct{ start, end int64 }

// globalResets are the resets of every counter: restarts and the end of a
// migration.
func globalResets(h *History) []span {
	var out []span
	for _, f := range h.Faults {
		if f.Wipes() {
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
}

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
		if f.best[i] == nil || f.best[i].value < o.value {
			f.best[i] = o
		}
	}
}

// query returns the count of increments and the largest observation at
// positions 1..i.
func (f *fenwick) query(i int) (n int, best *obs) {
	for ; i > 0; i -= i & -i {
		n += f.count[i]
		if b := f.best[i]; b != nil && (best == nil || b.value > best.value) {
			best = b
		}
	}
	return n, best
}

// checkCounter applies the rules of counters to one key.
func checkCounter(key string, ko *keyOps, global []span) []Violation {
	var out []Violation
	spans := append([]span(nil), global...)
	var ackedDel []*Op
	for _, d := range ko.deletes {
		spans = append(spans, span{d.Inv, d.End()})
		if d.Status == OK {
			ackedDel = append(ackedDel, d)
		}
	}
	resets := newResetIndex(spans)

	var all []*obs
	for _, o := range ko.incrs {
		if o.Status != OK {
			continue
		}
		n, err := strconv.ParseInt(o.Result, 10, 64)
		if err != nil {
			out = append(out, Violation{Rule: CounterGarbage, Key: key, Read: o, Detail: strconv.Quote(o.Result)})
			continue
		}
		all = append(all, &obs{op: o, value: n, incr: true})
	}
	for _, r := range ko.reads {
		n, err := strconv.ParseInt(r.value, 10, 64)
		if err != nil {
			out = append(out, Violation{Rule: CounterGarbage, Key: key, Read: r.op, Detail: strconv.Quote(r.value)})
			continue
		}
		all = append(all, &obs{op: r.op, value: n})
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
		switch {
		case best != nil && b.value < best.value+step:
			out = append(out, Violation{Rule: CounterBackwards, Key: key, Read: b.op, Witness: best.op,
				Detail: fmt.Sprintf("%d after %d, no reset between", b.value, best.value)})
		case b.value < int64(acked)+step:
			out = append(out, Violation{Rule: CounterBelow, Key: key, Read: b.op,
				Detail: fmt.Sprintf("%d, after %d acknowledged increments since the last possible reset", b.value, acked)})
		}
	}

	// Above: increments invoked before b ended, less those over before the
	// last acknowledged delete that completed before b began.
	incInv := make([]int64, len(ko.incrs))
	incEnd := make([]int64, len(ko.incrs))
	for i, o := range ko.incrs {
		incInv[i], incEnd[i] = o.Inv, o.End()
	}
	sort.Slice(incInv, func(i, j int) bool { return incInv[i] < incInv[j] })
	sort.Slice(incEnd, func(i, j int) bool { return incEnd[i] < incEnd[j] })
	sort.Slice(ackedDel, func(i, j int) bool { return ackedDel[i].Comp < ackedDel[j].Comp })
	delInvMax := make([]int64, len(ackedDel)) // latest invocation among deletes completed by index
	for i, d := range ackedDel {
		delInvMax[i] = d.Inv
		if i > 0 {
			delInvMax[i] = max(delInvMax[i], delInvMax[i-1])
		}
	}
	for _, b := range all {
		invoked := sort.Search(len(incInv), func(i int) bool { return incInv[i] >= b.op.Comp })
		gone := 0
		if i := sort.Search(len(ackedDel), func(i int) bool { return ackedDel[i].Comp >= b.op.Inv }); i > 0 {
			d := delInvMax[i-1]
			gone = sort.Search(len(incEnd), func(i int) bool { return incEnd[i] >= d })
		}
		if limit := int64(invoked - gone); b.value > limit {
			out = append(out, Violation{Rule: CounterAbove, Key: key, Read: b.op,
				Detail: fmt.Sprintf("%d, but at most %d increments could have counted", b.value, limit)})
		}
	}

	// Duplicates: acknowledged Incrs of equal results need a reset between.
	groups := make(map[int64][]*obs)
	for _, o := range all {
		if o.incr {
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
				if resets.latest(hi) > lo {
					continue
				}
				out = append(out, Violation{Rule: CounterDuplicate, Key: key, Read: b, Witness: a,
					Detail: fmt.Sprintf("both returned %d, no reset between", v)})
				break pairs
			}
		}
	}
	return out
}
