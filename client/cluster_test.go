package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// cluster is a set of cache servers a test runs against: in-process
// miniredis, or real redis-server or memcached processes.
type cluster struct {
	kind    string
	backend Backend
	addrs   []string
	stop    func(i int)                    // makes server i refuse connections
	advance func(d time.Duration)          // moves the servers' clocks (TTLs) forward
	raw     func(addr string) directReader // reads a server without the façade
	// servers are the real servers' processes, nil for miniredis.
	servers []*testserver.Server
	// autoPipeline: its clients set Options.AutoPipeline (kinds
	// "redis-autopipeline" and "memcached-autopipeline", real servers).
	autoPipeline bool
}

// directReader reads one server directly, bypassing placement.
type directReader interface {
	get(key string) ([]byte, error) // ErrCacheMiss on a miss
}

type rawRedis struct{ rdb *redis.Client }

func (r rawRedis) get(key string) ([]byte, error) {
	v, err := r.rdb.Get(context.Background(), key).Bytes()
	if err == redis.Nil {
		return nil, ErrCacheMiss
	}
	return v, err
}

type rawMemcache struct{ mc *memcache.Client }

func (r rawMemcache) get(key string) ([]byte, error) {
	it, err := r.mc.Get(key)
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil, ErrCacheMiss
	}
	if err != nil {
		return nil, err
	}
	if len(it.Value) == 0 && node.IsTombstoneFlags(it.Flags) { // a tombstone, during a migration
		return nil, ErrCacheMiss
	}
	return it.Value, nil
}

// clusterKinds names the server kinds every integration test runs against:
// "memcached-classic" is memcached without the meta commands, as before 1.6
// (testserver.MemcachedClassic).
var clusterKinds = []string{"miniredis", "redis-server", "memcached", "memcached-classic"}

// autoPipelined names the tests that run on "-autopipeline" clusters too:
// the dual-ring paths with Options.AutoPipeline.
var autoPipelined = map[string]bool{
	"TestReshardKeepsEveryKey":   true,
	"TestWindowWritesAndDeletes": true,
	"TestNilContext":             true,
}

// gomemcacheClient is memcache.New(addrs...) with a 5 s timeout:
// gomemcache's 500 ms default was reached on a busy machine, where a read
// that timed out made a key the server held read as held nowhere
// (cluster.holders, TestKeysLandOnLocatedNode).
func gomemcacheClient(addrs ...string) *memcache.Client {
	mc := memcache.New(addrs...)
	mc.Timeout = 5 * time.Second
	return mc
}

// newCluster starts n servers of the kind.
func newCluster(t testing.TB, kind string, n int) *cluster {
	t.Helper()
	c := &cluster{kind: kind}
	switch kind {
	case "miniredis":
		ms := make([]*miniredis.Miniredis, n)
		for i := range ms {
			ms[i] = miniredis.RunT(t)
			c.addrs = append(c.addrs, ms[i].Addr())
		}
		c.backend = Redis
		c.stop = func(i int) { ms[i].Close() }
		c.advance = func(d time.Duration) {
			for _, m := range ms {
				m.FastForward(d)
			}
		}
	case "redis-server", "redis-autopipeline", "memcached", "memcached-autopipeline", "memcached-classic":
		var ss []*testserver.Server
		c.autoPipeline = strings.HasSuffix(kind, "-autopipeline")
		switch {
		case strings.HasPrefix(kind, "redis"):
			ss, c.backend = testserver.Redis(t, n), Redis
		case kind == "memcached-classic":
			ss, c.backend = testserver.MemcachedClassic(t, n), Memcached
		default:
			ss, c.backend = testserver.Memcached(t, n), Memcached
		}
		c.addrs, c.servers = testserver.Addrs(ss), ss
		c.stop = func(i int) { ss[i].Stop() }
		c.advance = func(d time.Duration) { time.Sleep(d) }
	default:
		t.Fatalf("unknown cluster kind %q", kind)
	}
	readers := map[string]directReader{} // one client per server, made on first use
	var mu sync.Mutex
	c.raw = func(addr string) directReader {
		mu.Lock()
		defer mu.Unlock()
		if r, ok := readers[addr]; ok {
			return r
		}
		var r directReader
		if c.backend == Memcached {
			mc := gomemcacheClient(addr)
			t.Cleanup(func() { mc.Close() })
			r = rawMemcache{mc}
		} else {
			// One dial, no retries: a stopped server is read at once.
			rdb := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			r = rawRedis{rdb}
		}
		readers[addr] = r
		return r
	}
	return c
}

// nodes returns ring nodes named n0, n1, ... for the cluster's servers.
func (c *cluster) nodes(idx ...int) []ring.Node {
	if len(idx) == 0 {
		for i := range c.addrs {
			idx = append(idx, i)
		}
	}
	ns := make([]ring.Node, len(idx))
	for j, i := range idx {
		ns[j] = ring.Node{Name: fmt.Sprintf("n%d", i), Addr: c.addrs[i]}
	}
	return ns
}

// client opens a façade over the given nodes (all by default); the test
// closes it.
func (c *cluster) client(t testing.TB, opts Options) *Client {
	t.Helper()
	opts.Backend = c.backend
	opts.AutoPipeline = opts.AutoPipeline || c.autoPipeline
	// Generous network timeouts: -race on a loaded 2-core machine can stall
	// an in-process miniredis past the 500ms default.
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = 5 * time.Second
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = 5 * time.Second
	}
	if opts.Nodes == nil && opts.Placement == nil && opts.Topology == nil {
		opts.Nodes = c.nodes()
	}
	cl, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// holder returns the addresses of the servers that hold key, read directly.
func (c *cluster) holders(t testing.TB, key string) []string {
	t.Helper()
	var on []string
	for _, a := range c.addrs {
		_, err := c.raw(a).get(key)
		switch {
		case err == nil:
			on = append(on, a)
		case err != ErrCacheMiss:
			// a stopped server holds nothing reachable
		}
	}
	return on
}

// forEachCluster runs fn as a subtest against n servers of every kind.
func forEachCluster(t *testing.T, n int, fn func(t *testing.T, cl *cluster)) {
	kinds := clusterKinds
	if autoPipelined[t.Name()] {
		kinds = append(kinds[:len(kinds):len(kinds)], "redis-autopipeline", "memcached-autopipeline")
	}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			fn(t, newCluster(t, kind, n))
		})
	}
}

// paused stops s (SIGSTOP) until the returned resume is called, or the
// test ends; resume may be called more than once.
func paused(t testing.TB, s *testserver.Server) (resume func()) {
	t.Helper()
	s.Pause()
	waitFor(t, "the server stopped", s.Paused)
	var once sync.Once
	resume = func() { once.Do(s.Resume) }
	t.Cleanup(resume)
	return resume
}

// waitCancelled receives the error of a call whose context was cancelled,
// which must come within faultWait (the node's own timeouts are longer) and
// be context.Canceled.
func waitCancelled(t testing.TB, what string, errc <-chan error) {
	t.Helper()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: %v, want context.Canceled", what, err)
		}
	case <-time.After(faultWait):
		t.Fatalf("%s still waits after its context was cancelled", what)
	}
}
