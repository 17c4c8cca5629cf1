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
		"Flush": func(ctx context.Context) error { return c.Flush(ctx) },
		"Ping":  func(ctx context.Context) error { return c.Ping(ctx) },
	}
	if c.opts.Backend == Redis {
		ops["RedisDo"] = func(ctx context.Context) error {
			return c.RedisDo(ctx, k, RedisRead, redis.NewStringCmd(context.Background(), "get", k))
		}
	} else {
		ops["Increment"] = func(ctx context.Context) error { _, err := c.Increment(ctx, k, 1); return err }
		ops["Decrement"] = func(ctx context.Context) error { _, err := c.Decrement(ctx, k, 1); return err }
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
		if h := cl.holders(t, "nilctx"); len(h) != 0 {
			t.Errorf("a call with a nil context stored the key on %v", h)
		}
	})
}

// TestNodeDownEveryPath: while a node is held down, every call to it fails
// at once with ErrNodeDown, RedisDo (compat/goredis's path) included, and
// no error of a Redis node mentions Memcached.
func TestNodeDownEveryPath(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 2)
			c := cl.client(t, Options{FailureThreshold: 1, ProbeInterval: time.Hour})
			victim := cl.nodes(0)[0]
			k := keysOn(c, victim.Addr, "down:", 1)[0]
			cl.stop(0)
			for !healthOf(t, c, victim.Addr).Down {
				c.Get(t.Context(), k) // fails at the connection level until the node is marked down
			}
			// The calls on several keys or on every node fail on the down
			// node's part, with a *NodeError for it among the others'.
			for name, op := range entryPoints(c, k) {
				start := time.Now()
				err := op(t.Context())
				if d := time.Since(start); d > prompt {
					t.Errorf("%s on a node held down took %v", name, d)
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
		})
	}
}
