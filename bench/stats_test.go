package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// BenchmarkStats is the cost of client.Stats's counters: the same façade Get
// and Set on the same servers, with the counters on (the default) and off
// (Options.DisableStats), side by side in one run:
// BenchmarkStats/BACKEND/OP/MODE/stats-off and .../stats-on. Counting costs
// two clock reads and a few atomic adds per call, no allocation.
//
// On a shared machine those rows move by far more than the cost measured, so
// BenchmarkStats/BACKEND/Get/paired interleaves the two clients, blocks of
// 256 calls each in turn, and reports each one's wall and CPU time per call
// and their ratios (on/off-time, on/off-cpu): load that drifts during the
// run weighs on both alike.
func BenchmarkStats(b *testing.B) {
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		b.Run(backend.String(), func(b *testing.B) {
			var servers []*testserver.Server
			if backend == client.Redis {
				servers = testserver.Redis(b, benchNodes)
			} else {
				servers = testserver.Memcached(b, benchNodes)
			}
			addrs := testserver.Addrs(servers)
			ctx := context.Background()
			on := facadeWith(b, client.Options{Backend: backend}, addrs)
			off := facadeWith(b, client.Options{Backend: backend, DisableStats: true}, addrs)
			keys, _, _ := loadData(b, on, addrs[0])
			const mask = singleKeys - 1
			for _, c := range []*client.Client{on, off} { // both with their connections open
				for i := range 2 * singleKeys {
					if err := checkValue(c.Get(ctx, keys[i&mask])); err != nil {
						b.Fatal(err)
					}
				}
			}
			get := func(c *client.Client) func(int) error {
				return func(i int) error { return checkValue(c.Get(ctx, keys[i&mask])) }
			}
			set := func(c *client.Client) func(int) error {
				return func(i int) error { return c.Set(ctx, keys[i&mask], benchValue, time.Hour) }
			}
			for _, mode := range []struct {
				name string
				run  func(func(int) error) func(*testing.B)
			}{{"serial", serial}, {"parallel", parallel}} {
				if mode.name == "serial" {
					b.Run("Get/paired", pairedSerial(get(off), get(on)))
				}
				b.Run("Get/"+mode.name+"/stats-off", mode.run(get(off)))
				b.Run("Get/"+mode.name+"/stats-on", mode.run(get(on)))
				b.Run("Set/"+mode.name+"/stats-off", mode.run(set(off)))
				b.Run("Set/"+mode.name+"/stats-on", mode.run(set(on)))
			}
			if s := on.Stats(); s.Nodes[0].Op("get").Hits == 0 {
				b.Fatalf("stats on counted no hits: %+v", s.Nodes[0])
			}
		})
	}
}

// facadeWith returns a shardcache client over addrs with opts, named as
// facade names its nodes.
func facadeWith(tb testing.TB, opts client.Options, addrs []string) *client.Client {
	tb.Helper()
	for i, a := range addrs {
		opts.Nodes = append(opts.Nodes, ring.Node{Name: "cache-" + strconv.Itoa(i), Addr: a})
	}
	c, err := client.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

