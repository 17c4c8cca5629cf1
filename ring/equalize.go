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
// equalized ring keeps the definition of a ring (node i's points are a
// prefix of its sequence Name#VN0, Name#VN1, ...) and chooses the length of
// each prefix, from the classic one, so that every node's exact share is
// within the tolerance of its weight's fair share:
//
//  1. Every node starts with round(Weight×vnodes) points.
//  2. A sweep takes the nodes in Name order; each node outside its band
//     [fair×(1-tol), fair×(1+tol)] adds its next points, or drops its last
//     ones, one at a time, its exact share updated at each, until it
//     reaches the nearer half of its band, fair×(1-tol/2) or
//     fair×(1+tol/2): moved no further than it must be, and far enough
//     in that its neighbours' steps seldom throw it out again. A point that
//     would take it across the whole band is not taken if the node is in
//     the band without it. Nodes in their band are left alone.
//  3. Sweeps repeat while they bring the nodes nearer their bands (the sum
//     over nodes of how far each is outside), at most equalizeSweeps.
//  4. If some node is still outside, single steps follow: each time, of
//     every node's next or last point, the one that brings the nodes
//     nearest their bands, while one does.
//
// Every step is integer arithmetic on arcs of the 2^64 hash space, but for
// the bands' ends, computed once from the weights with float64 products
// that no machine can fuse, and sums of distances in node order: the counts
// are the same on every machine, as a placement must be, and depend on the
// set of nodes and weights only (with vnodes and the tolerance).
//
// A node settles when one of its points moves its share by less than its
// band is wide, which takes some hundreds of points at the default
// tolerance: at DefaultVnodes every node of the random fleets of the tests,
// of 3 to 100 nodes, settles. A node of fewer points may end outside its
// band by about one arc, as the rounds leave it (Deviation says how far).
//
// The cost is movement. Adding a node to a classic ring moves only the keys
// the new node takes; but it takes unevenly from the others (their shares
// move by about sqrt(2/(nodes×vnodes)), relative), and an equalized ring,
// being a function of the membership, corrects every node its own
// correction no longer fits, which moves keys between old nodes too: about
// sqrt(2×nodes/vnodes) times the new node's share more. No function of the
// membership alone does much better: a node's point count must follow its
// classic share's error wherever that is outside the band. More vnodes make
// it smaller; CompareEqualization computes it for a change.

// DefaultTolerance is the equalization's tolerance when WithEqualize is
// given 0: every node's share within 1% of its fair share.
const DefaultTolerance = 0.01

// equalizeSweeps bounds the sweeps: the fleets of the tests settle in a
// few, and sweeps stop as soon as one brings no node nearer, so the bound
// only caps the time a pathological ring may take.
const equalizeSweeps = 32

// WithEqualize makes New equalize the ring: each node's point count is
// adjusted, from round(Weight×vnodes), until every node's exact share is
// within tolerance (relative: 0.01 is 1%) of its weight's fair share (see
// Equalization in equalize.go). 0 means DefaultTolerance; a tolerance
// that is negative, NaN or from 1 up is ErrBadTolerance. The tolerance is
// part of the placement: every client of a fleet must use the same. A ring
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
	lo, hi []uint64    // node i's band: the hashes it may own
}

// equalize returns the equalized point counts of ns, from their classic
// counts, and the points of the ring they make (see ringPoints).
func equalize(ns []Node, classic []int, tol float64) ([]int, []point) {
	if len(ns) < 2 {
		return classic, ringPoints(ns, classic)
	}
	e := newEqualizer(ns, classic)
	lo, hi, aimLo, aimHi := bands(ns, tol)
	e.lo, e.hi = lo, hi
	// Sweeps, while they bring the nodes nearer the band.
	best, stale := e.excess(), 0
	for range equalizeSweeps {
		if best == 0 || stale == 2 {
			break
		}
		for i := range ns {
			switch {
			case e.owned[i] < lo[i]:
				e.grow(i, aimLo[i])
			case e.owned[i] > hi[i]:
				e.shrink(i, aimHi[i])
			}
		}
		if x := e.excess(); x < best {
			best, stale = x, 0
		} else {
			stale++
		}
	}
	// Single steps, each the one that brings the nodes nearest the band.
	for range 2*len(ns) + 64 {
		if e.excess() == 0 || !e.bestStep() {
			break
		}
	}
	// The points held, as ringPoints would make them: in candidate order,
	// the first of equal hashes kept.
	pts := make([]point, 0, e.total)
	for k, c := range e.cands {
		if e.held(k) && (len(pts) == 0 || pts[len(pts)-1].hash != c.hash) {
			pts = append(pts, point{c.hash, c.owner})
		}
	}
	return e.counts, pts
}

