package ring

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// FuzzInterop checks that Ketama, Modulo and Rendezvous never panic on any
// nodes or option: they build, or return one of the ring's typed errors;
// and any key, hash tag or not, is located on one of their nodes, and its
// replicas on each of them once, its owner first.
func FuzzInterop(f *testing.F) {
	f.Add("a", "h:11211", 1.0, "", "h:1", 3.0, "{}", "crc32", "{user}:1")
	f.Add("", "", 0.0, "", "", 0.0, "", "", "")
	f.Add("x", "a:1", -1.0, "x", "a:1", float64(1<<40), "{", "md5", "}{")
	f.Add("a", "h:11211", 1.5, "", "h:1", math.NaN(), "", "", "k")
	f.Fuzz(func(t *testing.T, n1, a1 string, w1 float64, n2, a2 string, w2 float64, tag, hash, key string) {
		w1, w2 = math.Mod(w1, 100000), math.Mod(w2, 100000) // ketama's points follow the shares, not the weights: only the sum is bounded
		nodes := []Node{{Name: n1, Addr: a1, Weight: w1}, {Name: n2, Addr: a2, Weight: w2}}
		typed := func(err error) {
			for _, e := range []error{ErrNoNodes, ErrDuplicateName, ErrDuplicateAddr, ErrEmptyAddr, ErrBadAddr, ErrBadWeight, ErrBadHash, ErrBadHashTag, ErrLongName} {
				if errors.Is(err, e) {
					return
				}
			}
			t.Fatalf("untyped error: %v", err)
		}
		check := func(l LocatorN, err error) {
			if err != nil {
				typed(err)
				return
			}
			got := l.Locate(key)
			if !slices.ContainsFunc(l.Nodes(), func(n Node) bool { return n.Addr == got.Addr && n.Name == got.Name }) {
				t.Fatalf("Locate(%q) = %v, not one of %v", key, got, l.Nodes())
			}
			all := LocateN(l, key, 3)
			if len(all) != len(l.Nodes()) || all[0] != got || len(all) > 1 && all[0].Addr == all[1].Addr {
				t.Fatalf("LocateN(%q, 3) = %v, want the %d servers of %v, %v first", key, all, len(l.Nodes()), l.Nodes(), got)
			}
		}
		kh := KetamaMD5
		if len(hash)%2 == 1 {
			kh = KetamaFNV1a64
		}
		k, err := NewKetama(nodes, WithKetamaHashTag(tag), WithKetamaKeyHash(kh))
		check(k, err)
		m, err := NewModulo([]string{a1, a2}, WithModuloHash(ModuloHash(hash)), WithModuloHashTag(tag))
		check(m, err)
		r, err := NewRendezvous(nodes)
		check(r, err)
	})
}
