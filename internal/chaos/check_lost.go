package chaos

import (
	"fmt"
	"sort"
	"strings"
)

// lost applies LostKey to the misses of one key, counting in explained
// those a cause explains. Each miss is weighed against the acknowledged
// Set that began last of those over before the miss began: the later the
// write, the fewer causes can fall between. O(n log n).
func (v *values) lost(ko *keyOps, explained map[Cause]int) []Violation {
	if len(ko.misses) == 0 {
		return nil
	}
	var acked []*Op
	var dels, expiries []span
	for _, w := range ko.writes {
		if evidence(w) { // an acknowledged write of the application's
			acked = append(acked, w)
		}
		if w.TTL > 0 {
			// The value expires TTL after it was applied, at the earliest
			// at its write's start (less ExpiryGrain), and matters only if
			// it may have been applied after the write weighed began.
			at := w.Inv + int64(max(0, w.TTL-ExpiryGrain))
			expiries = append(expiries, span{at, v.end(w)})
		}
	}
	if len(acked) == 0 {
		return nil
	}
	// A delete removes the value if it may take effect after the write
	// weighed (w) and before the miss. An acknowledged one: if it was
	// under way at some time of [w.Inv, m.Comp]. A failed or cut-short one
	// d takes effect, if ever, before its successors (see values.end): if w
	// is not one of them, because it began before d returned (heldBack)
	// or completed after a fault that may have held d back (throughFault),
	// d may land after it, up to d's first successor's completion.
	var heldBack, throughFault []span
	for _, d := range ko.deletes {
		if d.End() != Never {
			dels = append(dels, span{d.Inv, d.Comp})
			continue
		}
		heldBack = append(heldBack, span{d.Inv, v.c.returned(d)})
		// Only trouble before d's first successor completed can hold d
		// back past it: after that, d has landed or never will.
		if t := v.trouble.firstAfter(d.Inv); t != Never && max(d.Inv, t) < v.end(d) {
			throughFault = append(throughFault, span{max(d.Inv, t), v.end(d)})
		}
	}
	delSet, heldSet, faultSet := newSpanSet(dels), newSpanSet(heldBack), newSpanSet(throughFault)
	expirySet := newSpanSet(expiries)
	sort.Slice(acked, func(i, j int) bool { return acked[i].Comp < acked[j].Comp })
	latest := make([]*Op, len(acked)) // latest[i]: of acked[:i+1], the one invoked last
	for i, w := range acked {
		latest[i] = w
		if i > 0 && latest[i-1].Inv > w.Inv {
			latest[i] = latest[i-1]
		}
	}
	tr := v.trouble
	type loss struct {
		misses      int
		first, last *Op
	}
	losses := make(map[*Op]*loss)
	var order []*Op
	for _, m := range ko.misses {
		// A read may not have seen a write over less than its staleness
		// before it began.
		since := m.Inv - v.c.opt.staleness(m.Kind)
		i := sort.Search(len(acked), func(i int) bool { return acked[i].Comp >= since })
		if i == 0 {
			continue // nothing acknowledged yet: a miss is no news
		}
		w := latest[i-1]
		lo, hi := w.Inv, m.Comp
		var cause Cause
		switch {
		case delSet.overlaps(lo, hi) || heldSet.overlaps(lo, hi) || faultSet.overlaps(lo, w.Comp):
			cause = ByDelete
		case expirySet.overlaps(lo, hi):
			cause = ByExpiry
		case tr.evicting:
			cause = ByEviction
		case tr.faults.overlaps(lo, hi):
			cause = ByFault
		case tr.failures.overlaps(lo, hi):
			cause = ByFailure
		case v.c.moves.overlaps(lo, hi):
			cause = ByMigration
		}
		if cause != "" {
			explained[cause]++
			continue
		}
		l := losses[w]
		if l == nil {
			l = &loss{first: m}
			losses[w] = l
			order = append(order, w)
		}
		l.misses++
		l.last = m
	}
	nodes := "any node"
	if tr.owners != nil {
		nodes = strings.Join(tr.owners, ", ")
	}
	var out []Violation
	for _, w := range order {
		l := losses[w]
		out = append(out, Violation{Rule: LostKey, Key: v.key, Read: l.first, Write: w,
			Detail: fmt.Sprintf("missed by %d reads from %s to %s; between the write's start and each miss's end no delete, expiry, eviction, fault (on %s) or migration's end",
				l.misses, rel(v.c.h, l.first.Inv), rel(v.c.h, l.last.Comp), nodes)})
	}
	return out
}
