package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// entryPoints returns every call of c that takes a context, on key k (and
// neighbours of it for the multi-key calls), each returning its error.
func entryPoints(c *Client, k string) map[string]func(ctx context.Context) error {
	keys := []string{k, k + ":1", k + ":2"}
	load := func(context.Context) ([]byte, error) { return []byte("loaded"), nil }
	loadMulti := func(_ context.Context, missing []string) (map[string][]byte, error) {
		m := map[string][]byte{}
		for _, k := range missing {
			m[k] = []byte("loaded")
		}
		return m, nil
	}
	ops := map[string]func(ctx context.Context) error{
		"Get":          func(ctx context.Context) error { _, err := c.Get(ctx, k); return err },
		"Set":          func(ctx context.Context) error { return c.Set(ctx, k, []byte("v"), 0) },
		"Add":          func(ctx context.Context) error { return c.Add(ctx, k, []byte("v"), 0) },
		"Delete":       func(ctx context.Context) error { return c.Delete(ctx, k) },
		"DeleteFound":  func(ctx context.Context) error { _, err := c.DeleteFound(ctx, k); return err },
		"Incr":         func(ctx context.Context) error { _, err := c.Incr(ctx, k, 1); return err },
		"Touch":        func(ctx context.Context) error { return c.Touch(ctx, k, time.Minute) },
		"GetMulti":     func(ctx context.Context) error { _, err := c.GetMulti(ctx, keys); return err },
		"SetMulti":     func(ctx context.Context) error { return c.SetMulti(ctx, map[string][]byte{k: nil}, 0) },
		"DeleteMulti":  func(ctx context.Context) error { return c.DeleteMulti(ctx, keys) },
		"GetItem":      func(ctx context.Context) error { _, err := c.GetItem(ctx, k); return err },
		"GetItems":     func(ctx context.Context) error { _, err := c.GetItems(ctx, keys); return err },
		"GetItemsFunc": func(ctx context.Context) error { return c.GetItemsFunc(ctx, keys, func(Item) {}) },
		"Store":        func(ctx context.Context) error { return c.Store(ctx, StoreSet, Item{Key: k, Value: []byte("v")}) },
		"GetAndTouch":  func(ctx context.Context) error { _, err := c.GetAndTouch(ctx, k, time.Minute); return err },
		"GetOrLoad":    func(ctx context.Context) error { _, err := c.GetOrLoad(ctx, k, time.Minute, load); return err },
		"GetMultiOrLoad": func(ctx context.Context) error {
			_, err := c.GetMultiOrLoad(ctx, keys, time.Minute, loadMulti)
			return err
		},
		"Flush":     func(ctx context.Context) error { return c.Flush(ctx) },
		"Ping":      func(ctx context.Context) error { return c.Ping(ctx) },
		"Increment": func(ctx context.Context) error { _, err := c.Increment(ctx, k, 1); return err },
		"Decrement": func(ctx context.Context) error { _, err := c.Decrement(ctx, k, 1); return err },
		"RedisDo": func(ctx context.Context) error {
			return c.RedisDo(ctx, k, RedisRead, redis.NewStringCmd(context.Background(), "get", k))
		},
	}
	return ops
}

// TestNilContext: every call given a nil context returns ErrNilContext,
// never panics (a panic in a library goroutine would end the process), and
// writes nothing.
func TestNilContext(t *testing.T) {
	forEachCluster(t, 2, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		for name, op := range entryPoints(c, "nilctx") {
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s(nil context) panicked: %v", name, p)
					}
				}()
				//lint:ignore SA1012 a nil context is the bad input under test
				if err := op(nil); !errors.Is(err, ErrNilContext) { //nolint:staticcheck
					t.Errorf("%s(nil context) = %v; want ErrNilContext", name, err)
				}
			}()
		}
		//lint:ignore SA1012 as above
		if _, err := c.Sweep(nil, SweepOptions{}); !errors.Is(err, ErrNilContext) { //nolint:staticcheck
			t.Errorf("Sweep(nil context) = %v; want ErrNilContext", err)
		}
		//lint:ignore SA1012 as above
		if _, err := c.NodeStats(nil); !errors.Is(err, ErrNilContext) { //nolint:staticcheck
			t.Errorf("NodeStats(nil context) = %v; want ErrNilContext", err)
		}
		if h := cl.holders(t, "nilctx"); len(h) != 0 {
			t.Errorf("a call with a nil context stored the key on %v", h)
		}
	})
}

