package ring

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestRendezvousLocate(t *testing.T) {
	nodes := []Node{{Name: "shard1", Addr: "10.0.0.1:6379"}, {Name: "shard2", Addr: "10.0.0.2:6379"}, {Addr: "10.0.0.3:6379"}}
	r, err := NewRendezvous(nodes)
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := NewRendezvous([]Node{nodes[2], nodes[1], nodes[0]})
	names := []string{"shard1", "shard2", "10.0.0.3:6379"}
	counts := map[string]int{}
	const keys = 30000
	for i := range keys {
		key := fmt.Sprintf("key:%d", i)
		// The definition, written out: highest mix64(xxhash(key) ^ xxhash(name)).
		best, bestScore := "", uint64(0)
		for _, n := range names {
			if s := mix64(xxhash.Sum64String(key) ^ xxhash.Sum64String(n)); best == "" || s > bestScore {
				best, bestScore = n, s
			}
		}
		got := r.Locate(key)
		if got.Name != best || rev.Locate(key) != got {
			t.Fatalf("Locate(%q) = %v (reversed order %v), want %s", key, got, rev.Locate(key), best)
		}
		counts[got.Name]++
	}
	for _, n := range names {
		if share := float64(counts[n]) / keys; math.Abs(share-1.0/3) > 0.02 {
			t.Errorf("%s holds %.3f of the keys, want about 1/3", n, share)
		}
	}
	if r.Locate("{user42}:cart") != r.Locate("user42") || r.Locate("x{user42}y") != r.Locate("user42") {
		t.Error("hash tags: {user42}:cart, x{user42}y and user42 should share a shard")
	}
}

func TestNewRendezvousErrors(t *testing.T) {
	for _, tc := range []struct {
		nodes []Node
		want  error
	}{
		{nil, ErrNoNodes},
		{[]Node{{Name: "a"}}, ErrEmptyAddr},
		{[]Node{{Addr: "a:1", Weight: 2}}, ErrBadWeight},
		{[]Node{{Addr: "a:1", Weight: 0.5}}, ErrBadWeight},
		{[]Node{{Name: "a", Addr: "a:1"}, {Name: "a", Addr: "b:1"}}, ErrDuplicateName},
		{[]Node{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "a:1"}}, ErrDuplicateAddr},
	} {
		if _, err := NewRendezvous(tc.nodes); !errors.Is(err, tc.want) {
			t.Errorf("NewRendezvous(%v) = %v, want %v", tc.nodes, err, tc.want)
		}
	}
}
