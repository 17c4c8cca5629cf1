package sim

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/shardcache/shardcache/ring"
)

func nodes(spec ...string) []ring.Node {
	ns := make([]ring.Node, len(spec))
	for i, s := range spec {
		var w int
		var name string
		if _, err := fmt.Sscanf(s, "%1s%d", &name, &w); err != nil {
			name, w = s, 1
		}
		ns[i] = ring.Node{Name: name, Addr: name + ":6379", Weight: w}
	}
	return ns
}

func TestModNLocate(t *testing.T) {
	m, err := NewModN(nodes("a", "b2", "c"))
	if err != nil {
		t.Fatal(err)
	}
	slots := []string{"a", "b", "b", "c"} // the order given, b twice
	for i := range 1000 {
		key := fmt.Sprintf("key:%d", i)
		if got, want := m.Locate(key).Name, slots[ring.Hash(key)%4]; got != want {
			t.Fatalf("Locate(%q) = %s, want %s", key, got, want)
		}
	}
	if got := m.Locate("{user42}:cart"); got != m.Locate("{user42}:profile") {
		t.Errorf("hash tags: %v and %v differ", got, m.Locate("{user42}:profile"))
	}
	ns := m.Nodes()
	if len(ns) != 3 || ns[0].Name != "a" || ns[1].Name != "b" || ns[1].Weight != 2 || ns[2].Name != "c" {
		t.Errorf("Nodes() = %v", ns)
	}
}

func TestNewModNErrors(t *testing.T) {
	for _, tc := range []struct {
		nodes []ring.Node
		want  error
	}{
		{nil, ring.ErrNoNodes},
		{[]ring.Node{{Name: "a", Addr: "x:1"}, {Name: "a", Addr: "y:1"}}, ring.ErrDuplicateName},
		{[]ring.Node{{Addr: "x:1", Weight: -1}}, ring.ErrBadWeight},
		{[]ring.Node{{Addr: "x:1", Weight: maxSlots + 1}}, ring.ErrBadWeight},
	} {
		if _, err := NewModN(tc.nodes); !errors.Is(err, tc.want) {
			t.Errorf("NewModN(%v) = %v, want %v", tc.nodes, err, tc.want)
		}
	}
}

func TestModNMoved(t *testing.T) {
	mustModN := func(ns []ring.Node) *ModN {
		m, err := NewModN(ns)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	eight := mustModN(DefaultFrom())
	six := mustModN(DefaultTo())
	for _, tc := range []struct {
		name     string
		from, to *ModN
		want     float64
	}{
		// h keeps its node when h%8 == h%6, that is h%24 < 6.
		{"8 to 6", eight, six, 0.75},
		{"6 to 8", six, eight, 0.75},
		{"same", eight, eight, 0},
		// Slots a b b c → a b c: h%4 vs h%3 over 12 residues, where
		// h = 0, 1, 10 and 11 keep their node.
		{"weights", mustModN(nodes("a", "b2", "c")), mustModN(nodes("a", "b", "c")), 8.0 / 12},
	} {
		if got := ModNMoved(tc.from, tc.to); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: ModNMoved = %v, want %v", tc.name, got, tc.want)
		}
	}

	// 5003 and 9004 slots are coprime: their period, over 2^24, is
	// estimated. The estimate must match keys located one by one.
	big1, big2 := mustModN(nodes("a5003")), mustModN(append(nodes("a5003"), nodes("b4001")...))
	est := ModNMoved(big1, big2)
	moved := 0
	const keys = 200000
	for i := range keys {
		k := fmt.Sprint("k", i)
		if big1.Locate(k).Name != big2.Locate(k).Name {
			moved++
		}
	}
	if got := float64(moved) / keys; math.Abs(got-est) > 0.01 {
		t.Errorf("ModNMoved estimate %v, keys located one by one %v", est, got)
	}
}
