package sim

import (
	"context"
	"errors"
	"testing"

	"github.com/shardcache/shardcache/ring"
)

// memoryFleet is four nodes, d of a quarter of the others' memory: the
// working set (15000 keys of about 1 KB) fits the fleet but not d's share.
func memoryFleet() MemoryConfig {
	nodes := []ring.Node{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}, {Name: "c", Addr: "c:1"}, {Name: "d", Addr: "d:1"}}
	return MemoryConfig{Config: Config{From: nodes}, Limits: map[string]int64{"a": 6 << 20, "b": 6 << 20, "c": 6 << 20, "d": 3 << 19}}
}

// TestRunMemory: the small node evicts as is, every step; re-weighted by
// balance's proposal it stops evicting within the steps after, its weight
// about a quarter of the others', the fills even and the hit rate higher.
func TestRunMemory(t *testing.T) {
	res, err := RunMemory(context.Background(), memoryFleet())
	if err != nil {
		t.Fatal(err)
	}
	asIs, re := res.AsIs.Nodes, res.Reweighted.Nodes
	if asIs[3].Evictions == 0 || asIs[0].Evictions != 0 {
		t.Errorf("as is: d evicted %d, a %d; want d alone", asIs[3].Evictions, asIs[0].Evictions)
	}
	for _, n := range re {
		if n.Evictions != 0 {
			t.Errorf("re-weighted: %s evicted %d", n.Node.Name, n.Evictions)
		}
	}
	if w := re[3].Node.Weight / re[0].Node.Weight; w < 0.15 || w > 0.35 {
		t.Errorf("d's weight %v of a's %v: want about a quarter", re[3].Node.Weight, re[0].Node.Weight)
	}
	fill := func(ns []MemoryNode) (lo, hi float64) {
		lo = 2
		for _, n := range ns {
			lo, hi = min(lo, n.Fill()), max(hi, n.Fill())
		}
		return lo, hi
	}
	if lo, hi := fill(re); hi/lo > 1.1 {
		t.Errorf("re-weighted fills %.3f to %.3f: want within 10%%", lo, hi)
	}
	if res.Reweighted.SteadyHitRate <= res.AsIs.SteadyHitRate {
		t.Errorf("hit rate %.3f re-weighted, %.3f as is", res.Reweighted.SteadyHitRate, res.AsIs.SteadyHitRate)
	}
	for i := range res.Config.ReshardAt {
		if a, b := res.AsIs.Steps[i], res.Reweighted.Steps[i]; a.Hits != b.Hits {
			t.Fatalf("step %d before the re-weighting differs: %v, %v", i, a, b)
		}
	}
	again, _ := RunMemory(context.Background(), memoryFleet())
	if again.Reweighted.Nodes[3].Items != re[3].Items || again.AsIs.Steps[50].Hits != res.AsIs.Steps[50].Hits {
		t.Error("two runs of one seed differ")
	}
}

// TestRunMemoryBad: a node without a limit, a limit for no node.
func TestRunMemoryBad(t *testing.T) {
	mc := memoryFleet()
	delete(mc.Limits, "b")
	if _, err := RunMemory(context.Background(), mc); !errors.Is(err, ErrBadConfig) {
		t.Errorf("no limit for b: %v", err)
	}
	mc = memoryFleet()
	mc.Limits["z"] = 1
	if _, err := RunMemory(context.Background(), mc); !errors.Is(err, ErrBadConfig) {
		t.Errorf("a limit for z: %v", err)
	}
}

// TestLRU: the model server evicts the least recently used for room, and
// a read makes a key recent.
func TestLRU(t *testing.T) {
	s := newLRU(300, 10)
	for k := range int32(3) {
		if ev := s.set(k, 100); ev != 0 {
			t.Fatalf("set %d evicted %d", k, ev)
		}
	}
	s.get(0) // 1 is now the least recent
	if ev := s.set(3, 100); ev != 1 || s.get(1) || !s.get(0) || s.bytes != 300 || s.items.Len() != 3 {
		t.Errorf("evicted %d, 1 held %v, %d bytes: want 1 evicted, 300 bytes", ev, s.elem[1] != nil, s.bytes)
	}
	c := s.clone()
	s.remove(0)
	if !c.get(0) || c.bytes != 300 || s.bytes != 200 {
		t.Errorf("clone shares its original's items")
	}
}
