package ring

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/twmb/murmur3"
)

// FuzzLocate checks that any key maps, without panicking, to the node the
// definition names, and that a hash tag routes like the tag alone.
func FuzzLocate(f *testing.F) {
	for _, k := range []string{"", "a", "{", "}", "{}", "{a}", "x{y}z", "\x00\xff", "{user42}:cart"} {
		f.Add(k)
	}
	r, err := New(equalNodes(7), WithVnodes(64))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		got := r.Locate(key)
		h := Hash(key)
		i := 0
		for i < len(r.points) && r.points[i].hash < h {
			i++
		}
		if want := r.nodes[r.points[i%len(r.points)].owner]; got != want {
			t.Fatalf("Locate(%q) = %v, want %v", key, got, want)
		}
		if h != murmur3.StringSum64(HashTag(key)) {
			t.Fatalf("Hash(%q) = %#x, not the murmur3 of its tag %q", key, h, HashTag(key))
		}
		if tag := HashTag(key); r.Locate(tag) != got && tag != key {
			t.Fatalf("Locate(%q) differs from its tag %q", key, tag)
		}
	})
}

// FuzzNew checks that New never panics and either builds a ring, classic
// or equalized, or returns one of its typed errors; and that a ring built
// places keys and replicas on its nodes.
func FuzzNew(f *testing.F) {
	f.Add("a", "a:1", 1.0, "b", "b:1", 2.0, 16, 0.0)
	f.Add("", "", 0.0, "", "", 0.0, 0, -1.0)
	f.Add("x", "a:1", -1.0, "x", "a:1", float64(1<<40), -3, 0.5)
	f.Add("a", "a:1", 1.05, "b", "b:1", math.Inf(1), 512, 0.01)
	f.Add("a", "a:1", 0.001, "b", "b:1", math.NaN(), 100, math.NaN())
	f.Add("a", "a:1", 1.0, "b", "b:1", 3.0, 512, 1e-9)
	f.Fuzz(func(t *testing.T, n1, a1 string, w1 float64, n2, a2 string, w2 float64, vnodes int, tol float64) {
		// Keep rings small so the fuzzer spends its time on inputs, not on
		// building rings of millions of points (limits are tested in ring_test).
		vnodes, w1, w2 = vnodes%1024, math.Mod(w1, 64), math.Mod(w2, 64)
		opts := []Option{WithVnodes(vnodes)}
		if tol >= 0 || math.IsNaN(tol) { // negative: a classic ring
			opts = append(opts, WithEqualize(tol))
		}
		r, err := New([]Node{{Name: n1, Addr: a1, Weight: w1, Zone: n2}, {Name: n2, Addr: a2, Weight: w2}}, opts...)
		if err != nil {
			for _, e := range []error{ErrNoNodes, ErrDuplicateName, ErrDuplicateAddr, ErrEmptyAddr, ErrBadAddr, ErrBadWeight, ErrBadVnodes, ErrBadTolerance, ErrTooManyNodes} {
				if errors.Is(err, e) {
					return
				}
			}
			t.Fatalf("untyped error: %v", err)
		}
		total := 0.0
		for _, s := range r.Shares() {
			total += s
		}
		if total < 1-1e-9 || total > 1+1e-9 {
			t.Fatalf("shares add up to %v", total)
		}
		if d := r.Deviation(); math.IsNaN(d) || d < 0 {
			t.Fatalf("Deviation() = %v", d)
		}
		nodes := LocateN(r, n1+a2, 3)
		if len(nodes) != 2 || nodes[0] != r.Locate(n1+a2) || nodes[0].Name == nodes[1].Name {
			t.Fatalf("LocateN(%q, 3) = %v on a ring of %v", n1+a2, nodes, r.Nodes())
		}
	})
}

// FuzzLocateN checks that any key and count of replicas give, without
// panicking, the nodes the definition names, on rings with zones, without,
// and with nodes of one point.
func FuzzLocateN(f *testing.F) {
	for _, k := range []string{"", "a", "{}", "{a}", "x{y}z", "\x00\xff", "{user42}:cart"} {
		f.Add(k, 3)
	}
	f.Add("k", -1)
	f.Add("k", 0)
	f.Add("k", 1<<30)
	mixed := equalNodes(7)
	for i := range mixed {
		mixed[i].Zone = []string{"a", "", "b", "a", "", "c", "c"}[i]
	}
	var rings []*Ring
	for _, r := range []struct {
		nodes []Node
		opts  []Option
	}{{equalNodes(5), nil}, {zonedNodes(), []Option{WithVnodes(8)}}, {mixed, []Option{WithVnodes(1)}}, {zonedNodes(), []Option{WithEqualize(0.05), WithVnodes(64)}}} {
		ring, err := New(r.nodes, r.opts...)
		if err != nil {
			f.Fatal(err)
		}
		rings = append(rings, ring)
	}
	var refs []func(string, int) []Node
	for _, r := range rings {
		refs = append(refs, refRingN(r))
	}
	f.Fuzz(func(t *testing.T, key string, n int) {
		for i, r := range rings {
			got := LocateN(r, key, n)
			if want := refs[i](key, max(n, 0)); len(got)+len(want) > 0 && !slices.Equal(got, want) {
				t.Fatalf("ring %d: LocateN(%q, %d) = %v, want %v", i, key, n, got, want)
			}
			if n > 0 && got[0] != r.Locate(key) {
				t.Fatalf("ring %d: LocateN(%q, %d)[0] = %v, Locate %v", i, key, n, got[0], r.Locate(key))
			}
		}
	})
}
