package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// chanSource is a topology.Source whose updates a test sends.
type chanSource chan topology.Update

func (s chanSource) Watch(ctx context.Context) <-chan topology.Update {
	out := make(chan topology.Update)
	go func() {
		defer close(out)
		for {
			select {
			case u := <-s:
				select {
				case out <- u:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (s chanSource) publish(t *topology.Topology) { s <- topology.Update{Topology: t} }

// realKinds are the real servers the topology tests run on.
var realKinds = []string{"redis-server", "memcached"}

// movedBetween returns n keys whose owner differs between rings of from and to.
func movedBetween(t *testing.T, from, to []ring.Node, n int) []string {
	t.Helper()
	a, err := ring.New(from)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ring.New(to)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprintf("moved:%d", i); a.Locate(k).Addr != b.Locate(k).Addr {
			keys = append(keys, k)
		}
	}
	return keys
}

// direct returns a client of the one node n, which reads it without any
// placement.
func direct(t *testing.T, cl *cluster, n ring.Node) *Client {
	t.Helper()
	return cl.client(t, Options{Nodes: []ring.Node{n}})
}

// followOpts are the options of a client following src in these tests:
// timeouts of a second (not the cluster's five), so that the handover
// (start + 3×skew + the writes' bound, copy.go) comes within the tests'
// windows.
func followOpts(src chanSource) Options {
	return Options{Topology: &TopologyOptions{Source: src, Skew: 50 * time.Millisecond, Wait: 5 * time.Second},
		ReadTimeout: time.Second, WriteTimeout: time.Second}
}

// TestFollowTopology: a client follows its source through a published
// migration 3→4: before the start it reads the old placement alone and
// leaves the new owner a tombstone where it writes; in the window it reads
// the new owner first; after it, the new placement alone, every key still
// read with its last value (a sweep in the window).
func TestFollowTopology(t *testing.T) {
	for _, kind := range realKinds {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 4)
			ctx := t.Context()
			src := make(chanSource, 1)
			t1 := &topology.Topology{Version: 1, Nodes: cl.nodes(0, 1, 2)}
			src.publish(t1)
			c := cl.client(t, followOpts(src))
			if s := c.TopologyInfo(); !s.Following || s.Version != 1 || s.Applied != 1 || s.Phase != topology.Steady {
				t.Fatalf("TopologyInfo after New = %+v", s)
			}
			if s := c.Stats().Topology; s.Version != 1 || !s.Following {
				t.Fatalf("Stats().Topology = %+v; want version 1", s)
			}
			if got := c.Nodes(); len(got) != 3 {
				t.Fatalf("Nodes = %v; want the first topology's", got)
			}
			moved := movedBetween(t, t1.Nodes, cl.nodes(), 40)
			for _, k := range moved {
				if err := c.Set(ctx, k, []byte("v1:"+k), 0); err != nil {
					t.Fatal(err)
				}
			}

			// A lead of 5 s: the checks below, a few round trips, must all
			// happen before the start, on a busy machine too.
			start := time.Now().Add(5 * time.Second)
			t2 := &topology.Topology{Version: 2, Nodes: cl.nodes(), Migration: &topology.Migration{From: t1.Nodes, Start: start, Window: 14 * time.Second}}
			src.publish(t2)
			waitFor(t, "version 2", func() bool { return c.TopologyInfo().Version == 2 })
			if time.Now().After(start) {
				t.Fatal("the topology took the whole lead to arrive")
			}
			if s := c.TopologyInfo(); s.Phase != topology.Before {
				t.Fatalf("phase before the start = %v", s.Phase)
			}
			newRing, _ := ring.New(t2.Nodes)
			k := moved[0]
			if err := c.Set(ctx, k, []byte("v2:"+k), 0); err != nil {
				t.Fatal(err)
			}
			if v, err := direct(t, cl, newRing.Locate(k)).Get(ctx, k); err != ErrCacheMiss {
				t.Fatalf("the new owner before the start = %q, %v; want nothing readable (a tombstone)", v, err)
			}
			mustGet(t, c, k, "v2:"+k)

			waitFor(t, "the window", func() bool { return c.TopologyInfo().Phase == topology.During })
			if _, err := c.Sweep(ctx, SweepOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the end of the migration", func() bool { return !c.Migration().Active })
			if s := c.TopologyInfo(); s.Phase != topology.After || s.Applied != 2 || s.Refused != 0 {
				t.Fatalf("TopologyInfo after the window = %+v", s)
			}
			mustGet(t, c, k, "v2:"+k)
			for _, k := range moved[1:] {
				mustGet(t, c, k, "v1:"+k)
				if c.Locate(k).Addr != newRing.Locate(k).Addr {
					t.Fatalf("%s located on %v; want the new ring's owner", k, c.Locate(k))
				}
			}
		})
	}
}

// TestTopologyRefused: a change that removes too much of the weight, and a
// source's error, are counted and leave the client on its last topology,
// every key readable.
func TestTopologyRefused(t *testing.T) {
	cl := newCluster(t, "redis-server", 4)
	ctx := t.Context()
	src := make(chanSource, 1)
	src.publish(&topology.Topology{Version: 1, Nodes: cl.nodes()})
	c := cl.client(t, followOpts(src))
	for i := range 50 {
		if err := c.Set(ctx, fmt.Sprint("k", i), []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	src.publish(&topology.Topology{Version: 2, Nodes: cl.nodes(0)})
	src <- topology.Update{Err: errors.New("the zone is gone")}
	waitFor(t, "the refusal and the error", func() bool {
		s := c.TopologyInfo()
		return s.Refused == 1 && s.SourceErrors == 1
	})
	s := c.TopologyInfo()
	if s.Version != 1 || !strings.Contains(s.LastError, "zone") {
		t.Fatalf("TopologyInfo = %+v; want version 1 kept, the last error the source's", s)
	}
	if len(c.Nodes()) != 4 || c.Migration().Active {
		t.Fatalf("Nodes = %v, migration %+v; want the last topology kept", c.Nodes(), c.Migration())
	}
	for i := range 50 {
		mustGet(t, c, fmt.Sprint("k", i), "v")
	}
	// The same nodes under a new version: the version alone changes.
	src.publish(&topology.Topology{Version: 3, Nodes: cl.nodes()})
	waitFor(t, "version 3", func() bool { return c.TopologyInfo().Version == 3 })
	if s := c.TopologyInfo(); s.Applied != 1 || c.Migration().Active || c.Migration().Start != (time.Time{}) {
		t.Fatalf("after the same nodes again: %+v, migration %+v; want nothing applied", s, c.Migration())
	}
}

// TestTopologyWait: New fails with ErrNoTopology, wrapping the source's
// error, when no usable topology comes within Wait.
func TestTopologyWait(t *testing.T) {
	src := make(chanSource, 2)
	src <- topology.Update{Err: topology.ErrNoNodes}
	_, err := New(Options{Topology: &TopologyOptions{Source: src, Wait: 200 * time.Millisecond}})
	if !errors.Is(err, ErrNoTopology) || !errors.Is(err, topology.ErrNoNodes) {
		t.Fatalf("New = %v; want ErrNoTopology wrapping the source's error", err)
	}
	_, err = New(Options{Nodes: []ring.Node{{Name: "a", Addr: "127.0.0.1:1"}}, Topology: &TopologyOptions{Source: src}})
	if !errors.Is(err, ErrBadOptions) {
		t.Fatalf("New with Nodes and Topology = %v; want ErrBadOptions", err)
	}
}

// TestLateTopologyRepairs: a process that receives a migration after its
// start has been writing the old owners alone while others read the new
// ones first, where an older copy may sit. It holds the migration before
// its start (old placement alone, writes waiting) until it has buried, on
// the new owners, the keys it wrote since the start; then it reads the new
// owner first and finds no stale copy. With a write log too short to reach
// back, the repair fails, counted, and the keys it did not log read stale:
// the boundary the doc states.
func TestLateTopologyRepairs(t *testing.T) {
	for _, kind := range realKinds {
		for _, logSize := range []int{0, 4} {
			t.Run(fmt.Sprintf("%s/log=%d", kind, logSize), func(t *testing.T) {
				cl := newCluster(t, kind, 4)
				ctx := t.Context()
				src := make(chanSource, 1)
				t1 := &topology.Topology{Version: 1, Nodes: cl.nodes(0, 1, 2)}
				src.publish(t1)
				opts := followOpts(src)
				opts.Topology.WriteLog = logSize
				c := cl.client(t, opts)
				moved := movedBetween(t, t1.Nodes, cl.nodes(), 20)
				newRing, _ := ring.New(cl.nodes())
				start := time.Now()
				for _, k := range moved {
					// What another process backfilled on the new owner
					// after the start, before this one's write.
					if err := direct(t, cl, newRing.Locate(k)).Set(ctx, k, []byte("stale"), 0); err != nil {
						t.Fatal(err)
					}
					if err := c.Set(ctx, k, []byte("fresh"), 0); err != nil {
						t.Fatal(err)
					}
				}
				src.publish(&topology.Topology{Version: 2, Nodes: cl.nodes(),
					Migration: &topology.Migration{From: t1.Nodes, Start: start, Window: 4 * time.Second}})
				waitFor(t, "version 2", func() bool { return c.TopologyInfo().Version == 2 })
				if logSize == 0 {
					waitFor(t, "the repair", func() bool { return !c.TopologyInfo().Repairing })
					s := c.TopologyInfo()
					if s.Late != 1 || s.Repaired < int64(len(moved)) || s.RepairFailures != 0 || s.Phase != topology.During {
						t.Fatalf("TopologyInfo after the repair = %+v", s)
					}
				} else {
					waitFor(t, "the repair to fail", func() bool { return c.TopologyInfo().RepairFailures == 1 })
					waitFor(t, "the hold to end", func() bool { return !c.TopologyInfo().Repairing })
					s := c.TopologyInfo()
					if s.Late != 1 || s.Repaired >= int64(len(moved)) || s.Phase != topology.During {
						t.Fatalf("TopologyInfo with a short log = %+v; want a partial repair, then the window", s)
					}
					stale := 0
					for _, k := range moved {
						if v, err := c.Get(ctx, k); err == nil && string(v) == "stale" {
							stale++
						}
					}
					if stale == 0 || stale > len(moved)-int(s.Repaired) {
						t.Fatalf("%d stale reads of %d keys after a repair that buried %d; want some, only among the unburied", stale, len(moved), s.Repaired)
					}
					return
				}
				for _, k := range moved {
					mustGet(t, c, k, "fresh")
				}
			})
		}
	}
}

// TestTopologyPending: a topology that arrives during a migration waits
// for its end, then runs.
func TestTopologyPending(t *testing.T) {
	cl := newCluster(t, "redis-server", 4)
	src := make(chanSource, 1)
	t1 := &topology.Topology{Version: 1, Nodes: cl.nodes(0, 1)}
	src.publish(t1)
	c := cl.client(t, followOpts(src))
	t2 := &topology.Topology{Version: 2, Nodes: cl.nodes(0, 1, 2), Migration: &topology.Migration{From: t1.Nodes, Start: time.Now(), Window: time.Second}}
	src.publish(t2)
	waitFor(t, "version 2", func() bool { return c.TopologyInfo().Version == 2 })
	published := time.Now()
	src.publish(&topology.Topology{Version: 3, Nodes: cl.nodes()}) // no migration: Lead and Window apply
	waitFor(t, "version 3 pending", func() bool { return c.TopologyInfo().Pending == 3 })
	waitFor(t, "version 3", func() bool { return c.TopologyInfo().Version == 3 })
	m := c.Migration()
	if !m.Active || len(m.NewNodes) != 4 || len(m.OldNodes) != 3 {
		t.Fatalf("migration after version 3 = %+v; want 3 → 4 nodes", m)
	}
	// The lead runs from a moment between the publication and now, however
	// long the machine took to get here.
	if earliest, latest := published.Add(DefaultTopologyLead), time.Now().Add(DefaultTopologyLead); m.Start.Before(earliest) || m.Start.After(latest) {
		t.Fatalf("a change without a migration starts at %v; want the lead after it arrived, within [%v, %v]", m.Start, earliest, latest)
	}
}
