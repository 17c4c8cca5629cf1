package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// The sweep benchmarks time client.Sweep on real servers, two old nodes to
// three, with sweepKeys keys on the old nodes: BenchmarkSweep/BACKEND/RATE
// reports keys listed per second per old node, at the default rate limit
// and without one. BenchmarkSweepGets/BACKEND/ROW times concurrent Gets on
// the old nodes while a sweep runs and without one, and reports their p50
// and p99 latency, side by side.

const (
	sweepKeys    = 20000 // on the two old nodes
	sweepGetters = 4     // goroutines reading during the sweep
)

// sweepFleet starts three servers and writes sweepKeys keys on the first
// two; reset deletes what a sweep copied to the third.
type sweepFleet struct {
	backend client.Backend
	nodes   []ring.Node // the three; the old placement is the first two
	keys    []string
	reset   func(tb testing.TB)
}

func newSweepFleet(b *testing.B, backend client.Backend) *sweepFleet {
	var servers []*testserver.Server
	if backend == client.Redis {
		servers = testserver.Redis(b, 3)
	} else {
		servers = testserver.Memcached(b, 3)
	}
	addrs := testserver.Addrs(servers)
	f := &sweepFleet{backend: backend}
	for i, a := range addrs {
		f.nodes = append(f.nodes, ring.Node{Name: fmt.Sprintf("cache-%d", i), Addr: a})
	}
	c := f.client(b, nil)
	for i := range sweepKeys {
		f.keys = append(f.keys, fmt.Sprintf("sweep:%d", i))
	}
	for chunk := range slices.Chunk(f.keys, 1000) {
		items := make(map[string][]byte, len(chunk))
		for _, k := range chunk {
			items[k] = benchValue
		}
		if err := c.SetMulti(context.Background(), items, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	third := addrs[2]
	if backend == client.Redis {
		rdb := redis.NewClient(&redis.Options{Addr: third})
		b.Cleanup(func() { rdb.Close() })
		f.reset = func(tb testing.TB) {
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				tb.Fatal(err)
			}
		}
	} else {
		mc := memcache.New(third)
		f.reset = func(tb testing.TB) {
			if err := mc.FlushAll(); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return f
}

// client returns a client of the two old nodes, or when to is set in a
// migration from them to the three.
func (f *sweepFleet) client(tb testing.TB, to []ring.Node) *client.Client {
	// Long network timeouts: a benchmark on a loaded machine must measure a
	// slow Get, not fail on it (the default is 500ms).
	opts := client.Options{Backend: f.backend, Nodes: f.nodes[:2], ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	if to != nil {
		opts.Nodes = to
		opts.MigrateFrom = &client.MigrateFrom{Nodes: f.nodes[:2], Start: time.Now(), Window: time.Hour}
	}
	c, err := client.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// sweep runs one sweep from the two old nodes to the three at rate.
func (f *sweepFleet) sweep(b *testing.B, rate int) client.SweepStatus {
	c := f.client(b, f.nodes)
	defer c.Close()
	s, err := c.Sweep(context.Background(), client.SweepOptions{Rate: rate})
	if err != nil || s.Copied == 0 {
		b.Fatalf("sweep: %+v, %v", s, err)
	}
	return s
}

var sweepRates = []struct {
	name string
	rate int
}{{"rate=default", 0}, {"rate=unlimited", -1}}

func BenchmarkSweep(b *testing.B) {
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		b.Run(backend.String(), func(b *testing.B) {
			f := newSweepFleet(b, backend)
			for _, r := range sweepRates {
				b.Run(r.name, func(b *testing.B) {
					var listed int64
					var elapsed time.Duration
					cpu := cpuTime(b)
					for b.Loop() {
						b.StopTimer()
						f.reset(b)
						b.StartTimer()
						start := time.Now()
						s := f.sweep(b, r.rate)
						elapsed += time.Since(start)
						listed += s.Scanned
					}
					b.ReportMetric(float64(listed)/elapsed.Seconds()/2, "keys/s/node")
					b.ReportMetric(float64(cpuTime(b)-cpu)/float64(listed), "cpu-ns/key")
				})
			}
		})
	}
}

func BenchmarkSweepGets(b *testing.B) {
	rows := append([]struct {
		name string
		rate int
	}{{"no-sweep", 0}}, sweepRates...)
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		b.Run(backend.String(), func(b *testing.B) {
			f := newSweepFleet(b, backend)
			reader := f.client(b, nil) // an application process on the old nodes
			defer reader.Close()
			for _, row := range rows {
				b.Run(row.name, func(b *testing.B) {
					var lat []time.Duration
					for b.Loop() {
						b.StopTimer()
						f.reset(b)
						b.StartTimer()
						lat = append(lat, f.getsDuring(b, reader, row.name != "no-sweep", row.rate)...)
					}
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
					b.ReportMetric(float64(len(lat))/float64(b.N), "gets/op")
				})
			}
		})
	}
}

// getsDuring runs Gets from sweepGetters goroutines while a sweep runs (or
// for 4000 Gets each without one) and returns their latencies.
func (f *sweepFleet) getsDuring(b *testing.B, c *client.Client, withSweep bool, rate int) []time.Duration {
	done := make(chan struct{})
	if withSweep {
		go func() {
			defer close(done)
			f.sweep(b, rate)
		}()
	}
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	for g := range sweepGetters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			for i := g * 7919; withSweep && !closed(done) || !withSweep && len(lat) < 4000; i++ {
				start := time.Now()
				if _, err := c.Get(context.Background(), f.keys[i%len(f.keys)]); err != nil {
					b.Error(err)
					return
				}
				lat = append(lat, time.Since(start))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
