package bench

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
)

// callers is the number of goroutines calling at once in the concurrent
// rows of BenchmarkAutoPipeline.
const callers = 256

// BenchmarkAutoPipeline is the throughput of Get from 256 goroutines at once
// on one server, and the latency of a lone caller, with Options.AutoPipeline
// and without it, beside the direct client in the same run:
//
//   - Redis/Get/256/direct: a go-redis Client with the façade's options
//     (directRedis); .../facade: the façade; .../facade-autopipeline: the
//     façade with Options.AutoPipeline (.../facade-autopipeline-cancelctx:
//     under a context that can end, as a request's); .../goredis-autopipeline:
//     go-redis's own blocking auto-pipeliner on the direct client, the
//     floor; .../rueidis: rueidis, auto-pipelining by default.
//
//   - Redis/Get/serial/...: one caller, the same clients; .../paired
//     interleaves direct (off) and facade-autopipeline (on) in blocks and
//     reports on/off-time, the lone caller's latency ratio.
//
//   - Memcached/...: the same rows without go-redis's: direct is a
//     gomemcache Client (directMemcache), facade-autopipeline batches Gets.
//
// Compare ns/op (wall time per Get, all goroutines together: its inverse is
// the throughput) and cpu-ns/op (the process's CPU per Get) across rows.
func BenchmarkAutoPipeline(b *testing.B) {
	b.Run("Redis", func(b *testing.B) {
		addrs := testserver.Addrs(testserver.Redis(b, 1))
		ctx := context.Background()
		plain := facadeWith(b, client.Options{Backend: client.Redis}, addrs)
		auto := facadeWith(b, client.Options{Backend: client.Redis, AutoPipeline: true}, addrs)
		direct := directRedis(addrs[0])
		b.Cleanup(func() { direct.Close() })
		ap, err := direct.AutoPipeline()
		if err != nil {
			b.Fatal(err)
		}
		// rueidis, auto-pipelining by default (its client-side cache off:
		// Do never reads it, and tracking would cost it invalidations).
		rue, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true,
			ConnWriteTimeout: facadeTimeout})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(rue.Close)
		keys := loadKeysOn(b, plain, addrs[0])
		const mask = singleKeys - 1
		rows := []struct {
			name string
			get  func(i int) error
		}{
			{"direct", func(i int) error { return checkValue(direct.Get(ctx, keys[i&mask]).Bytes()) }},
			{"facade", func(i int) error { return checkValue(plain.Get(ctx, keys[i&mask])) }},
			{"facade-autopipeline", func(i int) error { return checkValue(auto.Get(ctx, keys[i&mask])) }},
			{"goredis-autopipeline", func(i int) error { return checkValue(ap.Get(ctx, keys[i&mask]).Bytes()) }},
			{"rueidis", func(i int) error {
				return checkValue(rue.Do(ctx, rue.B().Get().Key(keys[i&mask]).Build()).AsBytes())
			}},
		}
		for _, r := range rows {
			b.Run("Get/256/"+r.name, concurrent(callers, r.get))
		}
		// A caller's context that can end (a request's): the auto-pipelined
		// wait is then a select on it and the batch (redisnode).
		cctx, cancel := context.WithCancel(ctx)
		b.Cleanup(cancel)
		b.Run("Get/256/facade-autopipeline-cancelctx", concurrent(callers, func(i int) error { return checkValue(auto.Get(cctx, keys[i&mask])) }))
		b.Run("Get/256/paired-facade-autopipeline-vs-rueidis", pairedConcurrent(callers, rows[4].get, rows[2].get))
		for _, r := range rows {
			b.Run("Get/serial/"+r.name, serial(r.get))
		}
		b.Run("Get/serial/paired", pairedSerial(rows[0].get, rows[2].get))
	})
	b.Run("Memcached", func(b *testing.B) {
		addrs := testserver.Addrs(testserver.Memcached(b, 1))
		ctx := context.Background()
		plain := facadeWith(b, client.Options{Backend: client.Memcached}, addrs)
		auto := facadeWith(b, client.Options{Backend: client.Memcached, AutoPipeline: true}, addrs)
		direct := directMemcache(addrs[0])
		b.Cleanup(func() { direct.Close() })
		keys := loadKeysOn(b, plain, addrs[0])
		const mask = singleKeys - 1
		rows := []struct {
			name string
			get  func(i int) error
		}{
			{"direct", func(i int) error {
				it, err := direct.Get(keys[i&mask])
				if err != nil {
					return err
				}
				return checkValue(it.Value, nil)
			}},
			{"facade", func(i int) error { return checkValue(plain.Get(ctx, keys[i&mask])) }},
			{"facade-autopipeline", func(i int) error { return checkValue(auto.Get(ctx, keys[i&mask])) }},
		}
		for _, r := range rows {
			b.Run("Get/256/"+r.name, concurrent(callers, r.get))
		}
		for _, r := range rows {
			b.Run("Get/serial/"+r.name, serial(r.get))
		}
		b.Run("Get/serial/paired", pairedSerial(rows[0].get, rows[2].get))
	})
}

// concurrent times op from n goroutines at once, each cycling through its
// own stretch of the key indexes.
func concurrent(n int, op func(i int) error) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism((n + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		var g atomic.Int64
		start := cpuTime(b)
		b.RunParallel(func(pb *testing.PB) {
			i := int(g.Add(1)) * 7919
			for pb.Next() {
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
		reportCPU(b, start)
	}
}

// loadKeysOn writes singleKeys keys of node addr through c and returns them.
func loadKeysOn(b *testing.B, c *client.Client, addr string) []string {
	keys := keysOn(c, addr, singleKeys)
	items := make(map[string][]byte, len(keys))
	for _, k := range keys {
		items[k] = benchValue
	}
	if err := c.SetMulti(context.Background(), items, 0); err != nil {
		b.Fatal(err)
	}
	return keys
}
