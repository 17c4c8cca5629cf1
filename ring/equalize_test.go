package ring

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var fleets = flag.Int("fleets", 8, "random fleets per size in the equalization tests (more for the figures of docs/performance.md)")

// randomFleet returns n nodes of random names, 4 to 15 bytes of letters,
// digits, '-' and '.'.
func randomFleet(rng *rand.Rand, n int) []Node {
	ns := make([]Node, n)
	for i := range ns {
		b := make([]byte, 4+rng.IntN(12))
		for j := range b {
			b[j] = "abcdefghijklmnopqrstuvwxyz0123456789-."[rng.IntN(38)]
		}
		ns[i] = Node{Name: string(b), Addr: fmt.Sprintf("10.%d.%d.%d:6379", i>>16, (i>>8)&255, i&255)}
	}
	return ns
}

// raceEnabled is set under the race detector (race_test.go).
var raceEnabled bool

// fleetSizes are the fleet sizes the equalization is checked at, and how
// many random fleets of each.
func fleetSizes() (sizes []int, count int) {
	if testing.Short() || raceEnabled {
		return []int{3, 8, 100}, min(*fleets, 2)
	}
	return []int{3, 4, 5, 8, 16, 32, 64, 100}, *fleets
}

// TestEqualizedBalance checks the equalized ring's promise over random
// fleets of 3 to 100 nodes, of equal and of mixed weights: every node's
// exact share within 1% of its fair share, at the default vnodes.
func TestEqualizedBalance(t *testing.T) {
	weights := []float64{1, 1.05, 2, 0.75, 3}
	for _, mixed := range []bool{false, true} {
		sizes, count := fleetSizes()
		for _, n := range sizes {
			classic, equalized, change := 0.0, 0.0, 0.0
			for f := range count {
				ns := randomFleet(rand.New(rand.NewPCG(uint64(n), uint64(f))), n)
				if mixed {
					for i := range ns {
						ns[i].Weight = weights[(i+f)%len(weights)]
					}
				}
				c, e := mustNew(t, ns), mustNew(t, ns, WithEqualize(0))
				if d := e.Deviation(); d > DefaultTolerance {
					t.Errorf("%d nodes, fleet %d, mixed weights %v: a node is %.3f%% from its fair share, want within 1%%", n, f, mixed, 100*d)
				}
				classic, equalized = max(classic, c.Deviation()), max(equalized, e.Deviation())
				for i := range e.nodes {
					change = max(change, math.Abs(float64(e.counts[i])/float64(c.counts[i])-1))
				}
			}
			t.Logf("%3d nodes, mixed weights %-5v: worst deviation from the fair share over %d fleets: classic %5.2f%%, equalized %.2f%%; points changed by %.1f%% at most",
				n, mixed, count, 100*classic, 100*equalized, 100*change)
		}
	}
}

