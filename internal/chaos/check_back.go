package chaos

import (
	"fmt"
	"math"
	"sort"
	"strconv"
)

// wentBack applies ReadWentBack to the reads of one key that returned an
// admissible value: each read against the newest acknowledged Set that a
// read over before it began saw. O(n log n): the reads in order of
// invocation, the evidence in order of completion.
func (v *values) wentBack(reads []read, byValue map[string]*Op) []Violation {
	// Each read is held to the evidence over before its own time: its
	// start, less the staleness its kind may have (CheckOptions).
	since := func(r read) int64 { return r.op.Inv - v.c.opt.staleness(r.op.Kind) }
	byInv := make([]read, len(reads))
	copy(byInv, reads)
	sort.SliceStable(byInv, func(i, j int) bool { return since(byInv[i]) < since(byInv[j]) })
	var evid []read
	for _, r := range reads {
		if evidence(byValue[r.value]) {
			evid = append(evid, r)
		}
	}
	// A read is evidence from its end; with replicas, from its write's end
	// too: processes read a key's members in different orders (their zone
	// first, a member one holds down and another not), so while a Set is
	// in flight one may read its value on a member and another, after, the
	// older value on a member the Set has not reached yet. Replicas promise
	// no read older than an acknowledged write, not reads in real-time
	// order (client's package doc, "Replicas").
	avail := func(e read) int64 {
		if v.c.h.Info.Replicas > 1 {
			return max(e.op.Comp, byValue[e.value].Comp)
		}
		return e.op.Comp
	}
	sort.SliceStable(evid, func(i, j int) bool { return avail(evid[i]) < avail(evid[j]) })
	var out []Violation
	var seen *read // the evidence whose write began last
	newest := int64(math.MinInt64)
	next := 0
	for _, r := range byInv {
		for ; next < len(evid) && avail(evid[next]) < since(r); next++ {
			if w := byValue[evid[next].value]; w.Inv > newest {
				seen, newest = &evid[next], w.Inv
			}
		}
		w := byValue[r.value]
		if seen == nil || v.end(w) >= newest {
			continue
		}
		w1 := byValue[seen.value]
		out = append(out, Violation{Rule: ReadWentBack, Key: v.key, Read: r.op, Write: w, Witness: seen.op,
			Detail: fmt.Sprintf("%s read %s before, written by %s, which began %s after this value's write was over",
				seen.op.ID, strconv.Quote(seen.value), w1.ID, ms(w1.Inv-v.end(w)))})
	}
	return out
}
