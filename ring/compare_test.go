package ring

import (
	"fmt"
	"math"
	"testing"
)

// keysMoved locates n keys in both placements and returns the fraction whose
// server differs.
func keysMoved(from, to Locator, n int) float64 {
	moved := 0
	for i := range n {
		k := fmt.Sprint("key-", i)
		if from.Locate(k).Addr != to.Locate(k).Addr {
			moved++
		}
	}
	return float64(moved) / float64(n)
}

// TestCompare checks every kind of pair against keys located one by one,
// and which pairs are exact.
func TestCompare(t *testing.T) {
	eight, six := equalNodes(8), equalNodes(6)
	r8, r6 := mustNew(t, eight), mustNew(t, six)
	k8, k6 := mustKetama(t, eight), mustKetama(t, six)
	var a8, a6 []string
	for _, n := range eight {
		a8 = append(a8, n.Addr)
	}
	for _, n := range six {
		a6 = append(a6, n.Addr)
	}
	m8, m6 := mustModulo(t, a8), mustModulo(t, a6)
	v8, err := NewRendezvous(eight)
	if err != nil {
		t.Fatal(err)
	}
	v6, _ := NewRendezvous(six)
	for _, tc := range []struct {
		name      string
		from, to  Locator
		wantExact bool
	}{
		{"ring to ring", r8, r6, true},
		{"ketama to ketama", k8, k6, true},
		{"modulo to modulo", m8, m6, true},
		{"ketama to ring", k8, r6, true},
		{"ketama md5 to ketama fnv1a_64", k8, mustKetama(t, six, WithKetamaKeyHash(KetamaFNV1a64)), true},
		{"modulo to ring", m8, r6, true},
		{"ring to modulo", r8, m6, true},
		{"rendezvous to rendezvous", v8, v6, false},
		{"rendezvous to ring", v8, r6, false},
	} {
		c := Compare(tc.from, tc.to)
		got := keysMoved(tc.from, tc.to, 50000)
		// 50000 keys have a standard error of 0.23% at most: 1% is 4 of them.
		if math.Abs(got-c.Moved) > 0.01 || c.Exact != tc.wantExact {
			t.Errorf("%s: Compare moves %.4f (exact %v, %s), keys located %.4f", tc.name, c.Moved, c.Exact, c.Method, got)
		}
		if !c.Exact && (c.Samples != CompareSamples || c.StdErr <= 0 || c.StdErr > 0.0005) {
			t.Errorf("%s: sampled over %d with standard error %v", tc.name, c.Samples, c.StdErr)
		}
		before, after, flows := 0.0, 0.0, 0.0
		for _, s := range c.Before {
			before += s
		}
		for _, s := range c.After {
			after += s
		}
		for _, row := range c.Flows {
			for _, s := range row {
				flows += s
			}
		}
		if math.Abs(before-1) > 1e-9 || math.Abs(after-1) > 1e-9 || math.Abs(flows-1) > 1e-9 {
			t.Errorf("%s: shares add up to %v before, %v after, flows %v", tc.name, before, after, flows)
		}
	}
	// The ring's own analysis, by Name, agrees where names are addresses.
	if c := Compare(r8, r6); math.Abs(c.Moved-Moved(r8, r6)) > 1e-12 {
		t.Errorf("Compare %v, Moved %v", c.Moved, Moved(r8, r6))
	}
}

// TestCompareCountsServers: a node moved to another server moves its keys,
// a rename moves what the ring moves between servers, and Moved stays in
// [0, 1].
func TestCompareCountsServers(t *testing.T) {
	from := mustNew(t, []Node{{Name: "a", Addr: "h1:1"}, {Name: "b", Addr: "h2:1"}})
	moved := mustNew(t, []Node{{Name: "a", Addr: "h1:1"}, {Name: "b", Addr: "h3:1"}})
	if c := Compare(from, moved); math.Abs(c.Moved-from.Shares()["b"]) > 1e-12 || math.Abs(c.Flows["h2:1"]["h3:1"]-c.Moved) > 1e-12 {
		t.Errorf("b to another server moves %v, want b's share %v, all from h2:1 to h3:1", c.Moved, from.Shares()["b"])
	}
	// Names place keys on a ring: swapping them swaps the servers' arcs.
	swapped := mustNew(t, []Node{{Name: "b", Addr: "h1:1"}, {Name: "a", Addr: "h2:1"}})
	if c := Compare(from, swapped); c.Moved != 1 {
		t.Errorf("names swapped: moved %v, want 1", c.Moved)
	}
	other := mustNew(t, []Node{{Addr: "h8:1"}, {Addr: "h9:1"}})
	if c := Compare(from, other); c.Moved != 1 {
		t.Errorf("all new servers: moved %v, want exactly 1", c.Moved)
	}
}

// TestAdded: the servers a change adds, by address: a renamed node or a
// reweighted one adds nothing, a node at a new address does, once.
func TestAdded(t *testing.T) {
	from := []Node{{Name: "a", Addr: "h1:1"}, {Name: "b", Addr: "h2:1"}}
	to := []Node{{Name: "a2", Addr: "h1:1"}, {Name: "b", Addr: "h2:1", Weight: 3},
		{Name: "c", Addr: "h3:1"}, {Name: "c2", Addr: "h3:1"}, {Name: "d", Addr: "h4:1"}}
	got := Added(from, to)
	if len(got) != 2 || got[0].Name != "c" || got[1].Name != "d" {
		t.Fatalf("Added = %+v; want c (h3:1) and d (h4:1)", got)
	}
	if got := Added(to, from); len(got) != 0 {
		t.Fatalf("Added of a change that removes = %+v; want none", got)
	}
}
