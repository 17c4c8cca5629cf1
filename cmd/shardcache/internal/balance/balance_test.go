package balance

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/ring"
)

// fleet returns readings of nodes a, b, c, d of weight 1 with the given
// limits, holding density bytes per unit of share (base on top), as their
// exact shares put on them, capped at the limit with evictions.
func fleet(t *testing.T, limits []int64, base int64, density float64) []Reading {
	t.Helper()
	var nodes []ring.Node
	for i := range limits {
		nodes = append(nodes, ring.Node{Name: string(rune('a' + i)), Addr: "h:" + string(rune('1'+i))})
	}
	r, err := ring.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	shares := r.Shares()
	out := make([]Reading, len(nodes))
	for i, n := range nodes {
		bytes := base + int64(density*shares[n.Name])
		var ev int64
		if bytes > limits[i] {
			bytes, ev = limits[i], 1000
		}
		out[i] = Reading{Node: n, Bytes: bytes, BaseBytes: base, Limit: limits[i], Evictions: ev}
	}
	return out
}

// TestProposeSmallNode: one node of a quarter the others' memory, which
// evicts: its weight falls to about a quarter of theirs, the others keep
// theirs (the median keeps its weight), and the projected fills are even,
// within 2% of their mean, at the fill that holds all the data.
func TestProposeSmallNode(t *testing.T) {
	const mib = 1 << 20
	for _, base := range []int64{0, mib} {
		readings := fleet(t, []int64{32 * mib, 32 * mib, 32 * mib, 8 * mib}, base, 64*mib)
		p, err := Propose(readings, ring.DefaultVnodes, 0)
		if err != nil {
			t.Fatal(err)
		}
		d := p.Nodes[3]
		if !d.Evicting || d.Assumed <= d.Density || len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "d evicts") {
			t.Errorf("base %d: d %+v, notes %q: want it evicting, its density taken from the others", base, d, p.Notes)
		}
		if p.Skew < 1.5 || p.NewSkew > 1.02 || p.NewCV > 0.01 {
			t.Errorf("base %d: skew %.3f → %.3f (CV %.4f): want the small node's pressure gone, within 2%%", base, p.Skew, p.NewSkew, p.NewCV)
		}
		for _, n := range p.Nodes[:3] {
			if math.Abs(n.Weight-1) > 0.1 {
				t.Errorf("base %d: %s weight %v, want about 1", base, n.Node.Name, n.Weight)
			}
		}
		if math.Abs(d.Weight/p.Nodes[0].Weight-0.25) > 0.04+float64(base)/float64(8*mib) {
			t.Errorf("base %d: d weight %v of a's %v, want about a quarter", base, d.Weight, p.Nodes[0].Weight)
		}
		// 64 MiB of data and 4 bases in 104 MiB of limits.
		want := (64*mib + 4*float64(base)) / (104 * mib)
		if math.Abs(p.Target-want) > 1e-6 {
			t.Errorf("base %d: target fill %v, want %v", base, p.Target, want)
		}
		for _, n := range p.Nodes {
			if Round(n.Weight) != n.Weight || math.Abs(n.NewFill-p.Target) > 0.02 {
				t.Errorf("base %d: %s weight %v, projected fill %v; want 3 digits, about %v", base, n.Node.Name, n.Weight, n.NewFill, p.Target)
			}
		}
	}
}

