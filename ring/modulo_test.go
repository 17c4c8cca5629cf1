package ring

import (
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math"
	"testing"

	"github.com/twmb/murmur3"
)

func mustModulo(t testing.TB, addrs []string, opts ...ModuloOption) *Modulo {
	t.Helper()
	m, err := NewModulo(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func hosts(n int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = fmt.Sprintf("10.0.0.%d:11211", i+1)
	}
	return a
}

// TestModuloLocate checks each hash against its reference implementation in
// the standard library or murmur3, and the slot order.
func TestModuloLocate(t *testing.T) {
	addrs := []string{"a:1", "b:1", "b:1", "c:1"} // b holds two slots
	refs := map[ModuloHash]func(string) uint64{
		ModuloCRC32:      func(k string) uint64 { return uint64(crc32.ChecksumIEEE([]byte(k))) },
		ModuloMurmur3:    func(k string) uint64 { return murmur3.Sum64([]byte(k)) },
		ModuloMurmur3x86: func(k string) uint64 { return uint64(murmur3.Sum32([]byte(k))) },
		ModuloFNV1a: func(k string) uint64 {
			h := fnv.New64a()
			h.Write([]byte(k))
			return h.Sum64()
		},
		ModuloFNV1a32: func(k string) uint64 {
			h := fnv.New32a()
			h.Write([]byte(k))
			return uint64(h.Sum32())
		},
	}
	if len(refs) != len(ModuloHashes) {
		t.Fatalf("%d references for %d hashes", len(refs), len(ModuloHashes))
	}
	for _, h := range ModuloHashes {
		m := mustModulo(t, addrs, WithModuloHash(h))
		for i := range 2000 {
			key := fmt.Sprintf("key:%d", i)
			if got, want := m.Locate(key).Addr, addrs[refs[h](key)%4]; got != want {
				t.Fatalf("%s: Locate(%q) = %s, want %s", h, key, got, want)
			}
		}
	}
	if def := mustModulo(t, addrs); def.Hash() != ModuloCRC32 {
		t.Errorf("default hash %s, want crc32 (gomemcache's)", def.Hash())
	}
	ns := mustModulo(t, addrs).Nodes()
	if len(ns) != 3 || ns[1] != (Node{Name: "b:1", Addr: "b:1", Weight: 2}) || ns[0].Weight != 1 {
		t.Errorf("Nodes() = %v, want a:1, b:1 of weight 2, c:1", ns)
	}
}

func TestModuloHashTag(t *testing.T) {
	m := mustModulo(t, hosts(7), WithModuloHashTag("{}"))
	plain := mustModulo(t, hosts(7))
	differ := 0
	for i := range 200 {
		k1, k2 := fmt.Sprintf("{user%d}:cart", i), fmt.Sprintf("session:{user%d}", i)
		if m.Locate(k1) != m.Locate(k2) || m.Locate(k1) != plain.Locate(fmt.Sprintf("user%d", i)) {
			t.Fatalf("%s and %s: tag not hashed alone", k1, k2)
		}
		if plain.Locate(k1) != plain.Locate(k2) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("without a hash tag option, tagged keys are hashed whole: some pairs should differ")
	}
	// ring.Hash is the murmur3 of the tag: Modulo with murmur3 and "{}" is
	// ring.Hash(key) % N.
	mr := mustModulo(t, hosts(5), WithModuloHash(ModuloMurmur3), WithModuloHashTag("{}"))
	for i := range 500 {
		k := fmt.Sprintf("{u%d}x%d", i/3, i)
		if got, want := mr.Locate(k).Addr, hosts(5)[Hash(k)%5]; got != want {
			t.Fatalf("%s: %s, want ring.Hash %% 5 = %s", k, got, want)
		}
	}
}

func TestNewModuloErrors(t *testing.T) {
	for _, tc := range []struct {
		addrs []string
		opts  []ModuloOption
		want  error
	}{
		{nil, nil, ErrNoNodes},
		{[]string{"a:1", ""}, nil, ErrEmptyAddr},
		{[]string{"a:1"}, []ModuloOption{WithModuloHash("md5")}, ErrBadHash},
		{[]string{"a:1"}, []ModuloOption{WithModuloHashTag("{")}, ErrBadHashTag},
		{[]string{"a:1"}, []ModuloOption{WithModuloHashTag("{}}")}, ErrBadHashTag},
	} {
		if _, err := NewModulo(tc.addrs, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("NewModulo(%q) = %v, want %v", tc.addrs, err, tc.want)
		}
	}
	for _, tc := range []struct {
		nodes []Node
		want  error
	}{
		{[]Node{{Addr: "x:1", Weight: -1}}, ErrBadWeight},
		{[]Node{{Addr: "x:1", Weight: MaxModuloSlots + 1}}, ErrBadWeight},
		{[]Node{{Addr: "x:1", Weight: 1.5}}, ErrBadWeight}, // a slot list repeats whole
		{[]Node{{Addr: "x:1", Weight: math.Inf(1)}}, ErrBadWeight},
		{[]Node{{Addr: "x:1", Weight: math.NaN()}}, ErrBadWeight},
		{[]Node{{Name: "a"}}, ErrEmptyAddr},
	} {
		if _, err := ModuloSlots(tc.nodes); !errors.Is(err, tc.want) {
			t.Errorf("ModuloSlots(%v) = %v, want %v", tc.nodes, err, tc.want)
		}
	}
	slots, err := ModuloSlots([]Node{{Name: "a", Addr: "x:1", Weight: 2}, {Addr: "y:1"}})
	if err != nil || fmt.Sprint(slots) != "[x:1 x:1 y:1]" {
		t.Errorf("ModuloSlots = %v, %v; want [x:1 x:1 y:1]", slots, err)
	}
}

func TestModuloShares(t *testing.T) {
	// 2^32 = 3·1431655765 + 1: residue 0 gets one hash more.
	s := mustModulo(t, []string{"a:1", "b:1", "a:1"}).Shares()
	if want := (2*1431655765.0 + 1) / (1 << 32); s["a:1"] != want || s["b:1"] != 1431655765.0/(1<<32) {
		t.Errorf("shares %v, want a:1 %v", s, want)
	}
	s = mustModulo(t, hosts(6), WithModuloHash(ModuloMurmur3)).Shares()
	sum := 0.0
	for _, v := range s {
		sum += v
		if math.Abs(v-1.0/6) > 1e-15 {
			t.Errorf("64-bit share %v, want 1/6", v)
		}
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Errorf("shares add up to %v", sum)
	}
}

func TestCompareModulo(t *testing.T) {
	eight, six := hosts(8), hosts(6)
	for _, tc := range []struct {
		name     string
		from, to []string
		hash     ModuloHash
		want     float64
	}{
		// h keeps its server when h%8 == h%6, that is h%24 < 6: 2^32 and
		// 2^64 are 16 mod 24, so the first 16 residues count once more.
		{"8 to 6, 32 bits", eight, six, ModuloCRC32, 1 - (6*178956970+6.0)/(1<<32)},
		{"8 to 6, 64 bits", eight, six, ModuloMurmur3, 0.75},
		{"6 to 8", six, eight, ModuloFNV1a32, 1 - (6*178956970+6.0)/(1<<32)},
		{"same", eight, eight, ModuloCRC32, 0},
		// Slots a b b c → a b c: h%4 vs h%3 over 12 residues, where
		// h = 0, 1, 10 and 11 keep their server.
		{"weights", []string{"a:1", "b:1", "b:1", "c:1"}, []string{"a:1", "b:1", "c:1"}, ModuloMurmur3, 8.0 / 12},
		// The same servers in another order move keys: mod-N knows slots.
		{"reordered", []string{"a:1", "b:1"}, []string{"b:1", "a:1"}, ModuloCRC32, 1},
	} {
		from, to := mustModulo(t, tc.from, WithModuloHash(tc.hash)), mustModulo(t, tc.to, WithModuloHash(tc.hash))
		c := Compare(from, to)
		if math.Abs(c.Moved-tc.want) > 1e-12 || !c.Exact {
			t.Errorf("%s: Compare moves %v (exact %v), want %v exactly", tc.name, c.Moved, c.Exact, tc.want)
		}
	}

	// Keys located one by one agree with every estimate: a long period
	// (sampled), and different hashes (independent positions).
	// 2003 and 2999 slots over 7 servers: a period of 6 million slots.
	cycle := func(slots int) []string {
		a := make([]string, slots)
		for i := range a {
			a[i] = hosts(7)[i*i%7]
		}
		return a
	}
	big1, big2 := mustModulo(t, cycle(2003)), mustModulo(t, cycle(2999))
	other := mustModulo(t, hosts(6), WithModuloHash(ModuloMurmur3))
	for _, tc := range []struct {
		name      string
		from, to  *Modulo
		wantExact bool
	}{
		{"period over 2^24", big1, big2, false},
		{"crc32 to murmur3", mustModulo(t, eight), other, true},
	} {
		c := Compare(tc.from, tc.to)
		est, exact := c.Moved, c.Exact
		moved := 0
		const keys = 200000
		for i := range keys {
			k := fmt.Sprint("k", i)
			if tc.from.Locate(k).Addr != tc.to.Locate(k).Addr {
				moved++
			}
		}
		if got := float64(moved) / keys; math.Abs(got-est) > 0.01 || exact != tc.wantExact {
			t.Errorf("%s: Compare moves %v (exact %v), keys located one by one %v", tc.name, est, exact, got)
		}
	}
}