// TestNodeDownEveryPath: while a node is held down, every call to it fails
// at once with ErrNodeDown, RedisDo (compat/goredis's path) included, and
// no error of a Redis node mentions Memcached; during a migration too,
// with the key's new owner held down. The node is paused, not stopped: a
// call that reached the network would wait out a timeout. "At once" is
// counted, not timed: no call reaches the node's network (networkCalls,
// its Stats' latency histograms, do not move).
func TestNodeDownEveryPath(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			t.Run("steady", func(t *testing.T) {
				cl := newCluster(t, kind, 2)
				c := cl.client(t, Options{FailureThreshold: 1, ProbeInterval: time.Hour})
				victim := cl.nodes(0)[0]
				k := keysOn(c, victim.Addr, "down:", 1)[0]
				holdDown(t, c, cl, 0, k)
				checkDownEveryPath(t, c, cl, victim.Addr, k)
			})
			t.Run("migration", func(t *testing.T) {
				cl := newCluster(t, kind, 3)
				c := cl.client(t, Options{Nodes: cl.nodes(0, 1), FailureThreshold: 1, ProbeInterval: time.Hour})
				if err := c.Reshard(cl.nodes(), time.Hour); err != nil {
					t.Fatal(err)
				}
				k := keysOn(c, cl.addrs[2], "down:", 1)[0] // moved to node 2
				holdDown(t, c, cl, 2, k)
				checkDownEveryPath(t, c, cl, cl.addrs[2], k)
			})
		})
	}
}

// holdDown pauses server i of cl and calls Get(k), a key it owns, until c
// holds the node down.
func holdDown(t *testing.T, c *Client, cl *cluster, i int, k string) {
	t.Helper()
	paused(t, cl.servers[i])
	before := networkCalls(c, cl.addrs[i])
	for range 10 {
		if healthOf(t, c, cl.addrs[i]).Down {
			// The calls that failed reached the network and were
			// counted: checkDownEveryPath's count of none can fail.
			if networkCalls(c, cl.addrs[i]) == before {
				t.Fatalf("the calls that held %s down are not counted as round trips", cl.addrs[i])
			}
			return
		}
		c.Get(t.Context(), k) // fails at the connection level until the node is marked down
	}
	t.Fatalf("node %s not held down after 10 failed calls", cl.addrs[i])
}

// checkDownEveryPath runs every entry point of c on k, whose node addr is held
// down: each fails without a round trip to the node, with ErrNodeDown (the calls on several keys or
// on every node on the down node's part, with a *NodeError for it), and no
// Redis error mentions Memcached.
func checkDownEveryPath(t *testing.T, c *Client, cl *cluster, addr, k string) {
	t.Helper()
	for name, op := range entryPoints(c, k) {
		before := networkCalls(c, addr)
		err := op(t.Context())
		if n := networkCalls(c, addr) - before; n != 0 {
			t.Errorf("%s on a node held down made %d round trips to it; want none", name, n)
		}
		switch {
		case name == "GetOrLoad" || name == "GetMultiOrLoad":
			// A cache that cannot be read does not stop the load.
			if err != nil {
				t.Errorf("%s on a node held down = %v; want the loaded value", name, err)
			}
		case !errors.Is(err, ErrNodeDown):
			t.Errorf("%s on a node held down = %v; want ErrNodeDown", name, err)
		}
		if cl.backend == Redis && err != nil && strings.Contains(strings.ToLower(err.Error()), "memcache") {
			t.Errorf("%s on a Redis node: %v mentions Memcached", name, err)
		}
	}
}

// networkCalls returns how many calls c handed to the node at addr's
// connection, answered or not: the calls its latency histograms count
// (callStats: the health probes left out). Calls refused at once because
// the node was held down are not among them (a call refused for its
// cancelled context is).
func networkCalls(c *Client, addr string) int64 {
	var n int64
	for _, op := range callStats(c, addr) {
		n += op.Latency.Count()
	}
	return n
}
