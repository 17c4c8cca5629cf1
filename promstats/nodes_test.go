package promstats_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/promstats"
	"github.com/shardcache/shardcache/ring"
)

// TestNodeCollector exports what real servers hold, as client.NodeStats
// reads it, on both backends: items, memory, the limit (absent for a Redis
// without maxmemory), evictions, the servers' hits and misses; a node the
// client holds down has only its poll errors, counted per poll.
func TestNodeCollector(t *testing.T) {
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		t.Run(backend.String(), func(t *testing.T) {
			var ss []*testserver.Server
			if backend == client.Redis {
				ss = append(testserver.RedisArgs(t, 1, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"), testserver.Redis(t, 2)...)
			} else {
				ss = append(testserver.MemcachedArgs(t, 1, "-m", "2"), testserver.Memcached(t, 2)...)
			}
			addrs := testserver.Addrs(ss)
			c := newClient(t, client.Options{Backend: backend, FailureThreshold: 1, ProbeInterval: time.Hour,
				Nodes: []ring.Node{{Name: "a", Addr: addrs[0]}, {Name: "b", Addr: addrs[1]}, {Name: "c", Addr: addrs[2]}}})
			ctx := context.Background()
			value := []byte(strings.Repeat("v", 4000))
			for i := range 3000 { // a (2 MB) evicts
				if err := c.Set(ctx, "k:"+strconv.Itoa(i), value, time.Hour); err != nil {
					t.Fatal(err)
				}
				c.Get(ctx, "k:"+strconv.Itoa(i))
				c.Get(ctx, "absent:"+strconv.Itoa(i))
			}
			ss[2].Stop()
			c.Get(ctx, keyOn(c, "c"))
			src := &recordingSource{c: c}
			nodes := promstats.NewNodeCollector(src, promstats.NodeOptions{Interval: time.Hour})
			defer nodes.Close()
			for src.polls() == 0 {
				time.Sleep(time.Millisecond) // the background's first poll, then ours: two
			}
			nodes.Poll(ctx)
			want := src.latest()

			for _, u := range want[:2] {
				name := `node="` + u.Node.Name + `"`
				for metric, v := range map[string]int64{
					promstats.NodeItems: u.Items, promstats.NodeEvictionsTotal: u.Evictions,
					promstats.NodeServerHitsTotal: u.Hits, promstats.NodeServerMisses: u.Misses,
				} {
					if got := series(t, nodes, metric)[name]; got != float64(v) {
						t.Errorf("%s{%s} = %v; NodeStats says %d", metric, name, got, v)
					}
				}
				if got := series(t, nodes, promstats.NodeMemoryBytes)[name]; got != float64(u.Bytes) {
					t.Errorf("%s{%s} = %v; NodeStats says %d", promstats.NodeMemoryBytes, name, got, u.Bytes)
				}
			}
			limits := series(t, nodes, promstats.NodeMemoryLimitBytes)
			if limits[`node="a"`] != 2<<20 || series(t, nodes, promstats.NodeEvictionsTotal)[`node="a"`] == 0 {
				t.Errorf("a: limit %v, evictions %v; want 2 MiB and some", limits[`node="a"`], series(t, nodes, promstats.NodeEvictionsTotal)[`node="a"`])
			}
			if _, ok := limits[`node="b"`]; ok == (backend == client.Redis) {
				t.Errorf("b's limit: %v; want none for a Redis without maxmemory, memcached's -m", limits)
			}
			if items := series(t, nodes, promstats.NodeItems); len(items) != 2 || series(t, nodes, promstats.NodePollErrorsTotal)[`node="c"`] != 2 {
				t.Errorf("c, held down: items %v, poll errors %v; want no reading, 2 errors (two polls)", items, series(t, nodes, promstats.NodePollErrorsTotal))
			}
			if errs := series(t, nodes, promstats.NodePollErrorsTotal); errs[`node="a"`] != 0 || len(errs) != 3 {
				t.Errorf("poll errors %v; want every node's, 0 for a", errs)
			}
			if n, err := testutil.GatherAndCount(pedantic(t, nodes)); err != nil || n == 0 {
				t.Errorf("a pedantic registry: %d metrics, %v", n, err)
			}
		})
	}
}

// recordingSource polls a client, and keeps what its latest poll read.
type recordingSource struct {
	c    *client.Client
	mu   sync.Mutex
	last []client.NodeUsage
	n    int // polls done
}

func (r *recordingSource) NodeStats(ctx context.Context) ([]client.NodeUsage, error) {
	u, err := r.c.NodeStats(ctx)
	r.mu.Lock()
	r.last = u
	r.n++
	r.mu.Unlock()
	return u, err
}

func (r *recordingSource) polls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *recordingSource) latest() []client.NodeUsage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// keyOn returns a key the client places on the node named name.
func keyOn(c *client.Client, name string) string {
	for i := 0; ; i++ {
		if k := "on:" + strconv.Itoa(i); c.Locate(k).Name == name {
			return k
		}
	}
}

