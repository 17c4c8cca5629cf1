package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/lease"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/internal/testserver/faultproxy"
	"github.com/shardcache/shardcache/ring"
)

// The client's tests under network faults a toxiproxy injects
// (faultproxy): moved from package client (fault_test.go,
// gutter_shared_test.go, join_test.go) so that the core module does not
// require toxiproxy. They reach the client through its exported API only;
// the helpers below are the client tests' own, over that API.

// faultTimeout is the network timeout of the fault tests: what a call to a
// hung node costs until it is marked down. Long enough that a healthy node
// never reaches it on a busy machine under -race (make test-busy), with
// the fault tests' clusters running side by side. (client's fault_test.go
// has the same.)
const faultTimeout = 2 * time.Second

// faultProbe is the probe interval of the fault tests.
const faultProbe = 50 * time.Millisecond

// faultWait is a bound on waiting for the client to notice something: far
// above what any of it takes, so that only a real failure reaches it.
const faultWait = 30 * time.Second

// faultCluster is a client of a kind over nodes, with the fault tests'
// timeouts and probe interval.
type faultCluster struct {
	c *client.Client
}

func newFaultCluster(t *testing.T, kind string, opts client.Options) *faultCluster {
	t.Helper()
	if kind == "redis-server" {
		opts.Backend = client.Redis
	} else {
		opts.Backend = client.Memcached
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = faultTimeout, faultTimeout, faultTimeout
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = faultProbe
	}
	c, err := client.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &faultCluster{c: c}
}

// healthOf returns the health of the node at addr.
func healthOf(t *testing.T, c *client.Client, addr string) client.NodeHealth {
	t.Helper()
	for _, h := range c.Health() {
		if h.Node.Addr == addr {
			return h
		}
	}
	t.Fatalf("no health for %s in %v", addr, c.Health())
	return client.NodeHealth{}
}

// waitHealth polls until the node at addr is down (or up), and returns how
// long that took.
func waitHealth(t *testing.T, c *client.Client, addr string, down bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !time.Now().After(start.Add(faultWait)) {
		if healthOf(t, c, addr).Down == down {
			return time.Since(start)
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("node %s: Down is not %v after %v: %+v", addr, down, faultWait, healthOf(t, c, addr))
	return 0
}

// checkDown fails unless err is a *NodeError for addr caused by ErrNodeDown.
func checkDown(t *testing.T, what string, err error, addr string) {
	t.Helper()
	var ne *client.NodeError
	if !errors.Is(err, client.ErrNodeDown) || !errors.As(err, &ne) || ne.Node.Addr != addr {
		t.Fatalf("%s on a down node = %v; want a *NodeError for %s with ErrNodeDown", what, err, addr)
	}
}

// mustGet fails the test unless key holds want.
func mustGet(t *testing.T, c *client.Client, key, want string) {
	t.Helper()
	v, err := c.Get(t.Context(), key)
	if err != nil || string(v) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, v, err, want)
	}
}

// mustMiss fails the test unless key is absent.
func mustMiss(t *testing.T, c *client.Client, key string) {
	t.Helper()
	if v, err := c.Get(t.Context(), key); !errors.Is(err, client.ErrCacheMiss) {
		t.Fatalf("Get(%q) = %q, %v; want ErrCacheMiss", key, v, err)
	}
}

// keysOn returns n keys, prefixed with prefix, that the client places on the
// node at addr.
func keysOn(c *client.Client, addr, prefix string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprintf("%s%d", prefix, i); c.Locate(k).Addr == addr {
			keys = append(keys, k)
		}
	}
	return keys
}

func victimKey(c *client.Client, addr string) string { return keysOn(c, addr, "victim:", 1)[0] }

// waitFor polls cond until it holds, for at most 20 s (a bound, not a
// timing): the goroutines it waits for are blocked on channels meanwhile.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 20000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// loader is a GetOrLoad loader that counts its calls and returns value.
type loader struct {
	calls atomic.Int64
	value []byte
}

func openLoader(value string, err error) *loader {
	if err != nil {
		panic("openLoader: this package's loaders do not fail")
	}
	return &loader{value: []byte(value)}
}

func (l *loader) load(context.Context) ([]byte, error) {
	l.calls.Add(1)
	return l.value, nil
}

