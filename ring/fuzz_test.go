package ring

import (
	"errors"
	"math"
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

// FuzzNew checks that New never panics and either builds a ring or returns
// one of its typed errors.
func FuzzNew(f *testing.F) {
	f.Add("a", "a:1", 1.0, "b", "b:1", 2.0, 16)
	f.Add("", "", 0.0, "", "", 0.0, 0)
	f.Add("x", "a:1", -1.0, "x", "a:1", float64(1<<40), -3)
	f.Add("a", "a:1", 1.05, "b", "b:1", math.Inf(1), 512)
	f.Add("a", "a:1", 0.001, "b", "b:1", math.NaN(), 100)
	f.Fuzz(func(t *testing.T, n1, a1 string, w1 float64, n2, a2 string, w2 float64, vnodes int) {
		// Keep rings small so the fuzzer spends its time on inputs, not on
		// building rings of millions of points (limits are tested in ring_test).
		vnodes, w1, w2 = vnodes%1024, math.Mod(w1, 64), math.Mod(w2, 64)
		r, err := New([]Node{{Name: n1, Addr: a1, Weight: w1}, {Name: n2, Addr: a2, Weight: w2}}, WithVnodes(vnodes))
		if err != nil {
			for _, e := range []error{ErrNoNodes, ErrDuplicateName, ErrDuplicateAddr, ErrEmptyAddr, ErrBadAddr, ErrBadWeight, ErrBadVnodes} {
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
		_ = r.Locate(n1 + a2)
	})
}