func pedantic(t *testing.T, cs ...prometheus.Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs...)
	return reg
}

// blockingSource is a NodeSource whose NodeStats waits for release, and
// counts its calls.
type blockingSource struct {
	calls   atomic.Int64
	release chan struct{}
}

func (b *blockingSource) NodeStats(ctx context.Context) ([]client.NodeUsage, error) {
	b.calls.Add(1)
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return []client.NodeUsage{{Node: ring.Node{Name: "a", Addr: "h:1", Weight: 1}, Items: 7, MemoryLimit: 10, Bytes: 5}}, nil
}

// TestNodeCollectorNeverWaits: a scrape while the poll waits for a server
// that does not answer returns at once, with what the latest poll read;
// the poll goes on at its interval once the server answers; Close ends a
// poll in flight.
func TestNodeCollectorNeverWaits(t *testing.T) {
	src := &blockingSource{release: make(chan struct{})}
	nodes := promstats.NewNodeCollector(src, promstats.NodeOptions{Interval: time.Millisecond})
	for src.calls.Load() == 0 {
		time.Sleep(time.Millisecond) // the poll is under way, and waits
	}
	reg := pedantic(t, nodes)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("a scrape during the first poll: %d metrics, %v; want none yet, at once", n, err)
	}
	close(src.release)
	for src.calls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	if got := series(t, nodes, promstats.NodeItems)[`node="a"`]; got != 7 {
		t.Errorf("items %v, want 7", got)
	}
	nodes.Close()
	blocked := &blockingSource{release: make(chan struct{})}
	stuck := promstats.NewNodeCollector(blocked, promstats.NodeOptions{})
	var wg sync.WaitGroup
	wg.Go(stuck.Close) // returns: the poll in flight is cancelled
	wg.Wait()
}

// TestNodeCollectorClosedClient: once its client is closed, the collector
// exports nothing of its nodes.
func TestNodeCollectorClosedClient(t *testing.T) {
	s := testserver.Redis(t, 1)[0]
	c, err := client.New(client.Options{ReadTimeout: testserver.ClientTimeout, WriteTimeout: testserver.ClientTimeout, Nodes: []ring.Node{{Name: "a", Addr: s.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	nodes := promstats.NewNodeCollector(c, promstats.NodeOptions{Interval: time.Hour})
	defer nodes.Close()
	ctx := context.Background()
	nodes.Poll(ctx)
	if got := series(t, nodes, promstats.NodeItems); len(got) != 1 {
		t.Fatalf("items %v, want a's", got)
	}
	c.Close()
	nodes.Poll(ctx)
	if n, err := testutil.GatherAndCount(pedantic(t, nodes)); err != nil || n != 0 {
		t.Errorf("after the client's Close: %d metrics, %v; want none", n, err)
	}
}
