package ring

import (
	"math"
	"slices"
)

// Equalization.
//
// A classic ring's shares stray from the weights by about 1/sqrt(points of
// the node): at 512 vnodes the worst of 8 nodes often holds 10% more than
// its fair share, and every node must be provisioned for the worst one. An
// equalized ring keeps the definition of a ring (a node's points are a
// prefix of its sequence Name#VN0, Name#VN1, ...) and chooses the length of
// each prefix, starting from the classic one, so that every node's exact
// share is within the tolerance of its weight's fair share:
//
//  1. Start from round(Weight×vnodes) points per node.
//  2. Compute every node's exact share from the arcs.
//  3. Every node outside [fair×(1-tol), fair×(1+tol)] takes as many of its
//     next points, or drops as many of its last points, as its mean arc
//     says it needs to reach fair×(1-tol/2) or fair×(1+tol/2): the nearer
//     half of the band, so that a node is moved as little as it can be and
//     a lucky arc does not throw it out the other side. Nodes inside the
//     band are left alone: they change only through their neighbours.
//  4. Repeat from 2 until every node is in the band, at most
//     equalizeRounds times.
//
// Every step is integer arithmetic on arcs of the 2^64 hash space, but
// for the band's ends, computed once from the weights with float64 products
// that no machine can fuse: the counts are the same on every machine, as a
// placement must be. Nodes are taken in Name order, so the result depends on
// the set of nodes and their weights only.
//
// A node whose points are too few for the tolerance (a step of one point
// there moves its share by more than the band is wide, at around
// 2/tol points) may not settle: the rounds then end with the counts they
// reached, the same on every machine, and Balance tells how far off they
// are. At DefaultVnodes and DefaultTolerance, every node of the fleets
// tried (3 to 100 nodes of random names) settles within a few rounds.
//
// The cost is movement: adding a node to a classic ring moves only the keys
// the new node takes, but the new node's points take unevenly from the
// others, and an equalized ring then corrects them, which moves keys
// between old nodes too. EqualizeCost computes both for a change.

// DefaultTolerance is the equalization's tolerance when WithEqualize is
// given 0: every node's share within 1% of its fair share.
const DefaultTolerance = 0.01

// MinTolerance is the smallest tolerance WithEqualize accepts: below it the
// band is narrower than most nodes' arcs at any vnode count.
const MinTolerance = 0.001

// equalizeRounds bounds the rounds of adjustment. The fleets of the tests
// settle in under 20.
const equalizeRounds = 64

// WithEqualize makes New equalize the ring: each node's point count is
// adjusted, from round(Weight×vnodes), until every node's exact share is
// within tolerance (relative: 0.01 is 1%) of its weight's fair share (see
// "Equalization" in equalize.go). 0 means DefaultTolerance; a tolerance
// below MinTolerance or from 1 up is ErrBadTolerance. The tolerance is part
// of the placement: every client of a fleet must use the same. A ring
// without this option is classic, its placement unchanged.
func WithEqualize(tolerance float64) Option {
	return func(c *config) { c.equalize, c.tolerance = true, tolerance }
}

// candidate is a point a node may hold: the one of index seq in its
// sequence.
type candidate struct {
	hash  uint64
	owner int32
	seq   int32
}

// equalizer holds a ring under adjustment: every point each node may hold,
// sorted as New sorts points, and the exact arcs each node owns with the
// points it holds now. Adding or dropping a node's last point updates the
// arcs of the two nodes concerned, without a pass over the ring.
type equalizer struct {
	cands  []candidate // sorted by hash, then owner, then seq
	at     [][]int32   // at[i][v] is the index in cands of node i's point v
	counts []int       // node i holds its points 0 to counts[i]-1
	owned  []uint64    // hashes node i owns
	total  int         // sum of counts
}

// equalize returns the equalized point counts of ns, from their classic
// counts.
func equalize(ns []Node, classic []int, tol float64) []int {
	if len(ns) < 2 {
		return append([]int(nil), classic...)
	}
	e := newEqualizer(ns, classic)
	lo, hi, aimLo, aimHi := bands(ns, tol)
	for range equalizeRounds {
		changed := false
		for i := range ns {
			switch {
			case e.owned[i] < lo[i]:
				changed = e.grow(i, lo[i], aimLo[i], hi[i]) || changed
			case e.owned[i] > hi[i]:
				changed = e.shrink(i, lo[i], aimHi[i], hi[i]) || changed
			}
		}
		if !changed {
			break
		}
	}
	return e.counts
}

// newEqualizer returns the equalizer of ns holding counts points each, with
// room for a quarter more and 16: more than any node of the tests needed.
func newEqualizer(ns []Node, counts []int) *equalizer {
	e := &equalizer{at: make([][]int32, len(ns)), counts: append([]int(nil), counts...), owned: make([]uint64, len(ns))}
	room := 0
	for _, c := range counts {
		room += c + c/4 + 16
		e.total += c
	}
	e.cands = make([]candidate, 0, room)
	var pts []point
	for i, n := range ns {
		c := counts[i]
		pts = appendPoints(pts[:0], n.Name, int32(i), 0, c+c/4+16)
		for v, p := range pts {
			e.cands = append(e.cands, candidate{p.hash, p.owner, int32(v)})
		}
		e.at[i] = make([]int32, len(pts))
	}
	slices.SortFunc(e.cands, func(a, b candidate) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		case a.owner != b.owner:
			return int(a.owner - b.owner)
		}
		return int(a.seq - b.seq)
	})
	for k, c := range e.cands {
		e.at[c.owner][c.seq] = int32(k)
	}
	// The arcs, in one pass: (previous held hash, hash] belongs to the
	// first held point at hash.
	var first, prev uint64
	firstOwner := int32(-1)
	for k, c := range e.cands {
		if !e.held(k) || firstOwner >= 0 && c.hash == prev {
			continue
		}
		if firstOwner < 0 {
			first, firstOwner = c.hash, c.owner
		} else {
			e.owned[c.owner] += c.hash - prev
		}
		prev = c.hash
	}
	e.owned[firstOwner] += first - prev // the wrapping arc
	return e
}

