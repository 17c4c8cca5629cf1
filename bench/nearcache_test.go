package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

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
//   - goredis-csc: the floor, go-redis clients with go-redis's own
//     client-side cache of the same size and MaxStaleness, one per node,
//     each key sent to the node the façade places it on.
//
// Each row reports near-hit/op, the near cache's hit ratio over the run
// (NearCacheStats), beside ns/op (wall time per Get, its inverse the
// throughput) and cpu-ns/op (the benchmark process's CPU per Get). Every
// value is written before the run, so every Get hits a server or the near
// cache.
func BenchmarkNearCache(b *testing.B) {
	addrs := testserver.Addrs(testserver.Redis(b, hotNodes))
	ctx := context.Background()
	plain := facadeWith(b, client.Options{Backend: client.Redis}, addrs)
	near := facadeWith(b, client.Options{Backend: client.Redis, NearCache: &client.NearCache{}}, addrs)
	small := facadeWith(b, client.Options{Backend: client.Redis, NearCache: &client.NearCache{MaxEntries: hotKeys / 10 / hotNodes}}, addrs)
	auto := facadeWith(b, client.Options{Backend: client.Redis, NearCache: &client.NearCache{}, AutoPipeline: true}, addrs)

	keys := make([]string, hotKeys)
	items := make(map[string][]byte, hotKeys)
	for i := range keys {
		keys[i] = "hot:" + strconv.Itoa(i)
		items[keys[i]] = benchValue
	}
	if err := plain.SetMulti(ctx, items, 0); err != nil {
		b.Fatal(err)
	}
	seq := zipfSequence(b)
	const mask = hotSamples - 1

	// The floor: go-redis clients of their own with go-redis's client-side
	// cache (its defaults, the same size), each key sent to the node the
	// façade places it on.
	direct := map[string]*redis.Client{}
	for _, a := range addrs {
		rdb := directRedis(a)
		_ = rdb.Close()
		opt := rdb.Options()
		opt.ClientSideCacheConfig = &redis.ClientSideCacheConfig{MaxEntries: client.DefaultNearCacheEntries, MaxStaleness: client.DefaultNearCacheMaxAge}
		direct[a] = redis.NewClient(opt)
		b.Cleanup(func() { direct[a].Close() })
	}
	byKey := make([]*redis.Client, hotKeys)
	for i, k := range keys {
		byKey[i] = direct[plain.Locate(k).Addr]
	}
	rows := []struct {
		name string
		c    *client.Client
		get  func(i int) error
	}{
		{"facade", plain, nil},
		{"facade-nearcache", near, nil},
		{"facade-nearcache-10pct", small, nil},
		{"facade-nearcache-autopipeline", auto, nil},
		{"goredis-csc", nil, func(i int) error {
			k := seq[i&mask]
			return checkValue(byKey[k].Get(ctx, keys[k]).Bytes())
		}},
	}
	for _, r := range rows {
		b.Run("Get/parallel/"+r.name, func(b *testing.B) {
			if r.c == nil {
				parallel(r.get)(b)
				return
			}
			before := nearTotals(r.c)
			parallel(func(i int) error { return checkValue(r.c.Get(ctx, keys[seq[i&mask]])) })(b)
			after := nearTotals(r.c)
			hits, misses := after.Hits-before.Hits, after.Misses-before.Misses
			ratio := 0.0
			if hits+misses > 0 {
				ratio = float64(hits) / float64(hits+misses)
			}
			b.ReportMetric(ratio, "near-hit/op")
		})
	}
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

// nearTotals adds up c's near cache statistics over its nodes.
func nearTotals(c *client.Client) client.NearCacheStats {
	var t client.NearCacheStats
	for _, s := range c.NearCacheStats() {
		t.Hits += s.Hits
		t.Misses += s.Misses
		t.Entries += s.Entries
	}
	return t
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