// newEqualizer returns the equalizer of ns holding counts points each, with
// room for more (see headroom).
func newEqualizer(ns []Node, counts []int) *equalizer {
	e := &equalizer{at: make([][]int32, len(ns)), counts: append([]int(nil), counts...), owned: make([]uint64, len(ns))}
	room := 0
	for _, c := range counts {
		room += c + headroom(c)
		e.total += c
	}
	e.cands = make([]candidate, 0, room)
	var pts []point
	for i, n := range ns {
		c := counts[i]
		pts = appendPoints(pts[:0], n.Name, int32(i), 0, c+headroom(c))
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

// headroom returns how many points a node of c classic points may gain. A
// classic share is off by about 1/sqrt(c), relative, so a node may need
// some sqrt(c) points more, six times that at most for any fleet tried (a
// fifth of 512 points at most, against 136 here), or a quarter more when
// that is larger.
func headroom(c int) int {
	return max(c/4, int(6*math.Sqrt(float64(c)))) + 16
}

// held reports whether candidate k is a point its node holds.
func (e *equalizer) held(k int) bool {
	c := &e.cands[k]
	return int(c.seq) < e.counts[c.owner]
}

// grow adds node i's next points until it owns at least aim, or, if the
// point that gets it there takes it past hi, until it owns at least lo.
func (e *equalizer) grow(i int, aim uint64) {
	for e.owned[i] < aim && e.canStep(i, true) {
		before := e.owned[i]
		if e.step(i, true); e.owned[i] > e.hi[i] && before >= e.lo[i] {
			e.step(i, false) // in the band already: stay there
			return
		}
	}
}

// shrink drops node i's last points until it owns at most aim, or, if the
// point that gets it there takes it below lo, until it owns at most hi.
func (e *equalizer) shrink(i int, aim uint64) {
	for e.owned[i] > aim && e.canStep(i, false) {
		before := e.owned[i]
		if e.step(i, false); e.owned[i] < e.lo[i] && before <= e.hi[i] {
			e.step(i, true)
			return
		}
	}
}

// canStep reports whether node i can add its next point (up) or drop its
// last.
func (e *equalizer) canStep(i int, up bool) bool {
	if up {
		return e.counts[i] < len(e.at[i]) && e.total < MaxPoints
	}
	return e.counts[i] > 1
}

// excess returns how far the nodes are outside their bands, in hashes
// summed in node order.
func (e *equalizer) excess() float64 {
	x := 0.0
	for i, o := range e.owned {
		x += outside(o, e.lo[i], e.hi[i])
	}
	return x
}

// outside returns how far owned is outside [lo, hi], in hashes.
func outside(owned, lo, hi uint64) float64 {
	switch {
	case owned < lo:
		return float64(lo - owned)
	case owned > hi:
		return float64(owned - hi)
	}
	return 0
}

// bestStep makes the step of one point, of any node up or down, that
// lowers excess most, if one lowers it, and reports whether it made one. A
// step moves one arc between two nodes, so it is tried and undone, not
// recomputed.
func (e *equalizer) bestStep() bool {
	bestGain, best, bestUp := 0.0, -1, false
	for i := range e.counts {
		for _, up := range [2]bool{true, false} {
			if !e.canStep(i, up) {
				continue
			}
			if gain := e.try(i, up); gain > bestGain {
				bestGain, best, bestUp = gain, i, up
			}
			e.step(i, !up)
		}
	}
	if best >= 0 {
		e.step(best, bestUp)
	}
	return best >= 0
}

// try makes node i's step up or down and returns how much it lowered
// excess (negative if it raised it). The caller undoes it with
// step(i, !up).
func (e *equalizer) try(i int, up bool) float64 {
	before := e.owned[i]
	other, arc := e.step(i, up)
	if arc == 0 || other == int32(i) {
		return 0
	}
	// The step moved arc between i and other: their excess before, from
	// owned now, and after.
	was := e.owned[other]
	if up {
		was += arc
	} else {
		was -= arc
	}
	return outside(before, e.lo[i], e.hi[i]) + outside(was, e.lo[other], e.hi[other]) -
		outside(e.owned[i], e.lo[i], e.hi[i]) - outside(e.owned[other], e.lo[other], e.hi[other])
}

// step adds node i's next point (up) or drops its last, and returns the
// node the arc came from or went to, and the arc (0 for a point that a tie
// keeps from counting).
func (e *equalizer) step(i int, up bool) (other int32, arc uint64) {
	if up {
		return e.toggle(i, e.counts[i], true)
	}
	return e.toggle(i, e.counts[i]-1, false)
}

// toggle adds (on) or drops node i's point v, its next or its last, and
// moves the arc it takes or gives back between i and the node that owns it
// otherwise, which it returns with the arc.
func (e *equalizer) toggle(i, v int, on bool) (other int32, arc uint64) {
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
		return 0, 0 // a tie that another point keeps
	}
	p := e.prevHeld(g0)
	if p < 0 {
		return 0, 0 // no other point on the ring: nothing to move
	}
	arc = h - e.cands[p].hash // wraps round when h is the first point
	var from, to int32        // the arc's owner before and after
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
	if on {
		return from, arc
	}
	return to, arc
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

// Equalization is what an equalized ring gives and costs beside a classic
// one on a change of nodes or weights, computed exactly: see
// CompareEqualization.
type Equalization struct {
	// Minimum is the least share of keys the change moves on a perfect
	// placement, where every node holds its fair share: the sum of the fair
	// share each node gains. For a node added or removed it is that node's
	// fair share.
	Minimum float64
	// Classic and Equalized are the change on each kind of ring.
	Classic, Equalized RingChange
}

// RingChange is a change from one ring to another of the same kind.
type RingChange struct {
	// Moved is the share of keys whose node changes (Moved).
	Moved float64
	// Least is the least share of keys any placement with these two
	// rings' shares moves (Least). A classic ring moves exactly that when
	// a node is added or removed; an equalized one moves more, as it
	// corrects the other nodes too.
	Least float64
	// Before and After are the rings' Deviation: the balance either way.
	Before, After float64
}

// CompareEqualization builds the classic and the equalized rings of from
// and of to, with opts (WithVnodes, and WithEqualize for the tolerance:
// DefaultTolerance without it), and returns the balance of each and the
// keys each moves: whether equalizing is worth what it costs on a change.
// It returns New's errors.
func CompareEqualization(from, to []Node, opts ...Option) (Equalization, error) {
	cfg := config{vnodes: DefaultVnodes}
	for _, o := range opts {
		o(&cfg)
	}
	classic := []Option{WithVnodes(cfg.vnodes)}
	equalized := []Option{WithVnodes(cfg.vnodes), WithEqualize(cfg.tolerance)}
	var rings [4]*Ring // classic from, to; equalized from, to
	for k, args := range []struct {
		nodes []Node
		opts  []Option
	}{{from, classic}, {to, classic}, {from, equalized}, {to, equalized}} {
		r, err := New(args.nodes, args.opts...)
		if err != nil {
			return Equalization{}, err
		}
		rings[k] = r
	}
	change := func(a, b *Ring) RingChange {
		return RingChange{Moved: Moved(a, b), Least: Least(a, b), Before: a.Deviation(), After: b.Deviation()}
	}
	return Equalization{
		Minimum:   gained(rings[0].IdealShares(), rings[1].IdealShares()),
		Classic:   change(rings[0], rings[1]),
		Equalized: change(rings[2], rings[3]),
	}, nil
}

// Tolerance returns the tolerance the ring was equalized to, 0 for a
// classic ring.
func (r *Ring) Tolerance() float64 { return r.tolerance }
