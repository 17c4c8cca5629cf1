package promstats_test

import (
	"context"
	"testing"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/promstats"
	"github.com/shardcache/shardcache/ring"
)

// TestNearCacheMetrics: with Options.NearCache the collector exports each
// node's near cache, and a near hit is not a request to the node (a real
// redis-server: miniredis has no CLIENT TRACKING).
func TestNearCacheMetrics(t *testing.T) {
	ss := testserver.Redis(t, 1)
	c, err := client.New(client.Options{ReadTimeout: testserver.ClientTimeout, WriteTimeout: testserver.ClientTimeout, Nodes: []ring.Node{{Name: "n0", Addr: ss[0].Addr}},
		NearCache: &client.NearCache{MaxAge: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	col := promstats.New(c, nil)
	for name, want := range map[string]float64{
		promstats.NearCacheHitsTotal:   2,
		promstats.NearCacheMissesTotal: 1,
		promstats.NearCacheEntries:     1,
	} {
		if got := series(t, col, name)[`node="n0"`]; got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if b := series(t, col, promstats.NearCacheBytes)[`node="n0"`]; b <= 0 {
		t.Errorf("%s = %v, want the reply's size", promstats.NearCacheBytes, b)
	}
	if got := series(t, col, promstats.RequestsTotal)[`node="n0",op="get",result="hit"`]; got != 1 {
		t.Errorf("get hits requested from the node: %v, want 1 (the near misses alone)", got)
	}

	// Without a near cache: no near cache series.
	plain, err := client.New(client.Options{ReadTimeout: testserver.ClientTimeout, WriteTimeout: testserver.ClientTimeout, Nodes: []ring.Node{{Name: "n0", Addr: ss[0].Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if s := series(t, promstats.New(plain, nil), promstats.NearCacheHitsTotal); len(s) != 0 {
		t.Errorf("near cache series without a near cache: %v", s)
	}
}
