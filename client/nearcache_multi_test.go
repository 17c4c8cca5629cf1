package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// nearHits returns the near hits of every node of c.
func nearHits(c *Client) int64 {
	var n int64
	for _, s := range c.NearCacheStats() {
		n += s.Hits
	}
	return n
}

// getMultiIs runs c.GetMulti(keys) and fails the test unless it returns
// want exactly.
func getMultiIs(t *testing.T, c *Client, keys []string, want map[string]string) {
	t.Helper()
	got, err := c.GetMulti(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameValues(got, want); err != nil {
		t.Fatal(err)
	}
}

// sameValues returns nil when got holds want's values, and nothing else.
func sameValues(got map[string][]byte, want map[string]string) error {
	if len(got) != len(want) {
		return fmt.Errorf("GetMulti: %d keys %v, want %d %v", len(got), slices.Sorted(maps.Keys(got)), len(want), slices.Sorted(maps.Keys(want)))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || string(g) != v {
			return fmt.Errorf("GetMulti[%s] = %q (%v), want %q", k, g, ok, v)
		}
	}
	return nil
}

// TestNearCacheInvalidationDrain: a write by another client reaches the near
// copy of a key this client read, while the connection that read it is idle
// (as a hot key's is: its reads are near hits), within about one
// DrainInterval: go-redis's drainer reads the invalidation, and the next
// read after it goes to the server. The reads that wait for it are bounded
// to ten intervals' worth: more would mean the drainer did not run.
func TestNearCacheInvalidationDrain(t *testing.T) {
	const drain = 20 * time.Millisecond
	cl := newCluster(t, "redis-server", 1)
	addr := cl.addrs[0]
	c := cl.client(t, Options{NearCache: &NearCache{MaxAge: -1, DrainInterval: drain}})
	other := plainRedis(t, addr)
	ctx := context.Background()
	var waits []time.Duration
	for i := range 5 {
		k, old, next := fmt.Sprint("drain:", i), []byte("old"), []byte(fmt.Sprint("new", i))
		if err := c.Set(ctx, k, old, 0); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := expect(ctx, c, k, old); err != nil {
				t.Fatal(err)
			}
		}
		hits := nearOf(t, c, addr).Hits
		if err := expect(ctx, c, k, old); err != nil || nearOf(t, c, addr).Hits != hits+1 {
			t.Fatalf("%s: not a near copy (%v)", k, err)
		}
		if err := other.Set(ctx, k, next, 0).Err(); err != nil {
			t.Fatal(err)
		}
		written := time.Now()
		seen := false
		for range 10 * drain / time.Millisecond {
			v, err := c.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if string(v) == string(next) {
				seen = true
				break
			}
			time.Sleep(time.Millisecond)
		}
		if !seen {
			t.Fatalf("%s: another client's write unseen after %d reads a millisecond apart (DrainInterval %v)", k, 10*drain/time.Millisecond, drain)
		}
		waits = append(waits, time.Since(written))
	}
	t.Logf("another client's write seen after %v (DrainInterval %v)", waits, drain)
}

