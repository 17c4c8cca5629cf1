package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestGetMultiOrLoadRefreshAfterOwnLoad: a call with a stale hit and a miss
// calls its loader for the miss, and only once that call has returned, for
// the refresh: never two at once.
func TestGetMultiOrLoadRefreshAfterOwnLoad(t *testing.T) {
	cl := newCluster(t, "redis-server", 1)
	ctx := t.Context()
	c := cl.client(t, Options{EarlyRefresh: time.Minute})
	if err := c.Set(ctx, "stale", []byte("old"), 59*time.Second); err != nil {
		t.Fatal(err)
	}
	var inFlight, most, calls atomic.Int64
	load := func(_ context.Context, keys []string) (map[string][]byte, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		if n > most.Load() {
			most.Store(n)
		}
		calls.Add(1)
		time.Sleep(20 * time.Millisecond) // a database's time: long enough to overlap a concurrent call
		m := map[string][]byte{}
		for _, k := range keys {
			m[k] = []byte("v")
		}
		return m, nil
	}
	got, err := c.GetMultiOrLoad(ctx, []string{"stale", "miss"}, time.Hour, load)
	if err != nil || string(got["stale"]) != "old" || string(got["miss"]) != "v" {
		t.Fatalf("%q, %v", got, err)
	}
	c.refreshes.Wait()
	if calls.Load() != 2 || most.Load() != 1 {
		t.Fatalf("%d loader calls, %d at once at most; want the miss's, then the refresh's", calls.Load(), most.Load())
	}
}

// TestNegativeEntryNotRefreshed: a negative entry lives NegativeTTL, all
// of it inside a longer refresh window: reads answer ErrNotFound from it
// and never reload it.
func TestNegativeEntryNotRefreshed(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 1)
			c := cl.client(t, Options{NegativeTTL: 10 * time.Second, StaleWhileRevalidate: time.Minute})
			var loads atomic.Int64
			absent := func(context.Context, []string) (map[string][]byte, error) { loads.Add(1); return nil, nil }
			absentOne := func(context.Context) ([]byte, error) { loads.Add(1); return nil, ErrNotFound }
			for range 5 {
				if got, err := c.GetMultiOrLoad(t.Context(), []string{"gone"}, time.Hour, absent); err != nil || len(got) != 0 {
					t.Fatal(got, err)
				}
				if _, err := c.GetOrLoad(t.Context(), "gone", time.Hour, absentOne); !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
				c.refreshes.Wait()
			}
			if n := loads.Load(); n != 1 {
				t.Fatalf("10 reads of an absent key: %d loads; want 1 (%+v)", n, c.LoadStats())
			}
		})
	}
}

// TestGetMultiOrLoadCancelledReleasesLeases: a call whose context ends
// while its loader runs gives its leases up: the next process loads at
// once instead of waiting Options.Lease.
func TestGetMultiOrLoadCancelledReleasesLeases(t *testing.T) {
	for _, kind := range []string{"memcached", "redis-server"} {
		for _, meta := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/meta=%v", kind, meta), func(t *testing.T) {
				cl := newCluster(t, kind, 1)
				opts := Options{Lease: testLease, MetaLeases: meta, LeaseRetry: 20 * time.Millisecond}
				c, other := cl.client(t, opts), cl.client(t, opts)
				ctx, cancel := context.WithCancel(t.Context())
				entered := make(chan struct{})
				done := make(chan error, 1)
				go func() {
					_, err := c.GetMultiOrLoad(ctx, []string{"k1", "k2"}, time.Hour, func(ctx context.Context, _ []string) (map[string][]byte, error) {
						close(entered)
						<-ctx.Done()
						return nil, ctx.Err()
					})
					done <- err
				}()
				<-entered
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("the cancelled call: %v", err)
				}
				tctx, tcancel := context.WithTimeout(t.Context(), 10*time.Second) // a bound: the lease lasts a minute
				defer tcancel()
				got, err := other.GetMultiOrLoad(tctx, []string{"k1", "k2"}, time.Hour, newBatchLoader(false).load)
				if err != nil || len(got) != 2 || other.LoadStats().Loads != 1 {
					t.Fatalf("the next process: %q, %v, %+v; want it to load (the leases released)", got, err, other.LoadStats())
				}
			})
		}
	}
}

