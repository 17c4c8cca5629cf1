package ring

import (
	"math"
	"testing"
)

const eps = 1e-12

func TestMovedAddNode(t *testing.T) {
	from := mustNew(t, equalNodes(10))
	to := mustNew(t, equalNodes(11))
	added := equalNodes(11)[10].Name
	moved := Moved(from, to)
	t.Logf("10 → 11 nodes: moved %.4f of the space (ideal 1/11 = %.4f, ratio %.3f)", moved, 1.0/11, moved*11)
	if moved > 1.15/11 {
		t.Errorf("adding an 11th node moved %.4f, want <= %.4f", moved, 1.15/11)
	}
	if got := to.Shares()[added]; math.Abs(got-moved) > eps {
		t.Errorf("moved %.6f but the new node owns %.6f: keys moved between old nodes", moved, got)
	}
	for old, dests := range Flows(from, to) {
		for dest, f := range dests {
			if dest != old && dest != added && f > 0 {
				t.Errorf("flow %s → %s = %v: only the new node should receive keys", old, dest, f)
			}
		}
	}
}

func TestMovedRemoveNode(t *testing.T) {
	nodes := equalNodes(8)
	from := mustNew(t, nodes)
	removed := nodes[5].Name
	to := mustNew(t, append(nodes[:5:5], nodes[6:]...))
	moved := Moved(from, to)
	if share := from.Shares()[removed]; math.Abs(moved-share) > eps {
		t.Errorf("removing %s moved %.6f, want exactly its share %.6f", removed, moved, share)
	}
	flows := Flows(from, to)[removed]
	receivers := 0
	for dest, f := range flows {
		if dest == removed {
			t.Errorf("removed node still receives %v", f)
		}
		if f > 0 {
			receivers++
		}
	}
	t.Logf("removing 1 of 8: moved %.4f, spread over %d of 7 remaining nodes", moved, receivers)
	if receivers < 4 {
		t.Errorf("removed node's keys went to %d nodes, want at least half of the 7 remaining", receivers)
	}
}

func TestFlowsAddUp(t *testing.T) {
	from := mustNew(t, equalNodes(8))
	nodes := equalNodes(6)
	nodes[0].Weight = 3
	to := mustNew(t, nodes, WithVnodes(200))
	fromShares, toShares := from.Shares(), to.Shares()
	outOf := map[string]float64{}
	into := map[string]float64{}
	stay := 0.0
	for a, dests := range Flows(from, to) {
		for b, f := range dests {
			outOf[a] += f
			into[b] += f
			if a == b {
				stay += f
			}
		}
	}
	for n, s := range fromShares {
		if math.Abs(outOf[n]-s) > eps {
			t.Errorf("flows out of %s = %v, want its old share %v", n, outOf[n], s)
		}
	}
	for n, s := range toShares {
		if math.Abs(into[n]-s) > eps {
			t.Errorf("flows into %s = %v, want its new share %v", n, into[n], s)
		}
	}
	if moved := Moved(from, to); math.Abs(moved+stay-1) > eps {
		t.Errorf("moved %v + stayed %v != 1", moved, stay)
	}
}

// TestMovedMatchesKeys checks the exact analysis against sampled keys.
func TestMovedMatchesKeys(t *testing.T) {
	from := mustNew(t, equalNodes(8))
	to := mustNew(t, equalNodes(6))
	keys := randomKeys(200000, 9)
	moved := 0
	for _, k := range keys {
		if from.Locate(k).Name != to.Locate(k).Name {
			moved++
		}
	}
	sampled := float64(moved) / float64(len(keys))
	if exact := Moved(from, to); math.Abs(sampled-exact) > 0.005 {
		t.Errorf("sampled moved fraction %.4f, exact %.4f", sampled, exact)
	}
}

func TestSingleNodeShares(t *testing.T) {
	r := mustNew(t, []Node{{Addr: "a:1"}}, WithVnodes(1))
	if s := r.Shares()["a:1"]; s != 1 {
		t.Errorf("single point owns %v, want 1", s)
	}
	if m := Moved(r, r); m != 0 {
		t.Errorf("Moved(r, r) = %v", m)
	}
}
