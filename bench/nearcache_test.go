package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
)

// The hot-key workload of BenchmarkNearCache: hotKeys keys read with a Zipf
// popularity (math/rand's Zipf: key k has probability ∝ (hotV+k)^-hotS), so
// that the most popular 1% of the keys takes half the reads.
const (
	hotKeys    = 10000
	hotS, hotV = 1.05, 3.0
	hotNodes   = 2
	// hotSamples key indexes, drawn once, are cycled through (a power of
	// two, cycled with a mask).
	hotSamples = 1 << 20
)

// nearRow is one client of BenchmarkNearCache, made when its row runs and
// closed after it, so that no other row pays for its background work
// (go-redis's client-side cache reads its idle connections every
// DrainInterval).
type nearRow struct {
	name   string
	serial bool // also a Get/serial row
	// facade makes a façade row's client; direct, the goredis-csc row's
	// clients (nil for façade rows).
	facade func(b *testing.B) *client.Client
	direct func(b *testing.B) func(i int) error
}

// BenchmarkNearCache is the throughput of hot-key Gets from parallelism
// goroutines per CPU over two real redis-servers, through the façade
// without a near cache and with one (Options.NearCache), in the same run:
//
//   - facade: no near cache; every Get is a round trip.
//   - facade-nearcache: NearCache with its defaults (10,000 entries per
//     node: the whole key set fits).
//   - facade-nearcache-10pct: NearCache with 500 entries per node, a tenth
//     of the keys in all: the hot ones stay, the tail goes to the servers.
//   - facade-nearcache-autopipeline: facade-nearcache with AutoPipeline
//     (Gets still go through the near cache; their misses go alone).
//   - goredis-csc: go-redis clients with go-redis's own client-side cache
//     (what the near cache was built on before it had a store of its own)
//     of the same size, MaxStaleness and DrainInterval, one per node, each
//     key sent to the node the façade places it on.
//
// Get/serial/ROW runs facade, facade-nearcache and goredis-csc from one
// goroutine: a lone caller's latency, and the CPU of a near hit without
// contention.
//
// Each façade row reports near-hit/op, the near cache's hit ratio over the
// timed run (NearCacheStats), beside ns/op (wall time per Get, its inverse the
// throughput) and cpu-ns/op (the benchmark process's CPU per Get). Every
// value is written before the run, so every Get hits a server or the near
// cache. Each row's client is made when the row starts, then reads every
// key once (a near cache starts the timed run warm), and is closed after it.
func BenchmarkNearCache(b *testing.B) {
	addrs := testserver.Addrs(testserver.Redis(b, hotNodes))
	ctx := context.Background()
	loader := facadeWith(b, client.Options{Backend: client.Redis}, addrs)
	keys := make([]string, hotKeys)
	items := make(map[string][]byte, hotKeys)
	for i := range keys {
		keys[i] = "hot:" + strconv.Itoa(i)
		items[keys[i]] = benchValue
	}
	if err := loader.SetMulti(ctx, items, 0); err != nil {
		b.Fatal(err)
	}
	seq := zipfSequence(b)
	const mask = hotSamples - 1
	facade := func(o client.Options) func(b *testing.B) *client.Client {
		return func(b *testing.B) *client.Client {
			o.Backend = client.Redis
			o.Nodes = nil
			return facadeWith(b, o, addrs)
		}
	}
	rows := []nearRow{
		{name: "facade", serial: true, facade: facade(client.Options{})},
		{name: "facade-nearcache", serial: true, facade: facade(client.Options{NearCache: &client.NearCache{}})},
		{name: "facade-nearcache-10pct", facade: facade(client.Options{NearCache: &client.NearCache{MaxEntries: hotKeys / 10 / hotNodes}})},
		{name: "facade-nearcache-autopipeline", facade: facade(client.Options{NearCache: &client.NearCache{}, AutoPipeline: true})},
		{name: "goredis-csc", serial: true, direct: func(b *testing.B) func(i int) error {
			// go-redis clients of their own with go-redis's client-side
			// cache, each key sent to the node the façade places it on.
			byAddr := map[string]*redis.Client{}
			for _, a := range addrs {
				opt := directRedisOptions(a) // and a cache
				opt.ClientSideCacheConfig = &redis.ClientSideCacheConfig{MaxEntries: client.DefaultNearCacheEntries,
					MaxStaleness: client.DefaultNearCacheMaxAge, DrainInterval: client.DefaultNearCacheDrainInterval}
				rdb := redis.NewClient(opt)
				b.Cleanup(func() { rdb.Close() })
				byAddr[a] = rdb
			}
			byKey := make([]*redis.Client, hotKeys)
			for i, k := range keys {
				byKey[i] = byAddr[loader.Locate(k).Addr]
			}
			return func(i int) error {
				k := seq[i&mask]
				return checkValue(byKey[k].Get(ctx, keys[k]).Bytes())
			}
		}},
	}
	for _, mode := range []struct {
		name string
		run  func(op func(i int) error) func(*testing.B)
	}{{"parallel", parallel}, {"serial", serial}} {
		for _, r := range rows {
			if mode.name == "serial" && !r.serial {
				continue
			}
			b.Run("Get/"+mode.name+"/"+r.name, func(b *testing.B) {
				if r.direct != nil {
					mode.run(r.direct(b))(b)
					return
				}
				c := r.facade(b)
				warmNear(b, c, keys)
				b.ResetTimer()
				var hits, misses int64
				for _, s := range c.NearCacheStats() {
					hits, misses = hits-s.Hits, misses-s.Misses
				}
				mode.run(func(i int) error { return checkValue(c.Get(ctx, keys[seq[i&mask]])) })(b)
				for _, s := range c.NearCacheStats() {
					hits, misses = hits+s.Hits, misses+s.Misses
				}
				ratio := 0.0
				if hits+misses > 0 {
					ratio = float64(hits) / float64(hits+misses)
				}
				b.ReportMetric(ratio, "near-hit/op")
			})
		}
	}
}