// TestNetworkFaults puts a node behind a fault-injection proxy: latency
// under the timeout is not a failure; latency over it, a reset connection
// and a black hole each mark the node down, and it is up again when the
// fault clears.
func TestNetworkFaults(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var servers []*testserver.Server
			if kind == "redis-server" {
				servers = testserver.Redis(t, 2)
			} else {
				servers = testserver.Memcached(t, 2)
			}
			proxy := faultproxy.New(t, servers[1].Addr)
			nodes := []ring.Node{{Name: "direct", Addr: servers[0].Addr}, {Name: "proxied", Addr: proxy.Addr}}
			fc := newFaultCluster(t, kind, client.Options{Nodes: nodes})
			c, ctx := fc.c, context.Background()
			far, near := victimKey(c, proxy.Addr), victimKey(c, servers[0].Addr)
			for _, k := range []string{far, near} {
				if err := c.Set(ctx, k, []byte(k), 0); err != nil {
					t.Fatal(err)
				}
			}

			proxy.Latency(faultTimeout / 10)
			for range 2 * client.DefaultFailureThreshold {
				mustGet(t, c, far, far)
			}
			if h := healthOf(t, c, proxy.Addr); h.Down || h.Failures != 0 {
				t.Fatalf("latency under the timeout counted against the node: %+v", h)
			}
			proxy.Clear()

			for _, fault := range []struct {
				name   string
				inject func()
			}{
				{"latency over the timeout", func() { proxy.Latency(3 * faultTimeout) }},
				{"reset mid-reply", proxy.ResetPeer},
				{"black hole", proxy.BlackHole},
			} {
				fault.inject()
				before := healthOf(t, c, proxy.Addr)
				var err error
				start := time.Now()
				for i := 0; i < 10*client.DefaultFailureThreshold && !errors.Is(err, client.ErrNodeDown); i++ {
					_, err = c.Get(ctx, far)
					var ne *client.NodeError
					if !errors.As(err, &ne) || ne.Node.Addr != proxy.Addr {
						t.Fatalf("%s: Get = %v; want a *NodeError for the proxied node", fault.name, err)
					}
				}
				checkDown(t, fault.name+": Get", err, proxy.Addr)
				detect := time.Since(start)
				after := healthOf(t, c, proxy.Addr)
				if after.Downs != before.Downs+1 || after.Failures-before.Failures < client.DefaultFailureThreshold {
					t.Fatalf("%s: health before %+v, after %+v; want one more down after %d failures", fault.name, before, after, client.DefaultFailureThreshold)
				}
				mustGet(t, c, near, near) // the other node is untouched
				proxy.Clear()
				recover := waitHealth(t, c, proxy.Addr, false)
				mustGet(t, c, far, far)
				t.Logf("%s %s: down after %v, up %v after the fault cleared", kind, fault.name, detect, recover)
			}
		})
	}
}

// TestGutterShared: two processes of a fleet, one of which (a) cannot
// reach node "a" and writes its key through the gutter, then is closed
// without ever reaching "a" again (its own hints gone with it); the other
// (b) reaches "a" all along, which still holds the value the write
// replaced. b must stop reading that value: the gutter's log, applied by
// every process at its ticks. Without the log it reads it until the
// key's TTL.
func TestGutterShared(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			var ss []*testserver.Server
			backend := client.Redis
			if kind == "redis-server" {
				ss = testserver.Redis(t, 3)
			} else {
				ss, backend = testserver.Memcached(t, 3), client.Memcached
			}
			proxy := faultproxy.New(t, ss[0].Addr)
			opts := func(addrA string) client.Options {
				return client.Options{Backend: backend, Nodes: []ring.Node{{Name: "a", Addr: addrA}, {Name: "b", Addr: ss[1].Addr}},
					Gutter: []ring.Node{{Name: "g", Addr: ss[2].Addr}}, GutterTTL: time.Minute,
					FailureThreshold: 1, ProbeInterval: 20 * time.Millisecond,
					ReadTimeout: faultTimeout, WriteTimeout: faultTimeout}
			}
			b, err := client.New(opts(ss[0].Addr))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			a, err := client.New(opts(proxy.Addr))
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			k := keysOn(b, ss[0].Addr, "k", 1)[0]
			if err := b.Set(ctx, k, []byte("old"), time.Hour); err != nil {
				t.Fatal(err)
			}

			proxy.BlackHole()
			a.Get(ctx, k) // fails: a holds "a" down
			waitFor(t, "a holding the node down", func() bool { return a.Health()[0].Down })
			if err := a.Set(ctx, k, []byte("new"), time.Hour); err != nil {
				t.Fatalf("Set with the node down: %v; want it written to the gutter", err)
			}
			a.Close() // its own hints die with it
			waitFor(t, "b to stop reading the replaced value", func() bool {
				v, err := b.Get(ctx, k)
				return err == client.ErrCacheMiss || (err == nil && string(v) != "old")
			})
			mustMiss(t, b, k)

		})
	}
}