// held reports whether candidate k is a point its node holds.
func (e *equalizer) held(k int) bool {
	c := &e.cands[k]
	return int(c.seq) < e.counts[c.owner]
}

// grow adds node i's next points until it owns at least aim, or, if the
// point that gets it there takes it past hi, until it owns at least lo. It
// reports whether it added any.
func (e *equalizer) grow(i int, lo, aim, hi uint64) bool {
	start := e.counts[i]
	for e.owned[i] < aim && e.counts[i] < len(e.at[i]) && e.total < MaxPoints {
		before := e.owned[i]
		e.toggle(i, e.counts[i], true)
		if e.owned[i] > hi && before >= lo {
			e.toggle(i, e.counts[i]-1, false) // in the band already: stop there
			break
		}
	}
	return e.counts[i] != start
}

// shrink drops node i's last points until it owns at most aim, or, if the
// point that gets it there takes it below lo, until it owns at most hi. It
// reports whether it dropped any.
func (e *equalizer) shrink(i int, lo, aim, hi uint64) bool {
	start := e.counts[i]
	for e.owned[i] > aim && e.counts[i] > 1 {
		before := e.owned[i]
		e.toggle(i, e.counts[i]-1, false)
		if e.owned[i] < lo && before <= hi {
			e.toggle(i, e.counts[i], true)
			break
		}
	}
	return e.counts[i] != start
}

// toggle adds (on) or drops node i's point v, its next or its last, and
// moves the arc it takes or gives back between i and the node that owns it
// otherwise.
func (e *equalizer) toggle(i, v int, on bool) {
	k := int(e.at[i][v])
	h := e.cands[k].hash
	g0, g1 := k, k+1 // the candidates at hash h: ties are rare but possible
	for g0 > 0 && e.cands[g0-1].hash == h {
		g0--
	}
	for g1 < len(e.cands) && e.cands[g1].hash == h {
		g1++
	}
	before := e.firstHeld(g0, g1)
	if on {
		e.counts[i]++
		e.total++
	} else {
		e.counts[i]--
		e.total--
	}
	after := e.firstHeld(g0, g1)
	if before == after {
		return // a tie that another point keeps
	}
	p := e.prevHeld(g0)
	if p < 0 {
		return // no other point on the ring: nothing to move
	}
	arc := h - e.cands[p].hash // wraps round when h is the first point
	var from, to int32         // the arc's owner before and after
	switch {
	case before < 0: // a new point: the arc was the next point's
		from, to = e.cands[e.nextHeld(g1)].owner, e.cands[after].owner
	case after < 0: // the point gone: the arc goes to the next point
		from, to = e.cands[before].owner, e.cands[e.nextHeld(g1)].owner
	default: // a tie changes hands
		from, to = e.cands[before].owner, e.cands[after].owner
	}
	e.owned[from] -= arc
	e.owned[to] += arc
}

// firstHeld returns the first held candidate of g0 to g1-1, or -1.
func (e *equalizer) firstHeld(g0, g1 int) int {
	for k := g0; k < g1; k++ {
		if e.held(k) {
			return k
		}
	}
	return -1
}

// prevHeld returns the held candidate nearest before index g, wrapping
// round, or -1 if there is none but at g's hash.
func (e *equalizer) prevHeld(g int) int {
	h := e.cands[g].hash
	for n, k := 0, g-1; n < len(e.cands); n, k = n+1, k-1 {
		if k < 0 {
			k = len(e.cands) - 1
		}
		if e.cands[k].hash != h && e.held(k) {
			return k
		}
	}
	return -1
}

// nextHeld returns the first held candidate from index g on, wrapping
// round. There is one: a node holds at least one point.
func (e *equalizer) nextHeld(g int) int {
	for k := g; ; k++ {
		if k == len(e.cands) {
			k = 0
		}
		if e.held(k) {
			return k
		}
	}
}

// bands returns, by node, the ends of its band of tolerance and of the half
// of it the adjustment aims at, in units of the 2^64 hash space.
func bands(ns []Node, tol float64) (lo, hi, aimLo, aimHi []uint64) {
	total := totalWeight(ns)
	lo, hi = make([]uint64, len(ns)), make([]uint64, len(ns))
	aimLo, aimHi = make([]uint64, len(ns)), make([]uint64, len(ns))
	for i, n := range ns {
		fair := n.Weight / total
		lo[i], hi[i] = arcOf(fair, 1-tol), arcOf(fair, 1+tol)
		aimLo[i], aimHi[i] = arcOf(fair, 1-tol/2), arcOf(fair, 1+tol/2)
	}
	return lo, hi, aimLo, aimHi
}

// arcOf returns share×factor of the hash space, as a number of hashes. The
// conversions round each product, so that no machine fuses them.
func arcOf(share, factor float64) uint64 {
	x := float64(float64(share*factor) * space)
	if x >= space {
		return math.MaxUint64
	}
	return uint64(x)
}
