package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
)

// BenchmarkNearCacheHit is the cost of a near hit, every key cached, side by
// side with rueidis's client-side cache on the same redis-server:
//
//   - Get/256/facade-nearcache: the façade's Get with Options.NearCache
//     (its defaults), from 256 goroutines; .../rueidis-docache: rueidis's
//     DoCache of a GET (its cache on by default, 128 MiB per connection),
//     its value read with AsBytes (shared, as the façade's); .../paired:
//     the two interleaved in blocks (paired_test.go): cpu-ratio and
//     wall-ratio are the façade over rueidis.
//   - Get/serial/...: the same from one goroutine.
//
// Both read the same singleKeys keys, every one read once before the timed
// run, so that every read is a hit; each row reports near-hit/op (the
// façade's share of reads answered from memory) or cache-hit/op
// (rueidis's).
func BenchmarkNearCacheHit(b *testing.B) {
	addrs := testserver.Addrs(testserver.Redis(b, 1))
	ctx := context.Background()
	near := facadeWith(b, client.Options{Backend: client.Redis, NearCache: &client.NearCache{}}, addrs)
	keys := loadKeysOn(b, near, addrs[0])
	warmNear(b, near, keys)
	rue, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, ConnWriteTimeout: facadeTimeout})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rue.Close)
	const ttl = time.Hour
	docache := func(k string) rueidis.RedisResult { return rue.DoCache(ctx, rue.B().Get().Key(k).Cache(), ttl) }
	for _, k := range keys {
		if err := checkValue(docache(k).AsBytes()); err != nil {
			b.Fatal(err)
		}
	}
	const mask = singleKeys - 1
	facadeGet := func(i int) error { return checkValue(near.Get(ctx, keys[i&mask])) }
	var rueMisses atomic.Int64
	rueGet := func(i int) error {
		r := docache(keys[i&mask])
		if !r.IsCacheHit() {
			rueMisses.Add(1)
		}
		return checkValue(r.AsBytes())
	}
	rueRatio := func(run func(*testing.B)) func(*testing.B) {
		return func(b *testing.B) {
			misses := rueMisses.Load()
			run(b)
			b.ReportMetric(1-float64(rueMisses.Load()-misses)/float64(b.N), "cache-hit/op")
		}
	}
	nearRatio := func(b *testing.B, run func(*testing.B)) {
		var hits, misses int64
		for _, s := range near.NearCacheStats() {
			hits, misses = hits-s.Hits, misses-s.Misses
		}
		run(b)
		for _, s := range near.NearCacheStats() {
			hits, misses = hits+s.Hits, misses+s.Misses
		}
		b.ReportMetric(float64(hits)/float64(max(hits+misses, 1)), "near-hit/op")
	}
	for _, mode := range []struct {
		name string
		run  func(op func(i int) error) func(*testing.B)
	}{{"256", func(op func(int) error) func(*testing.B) { return concurrent(callers, op) }}, {"serial", serial}} {
		b.Run("Get/"+mode.name+"/facade-nearcache", func(b *testing.B) { nearRatio(b, mode.run(facadeGet)) })
		b.Run("Get/"+mode.name+"/rueidis-docache", rueRatio(mode.run(rueGet)))
	}
	b.Run("Get/256/paired", func(b *testing.B) { nearRatio(b, pairedConcurrent(callers, rueGet, facadeGet)) })
	b.Run("Get/serial/paired", func(b *testing.B) { nearRatio(b, pairedSerial(rueGet, facadeGet)) })
}

// BenchmarkNearCacheGetMulti is the throughput of a GetMulti of multiKeys
// keys over benchNodes redis-servers (the fleet of BenchmarkRedis's
// GetMulti100 rows), from parallelism goroutines per CPU and from one: through
// the façade without a near cache (facade: one MGET per node), with every
// key held near (facade-nearcache, without MaxAge: no round trip), and, for reference,
// rueidis's DoMultiCache of the same keys' GETs on the first server alone
// (every key held in its cache), in the same run. .../paired interleaves
// facade (the baseline) and facade-nearcache: cpu-ratio and wall-ratio are
// the near cache's over the round trips'.
func BenchmarkNearCacheGetMulti(b *testing.B) {
	addrs := testserver.Addrs(testserver.Redis(b, benchNodes))
	ctx := context.Background()
	plain := facadeWith(b, client.Options{Backend: client.Redis}, addrs)
	// No MaxAge: a GetMulti fills no copy, and the rows outlast the default's
	// 10 s, after which every key would go to the nodes again.
	near := facadeWith(b, client.Options{Backend: client.Redis, NearCache: &client.NearCache{MaxAge: -1}}, addrs)
	sets := multiKeySets()
	items := map[string][]byte{}
	for _, set := range sets {
		for _, k := range set {
			items[k] = benchValue
		}
	}
	if err := plain.SetMulti(ctx, items, 0); err != nil {
		b.Fatal(err)
	}
	var all []string
	for _, set := range sets {
		all = append(all, set...)
	}
	getMulti := func(c *client.Client) func(i int) error {
		return func(i int) error {
			got, err := c.GetMulti(ctx, sets[i%multiBatches])
			if err != nil {
				return err
			}
			return checkHits(len(got))
		}
	}
	rows := []struct {
		name string
		op   func(i int) error
	}{
		{"facade", getMulti(plain)},
		{"facade-nearcache", getMulti(near)},
	}
	rue, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs[:1], ConnWriteTimeout: facadeTimeout})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rue.Close)
	rueSets := make([][]rueidis.CacheableTTL, len(sets))
	for i, set := range sets {
		for _, k := range set {
			rueSets[i] = append(rueSets[i], rueidis.CT(rue.B().Get().Key(k).Cache().Pin(), time.Hour)) // pinned: used again
		}
	}
	for k := range items { // every key on the first server too, for rueidis alone
		if err := rue.Do(ctx, rue.B().Set().Key(k).Value(string(benchValue)).Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	rueMulti := func(i int) error {
		hits := 0
		for _, r := range rue.DoMultiCache(ctx, rueSets[i%multiBatches]...) {
			if err := checkValue(r.AsBytes()); err != nil {
				return err
			}
			hits++
		}
		return checkHits(hits)
	}
	for i := range multiBatches {
		if err := rueMulti(i); err != nil {
			b.Fatal(err)
		}
	}
	warmNear(b, near, all) // after rueidis's writes, whose invalidations would drop the copies
	rows = append(rows, struct {
		name string
		op   func(i int) error
	}{"rueidis-domulticache", rueMulti})
	for _, r := range rows {
		b.Run("GetMulti/parallel/"+r.name, parallel(r.op))
	}
	b.Run("GetMulti/parallel/paired", pairedParallel(rows[0].op, rows[1].op))
	for _, r := range rows {
		b.Run("GetMulti/serial/"+r.name, serial(r.op))
	}
	b.Run("GetMulti/serial/paired", pairedSerial(rows[0].op, rows[1].op))
}