// TestGetOrLoadJoinAfterDelete: a GetOrLoad that joins a load already under
// way never takes that load's read of the cache when the read began before
// the call did. Here the load waits on another process's lease; that
// process stores a large value, the load's read finds it (the proxy sends
// it back slowly), another client deletes the key, and a second caller,
// whose call begins after the delete was acknowledged, misses and joins the
// load while its answer is still on its way: the second caller must not be
// answered with the deleted value.
func TestGetOrLoadJoinAfterDelete(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			var servers []*testserver.Server
			backend := client.Redis
			if kind == "redis-server" {
				servers = testserver.Redis(t, 1)
			} else {
				servers, backend = testserver.Memcached(t, 1), client.Memcached
			}
			proxy := faultproxy.New(t, servers[0].Addr)
			opts := client.Options{Backend: backend, Lease: time.Minute, ReadTimeout: time.Minute}
			opts.Nodes = []ring.Node{{Name: "n", Addr: proxy.Addr}}
			slow, err := client.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer slow.Close()
			opts.Nodes = []ring.Node{{Name: "n", Addr: servers[0].Addr}}
			direct, err := client.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			ctx := t.Context()
			lkey := lease.Config{MaxKeyLength: 250}.Key("k") // the lease key of "k", as the client names it
			if err := direct.Set(ctx, lkey, []byte("another process"), time.Minute); err != nil {
				t.Fatal(err)
			}
			l := openLoader("loaded", nil)
			first := make(chan []byte, 1)
			go func() {
				v, err := slow.GetOrLoad(ctx, "k", time.Minute, l.load)
				if err != nil {
					t.Error(err)
				}
				first <- v
			}()
			waitFor(t, "the first caller to wait on the lease", func() bool { return slow.LoadStats().LeaseWaits == 1 })

			proxy.Bandwidth(128) // 512 KiB takes 4 s to come back
			old := bytes.Repeat([]byte("o"), 512<<10)
			read := valueRead(t, kind, servers[0].Addr, "k", len(old))
			if err := direct.Set(ctx, "k", old, time.Minute); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the load to read the value", read)
			for _, k := range []string{"k", lkey} {
				if err := direct.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			v, err := slow.GetOrLoad(ctx, "k", time.Minute, l.load)
			if err != nil {
				t.Fatal(err)
			}
			if string(v) != "loaded" {
				t.Fatalf("a GetOrLoad begun after the delete = %.10q (%d bytes); want the loader's value", v, len(v))
			}
			// The first caller's load read the value before the delete: it
			// is a right answer for it.
			if v := <-first; !bytes.Equal(v, old) {
				t.Fatalf("the first caller = %.10q (%d bytes); want the value its load read", v, len(v))
			}
			if n := l.calls.Load(); n != 1 {
				t.Fatalf("loader ran %d times; want once, for the second caller", n)
			}
		})
	}
}

// valueRead returns a condition that holds once the server at addr has
// found key with a value of at least size bytes for a read, counted from
// now (call it before the value is written): Redis's keyspace_hits (one
// thread; a lease poll's SET NX counts no hit, and key does not exist
// before), memcached's log of its fetches ("watch fetchers"), which names
// the key, whether it was found and its size. Not memcached's get_hits: a
// lease poll's add that fails reads the lease key to see whether it is a
// tombstone (a hit), and memcached counts a read once it has looked the key
// up, on a thread of its own; nor bytes written, which the statistics'
// own answers grow.
func valueRead(t *testing.T, kind, addr, key string, size int) func() bool {
	t.Helper()
	if kind == "redis-server" {
		before := redisStat(t, addr, "keyspace_hits")
		return func() bool { return redisStat(t, addr, "keyspace_hits") > before }
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprint(conn, "watch fetchers\r\n")
	sc := bufio.NewScanner(conn)
	if !sc.Scan() || sc.Text() != "OK" {
		t.Fatalf("memcached watch fetchers: %q, %v", sc.Text(), sc.Err())
	}
	var found atomic.Bool
	go func() {
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if slices.Contains(f, "key="+key) && slices.Contains(f, "status=found") {
				for _, w := range f {
					if n, ok := strings.CutPrefix(w, "size="); ok {
						if v, _ := strconv.Atoi(n); v >= size {
							found.Store(true)
						}
					}
				}
			}
		}
	}()
	return found.Load
}

// redisStat is the field name of the Redis server at addr's INFO.
func redisStat(t *testing.T, addr, name string) int {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("redis at %s: no %s in INFO stats", addr, name)
	return 0
}