// TestProposeDensity: nodes of one limit whose values differ in size (b's
// keys take twice the bytes) get weights that even their memory, not their
// keys; a fleet of equal nodes gets the ring's own skew corrected.
func TestProposeDensity(t *testing.T) {
	readings := fleet(t, []int64{1 << 30, 1 << 30, 1 << 30}, 0, 300<<20)
	readings[1].Bytes *= 2
	p, err := Propose(readings, ring.DefaultVnodes, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.NewSkew > 1.02 || p.Nodes[1].Weight > 0.6 || p.Nodes[1].Weight < 0.4 || len(p.Notes) != 0 {
		t.Errorf("b of twice the density: weights %v %v %v, skew %.3f → %.3f, notes %q", p.Nodes[0].Weight, p.Nodes[1].Weight, p.Nodes[2].Weight, p.Skew, p.NewSkew, p.Notes)
	}
	even, err := Propose(fleet(t, []int64{1 << 30, 1 << 30, 1 << 30}, 0, 300<<20), ring.DefaultVnodes, 0)
	if err != nil {
		t.Fatal(err)
	}
	if even.Skew < 1.01 || even.NewSkew > 1.01 {
		t.Errorf("equal nodes: skew %.4f → %.4f; want the ring's few percent corrected", even.Skew, even.NewSkew)
	}
}

// TestProposeBad: no data, no limit, and every node evicting.
func TestProposeBad(t *testing.T) {
	empty := fleet(t, []int64{1 << 20, 1 << 20}, 0, 0)
	if _, err := Propose(empty, 512, 0); !errors.Is(err, ErrNoData) {
		t.Errorf("no data: %v, want ErrNoData", err)
	}
	noLimit := fleet(t, []int64{1 << 20, 1 << 20}, 0, 1000)
	noLimit[1].Limit = 0
	if _, err := Propose(noLimit, 512, 0); !errors.Is(err, ErrBadReading) || !strings.Contains(err.Error(), "node b") {
		t.Errorf("no limit: %v, want ErrBadReading naming b", err)
	}
	if _, err := Propose(nil, 512, 0); !errors.Is(err, ErrBadReading) {
		t.Errorf("no nodes: %v, want ErrBadReading", err)
	}
	full := fleet(t, []int64{1 << 20, 4 << 20}, 0, 100<<20)
	p, err := Propose(full, 512, 0)
	if err != nil || len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "every node evicts") {
		t.Fatalf("every node evicting: %+v, %v; want a note", p, err)
	}
	if p.Nodes[0].Weight >= p.Nodes[1].Weight {
		t.Errorf("every node evicting: weights %v, %v: want more on the larger", p.Nodes[0].Weight, p.Nodes[1].Weight)
	}
}

func TestRound(t *testing.T) {
	for in, want := range map[float64]float64{1: 1, 0.25371: 0.254, 1.0049: 1, 12.345: 12.3, 0: 0} {
		if got := Round(in); got != want {
			t.Errorf("Round(%v) = %v, want %v", in, got, want)
		}
	}
}

// TestProposeTiny: a node of a thousandth of the other's memory gets the
// least weight the ring places, and a note, rather than a weight the ring
// refuses.
func TestProposeTiny(t *testing.T) {
	readings := fleet(t, []int64{1 << 20, 1 << 34}, 0, 1<<20)
	p, err := Propose(readings, 512, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Nodes[0].Weight != leastWeight(512) || len(p.Notes) == 0 || !strings.Contains(p.Notes[len(p.Notes)-1], "least the ring places") {
		t.Errorf("a's weight %v, notes %q; want %v, noted", p.Nodes[0].Weight, p.Notes, leastWeight(512))
	}
	if _, err := ring.New(p.Weighted(), ring.WithVnodes(512)); err != nil {
		t.Errorf("the ring refuses the proposal: %v", err)
	}
	if w := leastWeight(512); w*512 < 0.5 || w > 0.0021 {
		t.Errorf("leastWeight(512) = %v", w)
	}
}

// TestLowFill: nodes that hold almost nothing are too low to balance; a
// fleet half full is not, nor one whose mean fill is low but where a node
// evicts (it is full, the others being far larger).
func TestLowFill(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name    string
		limits  []int64
		density float64
		low     bool
	}{
		{"almost empty", []int64{32 * mib, 32 * mib, 32 * mib, 32 * mib}, 0.2 * mib, true},
		{"half full", []int64{32 * mib, 32 * mib, 32 * mib, 32 * mib}, 64 * mib, false},
		{"one small node evicting", []int64{1024 * mib, 1024 * mib, 1024 * mib, 8 * mib}, 64 * mib, false},
	} {
		readings := fleet(t, tc.limits, mib/2, tc.density)
		mean, fullest, low := LowFill(readings)
		if low != tc.low || mean > fullest || fullest <= 0 {
			t.Errorf("%s: LowFill = %.4f mean, %.4f fullest, low %v; want low %v", tc.name, mean, fullest, low, tc.low)
		}
	}
}