// BenchmarkNearCacheIdle is the background CPU of a client over two real
// redis-servers that does nothing: each op is 100ms of idleness after a
// Get to each node, and cpu-ns/op the process's CPU over it. go-redis's
// client-side cache reads each node's idle connections every DrainInterval;
// without a near cache nothing runs.
func BenchmarkNearCacheIdle(b *testing.B) {
	addrs := testserver.Addrs(testserver.Redis(b, hotNodes))
	for _, r := range []struct {
		name string
		near *client.NearCache
	}{
		{"facade", nil},
		{"facade-nearcache", &client.NearCache{}},
		{"facade-nearcache-drain5ms", &client.NearCache{DrainInterval: 5 * time.Millisecond}},
	} {
		b.Run(r.name, func(b *testing.B) {
			c := facadeWith(b, client.Options{Backend: client.Redis, NearCache: r.near}, addrs)
			for _, k := range keysPerNode(c, addrs) {
				if _, err := c.Get(context.Background(), k); err != nil && err != client.ErrCacheMiss {
					b.Fatal(err)
				}
			}
			start := cpuTime(b)
			for b.Loop() {
				time.Sleep(100 * time.Millisecond)
			}
			reportCPU(b, start)
		})
	}
}

// warmNear reads every key once through c, from 16 goroutines, so that a near
// cache that can hold them all starts the run full, as it is in a process
// that has run for a while.
func warmNear(b *testing.B, c *client.Client, keys []string) {
	var wg sync.WaitGroup
	const g = 16
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += g {
				if _, err := c.Get(context.Background(), keys[i]); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// keysPerNode returns a key of each node of addrs.
func keysPerNode(c *client.Client, addrs []string) []string {
	var ks []string
	for _, a := range addrs {
		ks = append(ks, keysOn(c, a, 1)...)
	}
	return ks
}

// zipfSequence draws hotSamples key indexes (seeded: the same every run)
// and checks the workload's premise on them: the most popular 1% of the
// keys takes 50% (±2%) of the reads, as it does exactly in the
// distribution (49.9% for s 1.05, v 3 over 10,000 keys).
func zipfSequence(tb testing.TB) []uint16 {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), hotS, hotV, hotKeys-1)
	seq := make([]uint16, hotSamples)
	counts := make([]int, hotKeys)
	for i := range seq {
		k := z.Uint64()
		seq[i] = uint16(k)
		counts[k]++
	}
	slices.SortFunc(counts, func(a, b int) int { return b - a })
	top := 0
	for _, n := range counts[:hotKeys/100] {
		top += n
	}
	var exact, all float64
	for k := range hotKeys {
		p := math.Pow(hotV+float64(k), -hotS)
		all += p
		if k < hotKeys/100 {
			exact += p
		}
	}
	share := float64(top) / hotSamples
	if math.Abs(share-0.5) > 0.02 || math.Abs(exact/all-0.5) > 0.02 {
		tb.Fatalf("the top 1%% of the keys takes %.1f%% of the reads drawn (%.1f%% of the distribution), not 50%%", 100*share, 100*exact/all)
	}
	return seq
}

// TestZipfPremise runs the hot-key workload's check alone, and shows its
// figures.
func TestZipfPremise(t *testing.T) {
	seq := zipfSequence(t)
	distinct := map[uint16]bool{}
	for _, k := range seq {
		distinct[k] = true
	}
	t.Log(fmt.Sprintf("%d samples over %d distinct keys of %d", len(seq), len(distinct), hotKeys))
}
