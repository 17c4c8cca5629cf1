package bench

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/maypok86/otter/v2"

	"github.com/shardcache/shardcache/internal/near"
)

// nearStore is what the near cache needs of a store, for
// BenchmarkNearCacheStore: a lookup, and a fill after a miss (for the near
// store a reservation and its fulfilment, for the libraries a set).
type nearStore struct {
	name string
	get  func(key string) ([]byte, bool)
	fill func(key string, v []byte)
}

// nearStores returns the candidate stores, each bounded to max entries and,
// where the library has it, to an age of an hour (the near cache's MaxAge).
func nearStores(max int) []nearStore {
	const age = time.Hour
	own := near.New(near.Config{MaxEntries: max, MaxAge: age})
	ot := otter.Must(&otter.Options[string, []byte]{MaximumSize: max, ExpiryCalculator: otter.ExpiryWriting[string, []byte](age)})
	gl, err := lru.New[string, []byte](max)
	if err != nil {
		panic(err)
	}
	ex := expirable.NewLRU[string, []byte](max, nil, age)
	return []nearStore{
		{"near", func(k string) ([]byte, bool) { return own.GetValue(k) },
			func(k string, v []byte) { own.Fulfill(k, own.Reserve(k), v, true, 0) }},
		{"otter", ot.GetIfPresent, func(k string, v []byte) { ot.Set(k, v) }},
		{"golang-lru", gl.Get, func(k string, v []byte) { gl.Add(k, v) }},
		{"golang-lru-expirable", ex.Get, func(k string, v []byte) { ex.Add(k, v) }},
	}
}

// BenchmarkNearCacheStore compares the near cache's store (internal/near)
// with otter v2 and hashicorp/golang-lru v2 (its plain LRU, and its
// expirable one, which has a MaxAge) under the hot-key workload of
// BenchmarkNearCache (Zipf over hotKeys keys), in the
// same run, without a server, from 256 goroutines and from one:
//
//   - hit: the store holds every key (capacity 2×hotKeys); every read hits.
//   - churn: it holds a tenth of them; a miss fills the key (near:
//     Reserve and Fulfill; the libraries: Set), evicting another.
//
// ns/op is per read, its fill included; near-hit/op the reads that hit.
func BenchmarkNearCacheStore(b *testing.B) {
	seq := zipfSequence(b)
	keys := make([]string, hotKeys)
	for i := range keys {
		keys[i] = "hot:" + strconv.Itoa(i)
	}
	const mask = hotSamples - 1
	for _, mode := range []struct {
		name string
		run  func(op func(i int) error) func(*testing.B)
	}{{"256", func(op func(int) error) func(*testing.B) { return concurrent(callers, op) }}, {"serial", serial}} {
		for _, w := range []struct {
			name string
			max  int
		}{{"hit", 2 * hotKeys}, {"churn", hotKeys / 10}} {
			for _, s := range nearStores(w.max) {
				b.Run(w.name+"/"+mode.name+"/"+s.name, func(b *testing.B) {
					for _, k := range keys {
						s.fill(k, benchValue)
					}
					var misses atomic.Int64
					b.ResetTimer()
					mode.run(func(i int) error {
						k := keys[seq[i&mask]]
						if _, ok := s.get(k); !ok {
							misses.Add(1)
							s.fill(k, benchValue)
						}
						return nil
					})(b)
					b.ReportMetric(1-float64(misses.Load())/float64(b.N), "near-hit/op")
				})
			}
		}
	}
}
