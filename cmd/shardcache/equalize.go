package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/shardcache/shardcache/ring"
)

// equalizeUsage is the help of --equalize, the same on every command that
// builds a ring.
const equalizeUsage = "equalize the rings to this `tolerance`: every node's exact share within it (0.01: 1%) of its fair share, " +
	"as the client's Options.Equalize, which every client of a fleet must share; 0, the default, is the classic ring"

// addEqualizeFlag defines --equalize on fs.
func addEqualizeFlag(fs *flag.FlagSet) *float64 {
	return fs.Float64("equalize", 0, equalizeUsage)
}

// checkEqualize refuses a tolerance the client refuses.
func checkEqualize(tol float64) error {
	if !(tol >= 0 && tol < 1) { // NaN too
		return fmt.Errorf("--equalize %v: want 0 (the classic ring) or a tolerance above 0 and below 1, such as 0.01", tol)
	}
	return nil
}

// planBalance is how far the node furthest from its fair share is from it,
// relative (ring.Deviation), on each side of the change.
type planBalance struct {
	Before float64 `json:"before"`
	After  float64 `json:"after"`
}

// planEqualization is, with --equalize from a ring, what equalizing gives
// and costs on this change (ring.CompareEqualization): the keys each kind
// of ring moves, and the balance of each.
type planEqualization struct {
	Tolerance float64 `json:"tolerance"`
	// Minimum is the least any placement must move: the fair share the
	// nodes gain.
	Minimum   float64        `json:"minimum"`
	Classic   planRingChange `json:"classic"`
	Equalized planRingChange `json:"equalized"`
	// OverClassic and OverMinimum are the equalized ring's keys moved over
	// the classic ring's and over Minimum (0 when that is 0).
	OverClassic float64 `json:"over_classic"`
	OverMinimum float64 `json:"over_minimum"`
}

// planRingChange is the change on one kind of ring (ring.RingChange).
type planRingChange struct {
	Moved float64 `json:"moved"` // keys whose node changes
	// Least is the least any placement with these rings' shares moves.
	Least  float64 `json:"least"`
	Before float64 `json:"deviation_before"` // ring.Deviation before
	After  float64 `json:"deviation_after"`  // and after
}

// equalization compares the classic and the equalized rings of the change
// from in.from to in.to (ring to ring).
func equalization(in planInput) (*planEqualization, error) {
	e, err := ring.CompareEqualization(in.from, in.to, ring.WithVnodes(in.vnodes), ring.WithEqualize(in.equalize))
	if err != nil {
		return nil, err
	}
	change := func(c ring.RingChange) planRingChange {
		return planRingChange{Moved: c.Moved, Least: c.Least, Before: c.Before, After: c.After}
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	return &planEqualization{
		Tolerance: in.equalize, Minimum: e.Minimum,
		Classic: change(e.Classic), Equalized: change(e.Equalized),
		OverClassic: ratio(e.Equalized.Moved, e.Classic.Moved), OverMinimum: ratio(e.Equalized.Moved, e.Minimum),
	}, nil
}

// writeRingBalance prints the balance of the rings and, with --equalize, what
// equalizing costs on the change.
func writeRingBalance(w io.Writer, rep *planReport) {
	ringOf := "classic ring"
	if rep.Equalize > 0 {
		ringOf = "ring equalized to " + pct(rep.Equalize, 2)
	}
	fmt.Fprintf(w, "\nBalance (%s): the node furthest from its fair share is %s off it before, %s after\n",
		ringOf, pct(rep.Balance.Before, 2), pct(rep.Balance.After, 2))
	fmt.Fprintln(w, "(off: a node's share over its fair share, less 1).")
	e := rep.Equalization
	if e == nil {
		return
	}
	fmt.Fprintf(w, "Equalizing to %s costs on this change: %s of keys move, against %s on the classic ring (×%.3f)\n",
		pct(e.Tolerance, 2), pct(e.Equalized.Moved, 2), pct(e.Classic.Moved, 2), e.OverClassic)
	fmt.Fprintf(w, "and %s that any placement must move (×%.3f); it gives nodes at most %s and %s off their fair share,\n",
		pct(e.Minimum, 2), e.OverMinimum, pct(e.Equalized.Before, 2), pct(e.Equalized.After, 2))
	fmt.Fprintf(w, "before and after, where the classic ring's are %s and %s off.\n", pct(e.Classic.Before, 2), pct(e.Classic.After, 2))
}