// TestEqualizedMovement measures what equalizing costs on a change: the
// keys moved when a node is added or removed, over the least the change
// must move (the share of the node added or removed), and checks it stays
// within 1 + 2×sqrt(nodes/vnodes): the extra grows as the square root of
// the nodes over the vnodes (see Equalization in equalize.go).
func TestEqualizedMovement(t *testing.T) {
	sizes, count := fleetSizes()
	for _, n := range sizes {
		var add, remove []float64
		for f := range count {
			rng := rand.New(rand.NewPCG(uint64(n)+1000, uint64(f)))
			ns := randomFleet(rng, n+1)
			base, grown := mustNew(t, ns[:n], WithEqualize(0)), mustNew(t, ns, WithEqualize(0))
			add = append(add, Moved(base, grown)/grown.Shares()[ns[n].Name])
			k := rng.IntN(n)
			shrunk := mustNew(t, slices.Delete(slices.Clone(ns[:n]), k, k+1), WithEqualize(0))
			remove = append(remove, Moved(base, shrunk)/base.Shares()[ns[k].Name])
		}
		bound := 1 + 2*math.Sqrt(float64(n)/DefaultVnodes)
		for _, r := range append(slices.Clone(add), remove...) {
			if r > bound {
				t.Errorf("%d nodes: a change moved %.3f× the share of the node added or removed, want at most %.3f×", n, r, bound)
			}
		}
		t.Logf("%3d nodes: keys moved over the least, mean (worst) of %d fleets: add %.3f (%.3f), remove %.3f (%.3f); classic 1.000",
			n, count, mean(add), slices.Max(add), mean(remove), slices.Max(remove))
	}
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// TestEqualizedDefinition checks what makes an equalized ring a ring: each
// node's points are a prefix of its sequence, the placement is a function
// of the set of nodes, not of their order, and the equalizer's exact arcs,
// kept step by step, are the built ring's.
func TestEqualizedDefinition(t *testing.T) {
	ns := randomFleet(rand.New(rand.NewPCG(5, 5)), 12)
	ns[3].Weight, ns[7].Weight = 2.5, 0.8
	e := mustNew(t, ns, WithEqualize(0.005))
	shuffled := slices.Clone(ns)
	rand.New(rand.NewPCG(6, 6)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	if again := mustNew(t, shuffled, WithEqualize(0.005)); !slices.Equal(again.points, e.points) {
		t.Fatal("the same nodes in another order give another equalized ring")
	}
	var want []point
	for i, n := range e.nodes {
		want = appendPoints(want, n.Name, int32(i), 0, e.counts[i])
	}
	sortPoints(want)
	if want = slices.CompactFunc(want, func(a, b point) bool { return a.hash == b.hash }); !slices.Equal(want, e.points) {
		t.Fatal("the ring's points are not each node's first counts[i] points")
	}
	if e.Deviation() > 0.005 {
		t.Errorf("deviation %.3f%%, tolerance 0.5%%", 100*e.Deviation())
	}
	// The arcs the equalizer kept, against a pass over the built ring.
	classic, err := classicCounts(e.nodes, DefaultVnodes)
	if err != nil {
		t.Fatal(err)
	}
	q := newEqualizer(e.nodes, classic)
	q.lo, q.hi, _, _ = bands(e.nodes, 0.005)
	for i := range e.nodes {
		for q.counts[i] < e.counts[i] {
			q.step(i, true)
		}
		for q.counts[i] > e.counts[i] {
			q.step(i, false)
		}
	}
	shares := e.Shares()
	for i, n := range e.nodes {
		if got, want := float64(q.owned[i])/space, shares[n.Name]; math.Abs(got-want) > 1e-15 {
			t.Errorf("%s: equalizer's arcs %v, ring's share %v", n.Name, got, want)
		}
	}
}

// TestEqualizedEdges checks rings too small or too coarse to equalize: one
// node, two, and nodes of a few points, which may not settle but must come
// out the same every time, nearer the fair shares than classic.
func TestEqualizedEdges(t *testing.T) {
	one := mustNew(t, equalNodes(1), WithEqualize(0))
	if s := one.Shares()["cache-00"]; math.Abs(s-1) > 1e-12 || one.counts[0] != DefaultVnodes {
		t.Errorf("one node: share %v with %d points, want 1 with %d", s, one.counts[0], DefaultVnodes)
	}
	if d := mustNew(t, equalNodes(2), WithEqualize(0)).Deviation(); d > DefaultTolerance {
		t.Errorf("two nodes: deviation %.3f%%", 100*d)
	}
	ns := randomFleet(rand.New(rand.NewPCG(8, 8)), 20)
	c, e := mustNew(t, ns, WithVnodes(16)), mustNew(t, ns, WithVnodes(16), WithEqualize(0))
	if again := mustNew(t, ns, WithVnodes(16), WithEqualize(0)); !slices.Equal(again.counts, e.counts) {
		t.Error("a ring that does not settle comes out differently twice")
	}
	if e.Deviation() >= c.Deviation() {
		t.Errorf("16 vnodes: equalized deviation %.2f%%, classic %.2f%%: equalizing made it worse", 100*e.Deviation(), 100*c.Deviation())
	}
	t.Logf("20 nodes of 16 vnodes: deviation classic %.1f%%, equalized %.1f%%", 100*c.Deviation(), 100*e.Deviation())
	if e.Tolerance() != DefaultTolerance || c.Tolerance() != 0 {
		t.Errorf("Tolerance() = %v and %v, want %v and 0", e.Tolerance(), c.Tolerance(), DefaultTolerance)
	}
}

func TestEqualizeErrors(t *testing.T) {
	for _, tol := range []float64{-0.01, 1, 1.5, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if r, err := New(equalNodes(3), WithEqualize(tol)); !errors.Is(err, ErrBadTolerance) || r != nil {
			t.Errorf("WithEqualize(%v): %v, %v; want ErrBadTolerance", tol, r, err)
		}
		if _, err := CompareEqualization(equalNodes(3), equalNodes(4), WithEqualize(tol)); !errors.Is(err, ErrBadTolerance) {
			t.Errorf("CompareEqualization with WithEqualize(%v): %v; want ErrBadTolerance", tol, err)
		}
	}
	if _, err := CompareEqualization(equalNodes(3), nil); !errors.Is(err, ErrNoNodes) {
		t.Errorf("CompareEqualization to no nodes: %v, want ErrNoNodes", err)
	}
}

// TestCompareEqualization checks the figures plan prints for a node added:
// the classic ring moves exactly the new node's share, the least it can;
// the equalized ring is balanced either way and moves more.
func TestCompareEqualization(t *testing.T) {
	from, to := randomFleet(rand.New(rand.NewPCG(9, 9)), 9), randomFleet(rand.New(rand.NewPCG(9, 9)), 10)
	c, err := CompareEqualization(from, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("9 → 10 nodes: %+v", c)
	if math.Abs(c.Minimum-0.1) > 1e-12 {
		t.Errorf("Minimum = %v, want the new node's fair share 0.1", c.Minimum)
	}
	newShare := mustNew(t, to).Shares()[to[9].Name]
	if math.Abs(c.Classic.Moved-newShare) > 1e-12 || math.Abs(c.Classic.Least-newShare) > 1e-12 {
		t.Errorf("classic: moved %v, least %v; want both the new node's share %v", c.Classic.Moved, c.Classic.Least, newShare)
	}
	if c.Equalized.Before > DefaultTolerance || c.Equalized.After > DefaultTolerance || c.Classic.After <= DefaultTolerance {
		t.Errorf("deviation: equalized %v → %v, classic → %v; want the equalized within 1%%, the classic not", c.Equalized.Before, c.Equalized.After, c.Classic.After)
	}
	if c.Equalized.Moved < c.Equalized.Least || c.Equalized.Least < c.Minimum*(1-DefaultTolerance) {
		t.Errorf("equalized: moved %v, least %v, minimum %v: want moved >= least >= about the minimum", c.Equalized.Moved, c.Equalized.Least, c.Minimum)
	}
	same, err := CompareEqualization(from, from, WithVnodes(100), WithEqualize(0.05))
	if err != nil {
		t.Fatal(err)
	}
	if same.Minimum != 0 || same.Classic.Moved != 0 || same.Equalized.Moved != 0 || same.Equalized.After > 0.05 {
		t.Errorf("no change: %+v, want nothing moved and the equalized ring within 5%%", same)
	}
}

// TestEqualizerTies checks the equalizer's arcs, kept step by step, against
// a pass over the points held, on candidates placed by hand with the ties
// hashes almost never make: two nodes' points at one hash, a node's own two
// points at one hash, and the point at 0 that wraps.
func TestEqualizerTies(t *testing.T) {
	hashes := [][]uint64{
		{100, 500, 500, 900, 1 << 63},       // node 0: its own tie at 500
		{500, 100, 2000, 1<<63 + 5, 0},      // node 1: ties with node 0 at 500 and 100
		{2000, 3000, 1 << 63, 7, 1<<64 - 1}, // node 2: ties at 2000 and 2^63
	}
	e := &equalizer{at: make([][]int32, 3), counts: []int{1, 1, 1}, owned: make([]uint64, 3)}
	for i, hs := range hashes {
		for v, h := range hs {
			e.cands = append(e.cands, candidate{h, int32(i), int32(v)})
		}
		e.at[i] = make([]int32, len(hs))
	}
	slices.SortFunc(e.cands, func(a, b candidate) int {
		if a.hash != b.hash {
			return cmpUint(a.hash, b.hash)
		}
		if a.owner != b.owner {
			return int(a.owner - b.owner)
		}
		return int(a.seq - b.seq)
	})
	for k, c := range e.cands {
		e.at[c.owner][c.seq] = int32(k)
	}
	e.total = 3
	copy(e.owned, passArcs(e))
	rng := rand.New(rand.NewPCG(1, 1))
	for range 2000 {
		i, up := rng.IntN(3), rng.IntN(2) == 0
		if up && e.counts[i] == len(hashes[i]) || !up && e.counts[i] == 1 {
			continue
		}
		e.step(i, up)
		if want := passArcs(e); !slices.Equal(e.owned, want) {
			t.Fatalf("counts %v: arcs %v kept step by step, %v by a pass", e.counts, e.owned, want)
		}
	}
}

func cmpUint(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}

// passArcs returns the hashes each node owns with the points e holds, by
// the definition: sorted, the first of equal hashes kept, (previous,
// hash] to the point at hash.
func passArcs(e *equalizer) []uint64 {
	var pts []point
	for k, c := range e.cands {
		if e.held(k) && (len(pts) == 0 || pts[len(pts)-1].hash != c.hash) {
			pts = append(pts, point{c.hash, c.owner})
		}
	}
	owned := make([]uint64, len(e.counts))
	for k, p := range pts {
		prev := pts[(k+len(pts)-1)%len(pts)].hash
		owned[p.owner] += p.hash - prev
	}
	return owned
}
