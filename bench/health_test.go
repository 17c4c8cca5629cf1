package bench

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// BenchmarkHealth measures what node health costs and what it saves, on 3
// real servers of each backend (BenchmarkHealth/BACKEND/ROW):
//
//   - Get/no-breaker, Get/breaker: a Get of a key on a healthy node with
//     FailureThreshold -1 (no health tracking) and with the default breaker:
//     the price of recording every call's outcome.
//   - Get/all-up, Get/one-hung: p50-ns and p99-ns of Gets of keys on the
//     healthy nodes, with all three up and while the third is stopped with
//     SIGSTOP and held down by the breaker.
//   - Get/down-node: a Get of a key on the hung node once it is down: what a
//     call to it costs instead of a timeout.
//   - Get/all-up-again: Get/all-up after SIGCONT, once the node is up: the
//     control for a shared machine's drift during the run.
func BenchmarkHealth(b *testing.B) {
	for _, kind := range []string{"redis", "memcached"} {
		b.Run(kind, func(b *testing.B) {
			var servers []*testserver.Server
			backend := client.Redis
			if kind == "redis" {
				servers = testserver.Redis(b, 3)
			} else {
				servers, backend = testserver.Memcached(b, 3), client.Memcached
			}
			nodes := make([]ring.Node, len(servers))
			for i, s := range servers {
				nodes[i] = ring.Node{Name: "cache-" + strconv.Itoa(i), Addr: s.Addr}
			}
			newClient := func(threshold int) *client.Client {
				// 1s timeouts: a loaded machine must not time a healthy node out
				// (which would fail the run), and a hung one costs 3s to detect.
				c, err := client.New(client.Options{Backend: backend, Nodes: nodes, FailureThreshold: threshold,
					DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				return c
			}
			off, on := newClient(-1), newClient(0)
			ctx := context.Background()
			keys := keysOn(on, servers[0].Addr, singleKeys)
			healthy := slices.Concat(keys, keysOn(on, servers[1].Addr, singleKeys))
			victim := keysOn(on, servers[2].Addr, 1)[0]
			items := map[string][]byte{victim: benchValue}
			for _, k := range healthy {
				items[k] = benchValue
			}
			if err := on.SetMulti(ctx, items, 0); err != nil {
				b.Fatal(err)
			}
			const mask = singleKeys - 1
			b.Run("Get/no-breaker", serial(func(i int) error { return checkValue(off.Get(ctx, keys[i&mask])) }))
			b.Run("Get/breaker", serial(func(i int) error { return checkValue(on.Get(ctx, keys[i&mask])) }))
			b.Run("Get/all-up", latencies(func(i int) error { return checkValue(on.Get(ctx, healthy[i%len(healthy)])) }))

			servers[2].Pause()
			for i := 0; ; i++ { // each of these costs the timeout, until the threshold
				if _, err := on.Get(ctx, victim); errors.Is(err, client.ErrNodeDown) {
					break
				}
				if i == 10*client.DefaultFailureThreshold {
					b.Fatalf("the hung node is not down after %d calls", i)
				}
			}
			b.Run("Get/one-hung", latencies(func(i int) error { return checkValue(on.Get(ctx, healthy[i%len(healthy)])) }))
			b.Run("Get/down-node", serial(func(int) error {
				if _, err := on.Get(ctx, victim); !errors.Is(err, client.ErrNodeDown) {
					return err
				}
				return nil
			}))

			// The control: all up again, the same rows, to tell what the hung
			// node costs from the drift of a shared machine.
			servers[2].Resume()
			for i := 0; on.Health()[2].Down; i++ {
				if i == 10000 {
					b.Fatal("the node is not up again 10s after SIGCONT")
				}
				time.Sleep(time.Millisecond)
			}
			b.Run("Get/all-up-again", latencies(func(i int) error { return checkValue(on.Get(ctx, healthy[i%len(healthy)])) }))
		})
	}
}

// latencies is serial, and reports the p50 and p99 of the calls too.
func latencies(op func(i int) error) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		ds := make([]time.Duration, 0, 1<<16)
		start := cpuTime(b)
		for i := 0; b.Loop(); i++ {
			t := time.Now()
			if err := op(i); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t))
		}
		reportCPU(b, start)
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2]), "p50-ns")
		b.ReportMetric(float64(ds[len(ds)*99/100]), "p99-ns")
	}
}