// TestGetMultiOrLoadFreshDuringMigration: during a migration the reads of
// a refresh window ask a failed owner once (one NodeError), read an
// unmoved missing key on its owner as often as without a migration, and
// count their hits on new owners in Migration().NewHits.
func TestGetMultiOrLoadFreshDuringMigration(t *testing.T) {
	none := func(context.Context, []string) (map[string][]byte, error) { return nil, nil }
	t.Run("unmoved", func(t *testing.T) {
		cl := newCluster(t, "memcached", 3)
		from, to := cl.nodes(0, 1, 2), cl.nodes(0, 1)
		oldRing, newRing := mustRing(t, from), mustRing(t, to)
		var key string
		for i := 0; key == ""; i++ {
			if k := fmt.Sprintf("u%d", i); oldRing.Locate(k).Addr == cl.addrs[0] && newRing.Locate(k).Addr == cl.addrs[0] {
				key = k
			}
		}
		for _, o := range []Options{{EarlyRefresh: time.Minute}, {Lease: testLease, MetaLeases: true}, {Lease: testLease, MetaLeases: true, EarlyRefresh: time.Minute}} {
			o.Nodes = from
			c := cl.client(t, o)
			var gets [2]int
			for mig := range 2 {
				if mig == 1 {
					if err := c.Reshard(to, time.Hour); err != nil {
						t.Fatal(err)
					}
				}
				g0 := memcachedGets(t, cl.addrs[0])
				if _, err := c.GetMultiOrLoad(t.Context(), []string{key}, time.Hour, none); err != nil {
					t.Fatal(err)
				}
				gets[mig] = memcachedGets(t, cl.addrs[0]) - g0
			}
			if gets[0] != gets[1] {
				t.Errorf("EarlyRefresh %v MetaLeases %v: an unmoved missing key cost %d gets, %d during a migration", o.EarlyRefresh, o.MetaLeases, gets[0], gets[1])
			}
		}
	})
	t.Run("failed owner and new hits", func(t *testing.T) {
		cl := newCluster(t, "redis-server", 3)
		from, to := cl.nodes(0, 1, 2), cl.nodes(0, 1)
		c := cl.client(t, Options{Nodes: from, EarlyRefresh: time.Minute, ReadTimeout: faultTimeout})
		if err := c.Reshard(to, time.Hour); err != nil {
			t.Fatal(err)
		}
		keys := dualKeys(t, "nh", from, to, 5)
		for _, k := range keys {
			if err := c.Set(t.Context(), k, []byte("v"), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		n0 := c.Migration().NewHits
		if got, err := c.GetMultiOrLoad(t.Context(), keys, time.Hour, newBatchLoader(false).load); err != nil || len(got) != 5 {
			t.Fatal(got, err)
		}
		if n := c.Migration().NewHits - n0; n != 5 {
			t.Errorf("5 hits on new owners: NewHits +%d", n)
		}
		newRing := mustRing(t, to)
		var down []string
		for i := 0; len(down) < 3; i++ {
			if k := fmt.Sprintf("k%d", i); newRing.Locate(k).Addr == cl.addrs[0] {
				down = append(down, k)
			}
		}
		cl.stop(0)
		_, _, err := c.getMultiFresh(t.Context(), down, time.Hour, none) // GetMultiOrLoad loads past it
		n := 0
		for _, ne := range nodeErrors(err) {
			if ne.Node.Addr == cl.addrs[0] {
				n++
			}
		}
		if n != 1 {
			t.Errorf("a failed owner: %d NodeErrors in one call (%v); want 1", n, err)
		}
	})
}

// TestGetMultiOrLoadFreshNearCache: with a refresh window, GetMultiOrLoad
// still answers the keys held near without asking the node.
func TestGetMultiOrLoadFreshNearCache(t *testing.T) {
	cl := newCluster(t, "memcached", 1)
	ctx := t.Context()
	c := cl.client(t, Options{NearCache: &NearCache{}, StaleWhileRevalidate: time.Minute})
	if err := c.Set(ctx, "hot", []byte("v"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "hot"); err != nil { // fills the near cache
		t.Fatal(err)
	}
	g0 := memcachedGets(t, cl.addrs[0])
	for range 10 {
		if got, err := c.GetMultiOrLoad(ctx, []string{"hot"}, time.Hour, newBatchLoader(false).load); err != nil || string(got["hot"]) != "v" {
			t.Fatal(got, err)
		}
	}
	if n := memcachedGets(t, cl.addrs[0]) - g0; n != 0 {
		t.Fatalf("10 GetMultiOrLoad of a key held near cost %d gets", n)
	}
}

// TestRedisLeaseReadStats: on Redis the lease read's script is observed
// as a get_multi with its hits and misses, not as "other", and its first
// EVALSHA's NOSCRIPT is no error.
func TestRedisLeaseReadStats(t *testing.T) {
	cl := newCluster(t, "redis-server", 1)
	c := cl.client(t, Options{EarlyRefresh: time.Minute})
	if err := c.Set(t.Context(), "a", []byte("v"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetMultiOrLoad(t.Context(), []string{"a", "b"}, time.Hour, newBatchLoader(false).load); err != nil {
		t.Fatal(err)
	}
	for _, o := range c.Stats().Nodes[0].Ops {
		switch {
		case o.Op == "other" || o.Errors.Other > 0:
			t.Errorf("op %+v: want the lease read as a get_multi, without errors", o)
		case o.Op == "get_multi" && (o.Hits != 1 || o.Misses != 1):
			t.Errorf("get_multi %+v: want 1 hit and 1 miss", o)
		}
	}
}
