package client

import (
	"testing"
	"time"

	"github.com/shardcache/shardcache/topology"
)

// TestFollowTopologyCounterKeepsValue: a counter incremented before a
// published migration's start, when its key moves, keeps its value through
// the start. Before the start Incr increments the old owner and buries the
// new one (the rollout protocol's tombstone); in the window, the skew
// after the start passed, Incr brings the counter over to the new owner
// first. The tombstone lasts until start+2·skew+copyLife, so it refuses
// that copy, the increment runs on the empty new owner, and the old
// owner's value is deleted: the counter restarts at 1. Found by
// internal/chaos TestFleetRollout (counter went backwards at S+skew in
// every process).
func TestFollowTopologyCounterKeepsValue(t *testing.T) {
	for _, kind := range realKinds {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 4)
			ctx := t.Context()
			src := make(chanSource, 1)
			t1 := &topology.Topology{Version: 1, Nodes: cl.nodes(0, 1, 2)}
			src.publish(t1)
			c := cl.client(t, followOpts(src))
			k := movedBetween(t, t1.Nodes, cl.nodes(), 1)[0]
			for range 5 {
				if _, err := c.Incr(ctx, k, 1); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now().Add(time.Second)
			src.publish(&topology.Topology{Version: 2, Nodes: cl.nodes(),
				Migration: &topology.Migration{From: t1.Nodes, Start: start, Window: 30 * time.Second}})
			waitFor(t, "version 2", func() bool { return c.TopologyInfo().Version == 2 })
			if v, err := c.Incr(ctx, k, 1); err != nil || v != 6 {
				t.Fatalf("Incr before the start = %d, %v; want 6", v, err)
			}
			// The skew after the start: followOpts's 50 ms.
			waitFor(t, "the window, the skew passed", func() bool {
				return c.TopologyInfo().Phase == topology.During && time.Now().After(start.Add(100*time.Millisecond))
			})
			if v, err := c.Incr(ctx, k, 1); err != nil || v != 7 {
				t.Errorf("Incr in the window = %d, %v; want 7 (the counter's value before the start, plus one)", v, err)
			}
		})
	}
}