// TestNearCacheHitAllocs: a Get answered near allocates nothing, with and
// without a migration under way.
func TestNearCacheHitAllocs(t *testing.T) {
	cl := newCluster(t, "redis-server", 2)
	ctx := context.Background()
	for _, mig := range []bool{false, true} {
		o := Options{Nodes: cl.nodes(1), NearCache: &NearCache{}}
		if mig {
			o.MigrateFrom = &MigrateFrom{Nodes: cl.nodes(0), Start: time.Now(), Window: time.Hour}
		}
		c := cl.client(t, o)
		if err := c.Set(ctx, "a", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := expect(ctx, c, "a", []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		hits := nearHits(c)
		if n := testing.AllocsPerRun(100, func() { _, _ = c.Get(ctx, "a") }); n != 0 {
			t.Errorf("migration %v: %v allocations per near hit", mig, n)
		}
		if nearHits(c) < hits+100 {
			t.Errorf("migration %v: the Gets were not near hits", mig)
		}
	}
}

// TestNearCacheGetMultiNear: GetMulti answers the keys the near cache holds
// (a value, or a miss held) and asks the nodes for the rest alone; all held,
// it sends nothing. This client's writes reach its next GetMulti at once,
// another client's once the server's invalidation is in, and a node held
// down answers nothing, near or not.
func TestNearCacheGetMultiNear(t *testing.T) {
	cl := newCluster(t, "redis-server", 2)
	c := cl.client(t, Options{NearCache: &NearCache{MaxAge: -1}, ProbeInterval: time.Hour})
	ctx := context.Background()
	all := map[string]string{}
	var keys []string
	for i := range 8 {
		k := fmt.Sprint("gmn:", i)
		keys, all[k] = append(keys, k), "v"+k
	}
	items := map[string][]byte{}
	for k, v := range all {
		items[k] = []byte(v)
	}
	if err := c.SetMulti(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	gets := func() int {
		return serverGets(t, plainRedis(t, cl.addrs[0])) + serverGets(t, plainRedis(t, cl.addrs[1]))
	}

	// Half the keys, and an absent one, held near.
	held := append(slices.Clone(keys[:4]), "gmn:absent")
	for _, k := range held {
		for range 2 {
			if _, err := c.Get(ctx, k); err != nil && !errors.Is(err, ErrCacheMiss) {
				t.Fatal(err)
			}
		}
	}
	hits := nearHits(c)
	getMultiIs(t, c, held, map[string]string{"gmn:0": "vgmn:0", "gmn:1": "vgmn:1", "gmn:2": "vgmn:2", "gmn:3": "vgmn:3"})
	if d := nearHits(c) - hits; d != int64(len(held)) {
		t.Errorf("%d near hits for a GetMulti of %d keys held near", d, len(held))
	}
	before := gets()
	for range 3 {
		getMultiIs(t, c, held, map[string]string{"gmn:0": "vgmn:0", "gmn:1": "vgmn:1", "gmn:2": "vgmn:2", "gmn:3": "vgmn:3"})
	}
	if d := gets() - before; d != 0 {
		t.Errorf("the servers ran %d GETs or MGETs for GetMultis of keys all held near", d)
	}
	// Mixed: the held ones near, the others from the nodes.
	hits = nearHits(c)
	getMultiIs(t, c, append(slices.Clone(keys), "gmn:absent", "gmn:absent2"), all)
	if d := nearHits(c) - hits; d != int64(len(held)) {
		t.Errorf("%d near hits for a GetMulti with %d keys held near", d, len(held))
	}

	// This client's writes, at once.
	if err := c.SetMulti(ctx, map[string][]byte{"gmn:0": []byte("w0"), "gmn:absent": []byte("now")}, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "gmn:1"); err != nil {
		t.Fatal(err)
	}
	getMultiIs(t, c, held, map[string]string{"gmn:0": "w0", "gmn:2": "vgmn:2", "gmn:3": "vgmn:3", "gmn:absent": "now"})

	// Another client's, through the server's invalidation.
	k2 := "gmn:2"
	for range 2 {
		if err := expect(ctx, c, k2, []byte("vgmn:2")); err != nil {
			t.Fatal(err)
		}
	}
	if err := plainRedis(t, c.Locate(k2).Addr).Set(ctx, k2, "other", 0).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "another client's write, through GetMulti", func() error {
		got, err := c.GetMulti(ctx, []string{k2})
		if err != nil {
			return err
		}
		return sameValues(got, map[string]string{k2: "other"})
	})

	// A node held down answers nothing, its near copies neither.
	k3 := "gmn:3"
	for range 2 {
		if err := expect(ctx, c, k3, []byte("vgmn:3")); err != nil {
			t.Fatal(err)
		}
	}
	down := c.state.Load().conns[c.Locate(k3).Addr]
	down.h.SetDown(true)
	defer down.h.SetDown(false)
	got, err := c.GetMulti(ctx, []string{k3})
	if !errors.Is(err, ErrNodeDown) || len(got) != 0 {
		t.Errorf("GetMulti of a key held near on a node held down: %v, %v; want ErrNodeDown", got, err)
	}
}

// TestNearCacheGetMultiMigration: during a migration GetMulti answers near
// only from the new owners' copies. A miss held near on a key's new owner
// does not answer for it (the old owner may have it), and a copy the old
// owner's near cache still holds from before the migration is not read:
// another process, on the new placement alone, has written the key since.
func TestNearCacheGetMultiMigration(t *testing.T) {
	cl := newCluster(t, "redis-server", 2)
	oldAddr, newAddr := cl.addrs[0], cl.addrs[1]
	ctx := context.Background()
	c := cl.client(t, Options{Nodes: cl.nodes(0), NearCache: &NearCache{MaxAge: -1}})
	// Before the migration: a copy on the old owner's near cache.
	if err := c.Set(ctx, "before", []byte("v1"), 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := expect(ctx, c, "before", []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	if nearOf(t, c, oldAddr).Hits == 0 {
		t.Fatal("no near copy on the old owner")
	}
	if err := c.Reshard(cl.nodes(1), time.Hour); err != nil {
		t.Fatal(err)
	}
	newWorld := cl.client(t, Options{Nodes: cl.nodes(1)})
	if err := newWorld.Set(ctx, "before", []byte("v2"), 0); err != nil {
		t.Fatal(err)
	}
	// A key held near on the new owner; an absent one, whose miss is held
	// there; then the old placement's world writes the absent one.
	if err := c.Set(ctx, "hot", []byte("h"), 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := expect(ctx, c, "hot", []byte("h")); err != nil {
			t.Fatal(err)
		}
		if err := expect(ctx, c, "late", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := plainRedis(t, oldAddr).Set(ctx, "late", "on the old owner", 0).Err(); err != nil {
		t.Fatal(err)
	}
	newHits := nearOf(t, c, newAddr).Hits
	fallbacks := c.Migration().FallbackHits
	getMultiIs(t, c, []string{"before", "hot", "late"}, map[string]string{"before": "v2", "hot": "h", "late": "on the old owner"})
	if d := nearOf(t, c, newAddr).Hits - newHits; d != 1 {
		t.Errorf("%d near hits on the new owner, want 1 (hot)", d)
	}
	if d := c.Migration().FallbackHits - fallbacks; d != 1 {
		t.Errorf("%d fallback hits, want 1 (late, past the miss held near)", d)
	}
	// The single-key read keeps the same rules.
	if err := expect(ctx, c, "late", []byte("on the old owner")); err != nil {
		t.Fatal(err)
	}
	if err := expect(ctx, c, "before", []byte("v2")); err != nil {
		t.Fatal(err)
	}
}
