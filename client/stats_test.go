package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestStats checks that Stats counts what a test did on each node, on every
// kind of server: hits and misses of Get and GetMulti, writes, and the
// errors of a stopped node, refused then failed at once while it is down.
func TestStats(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		if cl.kind == "memcached-classic" {
			t.Skip("the front of a stopped memcached accepts the connection and closes it: not a refused dial")
		}
		ctx := context.Background()
		c := cl.client(t, Options{FailureThreshold: 2, ProbeInterval: time.Hour})
		k0 := keysOn(c, cl.addrs[0], "s0:", 3)
		k1 := keysOn(c, cl.addrs[1], "s1:", 1)[0]
		k2 := keysOn(c, cl.addrs[2], "s2:", 1)[0]
		for _, k := range k0[:2] {
			if err := c.Set(ctx, k, []byte("v"), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range k0 {
			c.Get(ctx, k) // two hits and a miss
		}
		if hits, err := c.GetMulti(ctx, k0); err != nil || len(hits) != 2 {
			t.Fatalf("GetMulti = %v, %v; want 2 hits", hits, err)
		}
		if err := c.Set(ctx, k1, []byte("v"), time.Hour); err != nil {
			t.Fatal(err)
		}
		mustGet(t, c, k1, "v")
		if err := c.Delete(ctx, k1); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, k1); err != ErrCacheMiss {
			t.Fatalf("Get after Delete: %v", err)
		}
		cl.stop(2)
		for i := range 3 {
			_, err := c.Get(ctx, k2)
			if err == nil || errors.Is(err, ErrNodeDown) != (i == 2) {
				t.Fatalf("Get %d on the stopped node: %v; want refused twice, then ErrNodeDown", i, err)
			}
		}

		s := c.Stats()
		if len(s.Nodes) != 3 || s.Nodes[0].Node.Name != "n0" || s.Nodes[2].Node.Name != "n2" {
			t.Fatalf("Stats lists %+v; want n0, n1, n2", s.Nodes)
		}
		for _, n := range s.Nodes {
			if !n.Current || n.Old || n.Node.Weight != 1 {
				t.Errorf("%s: Current %v, Old %v, weight %v; want the current placement alone, weight 1", n.Node.Name, n.Current, n.Old, n.Node.Weight)
			}
		}
		n0, n1, n2 := s.Nodes[0], s.Nodes[1], s.Nodes[2]
		want := func(node, op string, got OpStats, ok, hits, misses int64) {
			t.Helper()
			if got.OK != ok || got.Hits != hits || got.Misses != misses || got.Errors.Total() != 0 {
				t.Errorf("%s %s: %+v; want %d answered, %d hits, %d misses, no errors", node, op, got, ok, hits, misses)
			}
			if n := got.Latency.Count(); n != ok {
				t.Errorf("%s %s: latency of %d calls; want %d", node, op, n, ok)
			}
		}
		want("n0", "get", n0.Op("get"), 3, 2, 1)
		want("n0", "get_multi", n0.Op("get_multi"), 1, 2, 1)
		want("n0", "set", n0.Op("set"), 2, 0, 0)
		want("n1", "get", n1.Op("get"), 2, 1, 1)
		want("n1", "set", n1.Op("set"), 1, 0, 0)
		want("n1", "delete", n1.Op("delete"), 1, 0, 0)
		if n0.Hits() != 4 || n0.Misses() != 2 || n0.Calls() != 6 || !n0.Up {
			t.Errorf("n0 totals: %d hits, %d misses, %d calls, up %v; want 4, 2, 6, up", n0.Hits(), n0.Misses(), n0.Calls(), n0.Up)
		}
		g := n2.Op("get")
		if n2.Up || g.Errors.Refused != 2 || g.Errors.Down != 1 || g.Errors.Total() != 3 || g.OK != 0 || g.Latency.Count() != 2 {
			t.Errorf("stopped n2: up %v, get %+v; want down, 2 refused (timed), 1 down (not timed)", n2.Up, g)
		}
		if e := n2.Errors(); e != g.Errors {
			t.Errorf("n2 errors %+v; want its gets' %+v", e, g.Errors)
		}
		if s.Migrations != 0 || s.Migration.Active {
			t.Errorf("no migration yet: %d migrations, active %v", s.Migrations, s.Migration.Active)
		}
	})
}

