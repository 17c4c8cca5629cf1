package client

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// TestPoolSizeBounds: under 64 concurrent callers mixing Get, Set and
// GetMulti, a node sees at most PoolSize connections from one client at
// any moment, counted by the real server itself: on Redis with and without
// AutoPipeline and NearCache, and on Memcached with and without
// AutoPipeline. A caller that finds them all busy waits for one.
func TestPoolSizeBounds(t *testing.T) {
	const poolSize = 4
	for _, tc := range []struct {
		name string
		kind string
		opts Options
	}{
		{"redis", "redis", Options{}},
		{"redis/autopipeline", "redis", Options{AutoPipeline: true}},
		{"redis/nearcache", "redis", Options{NearCache: &NearCache{}}},
		{"redis/autopipeline+nearcache", "redis", Options{AutoPipeline: true, NearCache: &NearCache{}}},
		{"memcached", "memcached", Options{Backend: Memcached}},
		{"memcached/autopipeline", "memcached", Options{Backend: Memcached, AutoPipeline: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var servers []*testserver.Server
			if tc.kind == "redis" {
				servers = testserver.Redis(t, 2)
			} else {
				servers = testserver.Memcached(t, 2)
			}
			opts := tc.opts
			opts.Nodes = []ring.Node{{Name: "a", Addr: servers[0].Addr}, {Name: "b", Addr: servers[1].Addr}}
			opts.PoolSize = poolSize
			opts.ReadTimeout, opts.WriteTimeout = 5*time.Second, 5*time.Second // waits, not failures, on a busy machine
			c, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			counters := []*testserver.ConnCounter{servers[0].CountConns(t), servers[1].CountConns(t)}
			keys := numberedKeys("budget", 40)
			ctx := context.Background()
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for i := range 30 {
						k := keys[(g+i)%len(keys)]
						var err error
						switch (g + i) % 3 {
						case 0:
							err = c.Set(ctx, k, []byte("v"+k), time.Minute)
						case 1:
							if _, err = c.Get(ctx, k); err == ErrCacheMiss {
								err = nil
							}
						default:
							_, err = c.GetMulti(ctx, keys)
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			reached := false
			for i, cc := range counters {
				// A dead connection replaced would be accepted beyond the
				// bound; none dies here.
				peak, accepted := cc.Stop()
				if peak > poolSize || peak == 0 || accepted > poolSize {
					t.Errorf("node %d saw %d connections at once, %d in all, from a client of PoolSize %d", i, peak, accepted, poolSize)
				}
				reached = reached || accepted == poolSize
			}
			if !reached && !opts.AutoPipeline { // auto-pipelined calls share connections
				t.Error("no node was dialed PoolSize times: the load did not reach the bound it tests")
			}
		})
	}
}
