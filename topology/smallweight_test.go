package topology

import (
	"testing"

	"github.com/shardcache/shardcache/ring"
)

// TestSmallWeights: a weight under 0.5, which a ring of one point per unit
// of weight cannot place but the client's of ring.DefaultVnodes does (a
// node of a quarter of the others' memory), is a valid topology, and keeps
// its weight through normalisation.
func TestSmallWeights(t *testing.T) {
	nodes := []ring.Node{{Name: "a", Addr: "h:1"}, {Name: "b", Addr: "h:2", Weight: 0.23}}
	top := &Topology{Nodes: nodes}
	if err := top.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	got, err := normalized(nodes)
	if err != nil || got[0].Weight != 1 || got[1].Weight != 0.23 {
		t.Errorf("normalized = %+v, %v; want weights 1 and 0.23", got, err)
	}
	if _, err := ring.New(nodes); err != nil {
		t.Errorf("the client's ring refuses it: %v", err)
	}
}