// TestStatsMigration checks, through an 8→6 resharding and back, which
// placements each node is reported in, that the nodes a retired placement
// alone used stop being reported, and that the migration totals add up
// every migration while Migration shows the latest.
func TestStatsMigration(t *testing.T) {
	cl := newCluster(t, "miniredis", 8)
	ctx := context.Background()
	clock, from, to, c := eightToSix(t, cl)
	keys := dualKeys(t, "sm", from, to, 30)
	setAll(t, c, keys, time.Hour)
	if err := c.Reshard(to, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		mustGet(t, c, k, "v:"+k) // a miss on the new owner, a fallback hit, a backfill
	}
	s := c.Stats()
	if len(s.Nodes) != 8 {
		t.Fatalf("during the window, %d nodes; want 8", len(s.Nodes))
	}
	var newMisses, oldHits, exists, backfills int64
	for i, n := range s.Nodes {
		if n.Current != (i < 6) || !n.Old {
			t.Errorf("%s: Current %v, Old %v; want n0-n5 in both, n6 and n7 old only", n.Node.Name, n.Current, n.Old)
		}
		newMisses += n.Op("get").Misses
		oldHits += n.Op("get_multi").Hits
		exists += n.Op("exists").OK
		backfills += n.Op("add_multi").OK
	}
	if newMisses != 30 || s.Migration.FallbackHits != 30 || s.Migration.Backfills != 30 || s.MigrationTotals != s.Migration.Snapshot {
		t.Errorf("30 moved keys read: %d misses on new owners, status %+v, totals %+v; want 30 fallback hits and backfills in both",
			newMisses, s.Migration.Snapshot, s.MigrationTotals)
	}
	// Each fallback read finds its key on the old owner and each backfill
	// is one call to the new owner, with nothing after (no EXISTS).
	if oldHits != 30 || backfills != 30 || exists != 0 {
		t.Errorf("old owners: %d keys found; new owners: %d backfill calls; %d EXISTS; want 30, 30, 0", oldHits, backfills, exists)
	}
	if !s.Migration.Active || s.Migrations != 1 {
		t.Errorf("Migration active %v, Migrations %d; want active, 1", s.Migration.Active, s.Migrations)
	}

	clock.Advance(time.Hour)
	c.Get(ctx, keys[0]) // sees the window over and retires the old placement
	s = c.Stats()
	names := []string{}
	for _, n := range s.Nodes {
		names = append(names, n.Node.Name)
		if n.Old || !n.Current {
			t.Errorf("after the window, %s: Current %v, Old %v", n.Node.Name, n.Current, n.Old)
		}
	}
	if !slices.Equal(names, []string{"n0", "n1", "n2", "n3", "n4", "n5"}) || s.Migration.Active {
		t.Fatalf("after the window: nodes %v, active %v; want n0-n5, over", names, s.Migration.Active)
	}

	flushNodes(t, cl, 6, 7) // back, as the check requires, empty
	if err := c.Reshard(from, time.Hour); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, keys[0], "v:"+keys[0])
	s = c.Stats()
	if s.Migrations != 2 || s.MigrationTotals.FallbackHits != 30+s.Migration.FallbackHits || s.Migration.NewHits+s.Migration.FallbackHits != 1 {
		t.Errorf("second migration: %d migrations, totals %+v, latest %+v; want 2, the first's 30 fallback hits plus the latest's",
			s.Migrations, s.MigrationTotals, s.Migration.Snapshot)
	}
}

// TestStatsDisabled checks that DisableStats counts nothing per node, while
// the breaker still works.
func TestStatsDisabled(t *testing.T) {
	cl := newCluster(t, "miniredis", 2)
	c := cl.client(t, Options{DisableStats: true, FailureThreshold: 1, ProbeInterval: time.Hour})
	ctx := context.Background()
	k1 := keysOn(c, cl.addrs[1], "d:", 1)[0]
	c.Get(ctx, keysOn(c, cl.addrs[0], "d:", 1)[0])
	cl.stop(1)
	c.Get(ctx, k1)
	s := c.Stats()
	if len(s.Nodes) != 2 || s.Nodes[0].Ops != nil || s.Nodes[1].Ops != nil || s.Nodes[1].Up {
		t.Fatalf("stats disabled: %+v; want both nodes without counts, n1 down", s.Nodes)
	}
}

// TestHistogram checks the quantile estimate of a latency histogram.
func TestHistogram(t *testing.T) {
	h := Histogram{Bounds: LatencyBounds(), Counts: make([]int64, len(LatencyBounds())+1)}
	h.Counts[1], h.Counts[len(h.Counts)-1] = 99, 1
	if q := h.Quantile(0.5); q != 50*time.Microsecond {
		t.Errorf("median %v; want the 50µs bound", q)
	}
	if q := h.Quantile(0.999); q != h.Bounds[len(h.Bounds)-1] {
		t.Errorf("p99.9 %v; want the largest bound", q)
	}
	if q := (Histogram{Bounds: LatencyBounds()}).Quantile(0.99); q != 0 {
		t.Errorf("quantile of nothing: %v", q)
	}
}
