package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// TestGutter pauses a node (SIGSTOP: it comes back with what it held):
// while the breaker holds it down, its keys' reads and writes go to the
// gutter node with the TTL capped, counters fail; once it is back, its
// keys go home, and the keys written through the gutter meanwhile are not
// read there with the values the paused node still held.
func TestGutter(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			var ss []*testserver.Server
			backend := Redis
			if kind == "redis-server" {
				ss = testserver.Redis(t, 3)
			} else {
				ss, backend = testserver.Memcached(t, 3), Memcached
			}
			nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr}, {Name: "b", Addr: ss[1].Addr}}
			gutter := ss[2]
			c, err := New(Options{Backend: backend, Nodes: nodes, Gutter: []ring.Node{{Name: "g", Addr: gutter.Addr}},
				GutterTTL: 5 * time.Second, FailureThreshold: 1, ProbeInterval: 20 * time.Millisecond,
				ReadTimeout: faultTimeout, WriteTimeout: faultTimeout})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := t.Context()
			keys := keysOn(c, ss[0].Addr, "g", 4)
			written, deleted, kept, counter := keys[0], keys[1], keys[2], keys[3]
			for _, k := range keys[:3] {
				if err := c.Set(ctx, k, []byte("old"), time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Incr(ctx, counter, 1); err != nil {
				t.Fatal(err)
			}

			resume := paused(t, ss[0])
			if _, err := c.Get(ctx, kept); err == nil {
				t.Fatal("a read of the paused node answered")
			}
			waitFor(t, "the node held down", func() bool { return c.Health()[0].Down })
			if err := c.Set(ctx, written, []byte("new"), time.Hour); err != nil {
				t.Fatalf("Set with the node down: %v; want it written to the gutter", err)
			}
			mustGet(t, c, written, "new")
			mustMiss(t, c, kept) // the gutter never had it: a miss, not an error
			if err := c.Delete(ctx, deleted); err != nil {
				t.Fatalf("Delete with the node down: %v", err)
			}
			if _, err := c.Incr(ctx, counter, 1); !errors.Is(err, ErrNodeDown) {
				t.Fatalf("Incr with the node down: %v; want ErrNodeDown (a gutter counter would restart)", err)
			}
			if ttl := serverTTL(t, kind, gutter.Addr, written); ttl <= 0 || ttl > 5*time.Second {
				t.Fatalf("the gutter holds %q with a TTL of %v; want at most GutterTTL (5s)", written, ttl)
			}
			if v, err := c.Get(ctx, keysOn(c, ss[1].Addr, "other", 1)[0]); err != ErrCacheMiss {
				t.Fatalf("a key of the healthy node: %q, %v", v, err)
			}
			if h := c.Health()[0]; h.Guttered == 0 {
				t.Fatalf("Health = %+v; want the gutter's calls counted", h)
			}

			resume()
			waitFor(t, "the node up", func() bool { return !c.Health()[0].Down })
			// Home again: the value written through the gutter is not
			// there (it was the gutter's), and the paused node's old values
			// of the keys written or deleted meanwhile are gone too.
			mustMiss(t, c, written)
			mustMiss(t, c, deleted)
			mustGet(t, c, kept, "old")
			if v, err := c.Incr(ctx, counter, 1); err != nil || v != 2 {
				t.Fatalf("Incr back home = %d, %v; want 2", v, err)
			}
		})
	}
}

// serverTTL is key's remaining TTL on the server at addr, read directly.
func serverTTL(t *testing.T, kind, addr, key string) time.Duration {
	t.Helper()
	if kind == "redis-server" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		d, err := rdb.PTTL(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	items := metaGet(t, addr, []string{key})
	if len(items) != 1 || !items[0].Found {
		t.Fatalf("%q not on the gutter: %+v", key, items)
	}
	return items[0].TTL
}

// TestGutterOptions: a gutter node that is a regular node too, or a
// negative GutterTTL, is refused.
func TestGutterOptions(t *testing.T) {
	nodes := []ring.Node{{Name: "a", Addr: "127.0.0.1:1"}}
	for _, opts := range []Options{
		{Nodes: nodes, Gutter: nodes},
		{Nodes: nodes, Gutter: []ring.Node{{Addr: "127.0.0.1:2"}}, GutterTTL: -time.Second},
		{Nodes: nodes, Gutter: []ring.Node{{Addr: "bad"}}},
	} {
		if c, err := New(opts); !errors.Is(err, ErrBadOptions) {
			if c != nil {
				c.Close()
			}
			t.Errorf("New(%s) = %v; want ErrBadOptions", fmt.Sprint(opts.Gutter, opts.GutterTTL), err)
		}
	}
}

// TestGutterHitRate kills 1 of 8 real nodes under a GetOrLoad workload
// (Zipf over 4000 keys) and compares the hit rate after the kill with the
// steady one, in the same run: with FailOpen alone the dead node's keys
// miss for as long as it is down; with a gutter of one node they are
// loaded once into it and hit again, the hit rate back to 95% of steady
// within 30 s (it takes well under a second here).
func TestGutterHitRate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a workload over 9 servers")
	}
	for _, withGutter := range []bool{false, true} {
		t.Run(fmt.Sprintf("gutter=%v", withGutter), func(t *testing.T) {
			ss := testserver.Redis(t, 9)
			nodes := make([]ring.Node, 8)
			for i := range nodes {
				nodes[i] = ring.Node{Name: fmt.Sprintf("n%d", i), Addr: ss[i].Addr}
			}
			opts := Options{Nodes: nodes, FailOpen: true, FailureThreshold: 2, ProbeInterval: time.Second}
			if withGutter {
				opts.Gutter = []ring.Node{{Name: "g", Addr: ss[8].Addr}}
			}
			c, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			load := func(context.Context) ([]byte, error) { return []byte("row"), nil }
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					z := rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 1)), 1.1, 1, 3999)
					for ctx.Err() == nil {
						c.GetOrLoad(ctx, fmt.Sprintf("row:%d", z.Uint64()), time.Hour, load)
					}
				})
			}
			defer wg.Wait()
			defer cancel()
			// hitRate is the share of hits among the next n calls' keys.
			hitRate := func(n int64) float64 {
				s0 := c.LoadStats()
				waitFor(t, "the workload's calls", func() bool {
					s := c.LoadStats()
					return s.Hits+s.Misses-s0.Hits-s0.Misses >= n
				})
				s := c.LoadStats()
				return float64(s.Hits-s0.Hits) / float64(s.Hits+s.Misses-s0.Hits-s0.Misses)
			}
			hitRate(20000) // warm
			steady := hitRate(20000)
			ss[3].Stop()
			killed := time.Now()
			waitFor(t, "the node held down", func() bool { return c.Health()[3].Down })
			var after float64
			recovered := time.Duration(-1)
			for time.Since(killed) < 30*time.Second {
				if after = hitRate(5000); after >= 0.95*steady {
					recovered = time.Since(killed)
					break
				}
				if !withGutter && time.Since(killed) > 3*time.Second {
					break // without a gutter it stays down there
				}
			}
			back := "never"
			if recovered >= 0 {
				back = recovered.Round(time.Millisecond).String()
			}
			t.Logf("gutter %v: steady hit rate %.3f; after the kill %.3f (%.2f of steady); back to 95%% of steady: %s; %d calls guttered",
				withGutter, steady, after, after/steady, back, c.Health()[3].Guttered)
			switch {
			case withGutter && recovered < 0:
				t.Errorf("with a gutter: %.3f of steady after 30 s; want 0.95", after/steady)
			case !withGutter && after >= 0.95*steady:
				t.Errorf("without a gutter: %.3f of steady with a node of 8 down: the test shows nothing", after/steady)
			}
		})
	}
}

// TestFailOpenGetOrLoadCounts: with FailOpen, a GetOrLoad of a key whose
// node is held down counts one missed read and one dropped write in
// Health, and no cache error: the node is down, not failing.
func TestFailOpenGetOrLoadCounts(t *testing.T) {
	ss := testserver.Redis(t, 2)
	c, err := New(Options{Nodes: []ring.Node{{Name: "a", Addr: ss[0].Addr}, {Name: "b", Addr: ss[1].Addr}},
		FailOpen: true, FailureThreshold: 1, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := keysOn(c, ss[0].Addr, "fo", 5)
	ss[0].Stop()
	if _, err := c.Get(t.Context(), keys[0]); err != nil && !errors.Is(err, ErrCacheMiss) {
		t.Logf("the read that marks the node down: %v", err)
	}
	waitFor(t, "the node held down", func() bool { return c.Health()[0].Down })
	h0, l0 := c.Health()[0], c.LoadStats()
	load := func(context.Context) ([]byte, error) { return []byte("row"), nil }
	for _, k := range keys {
		if v, err := c.GetOrLoad(t.Context(), k, time.Hour, load); err != nil || string(v) != "row" {
			t.Fatalf("GetOrLoad with the node down: %q, %v", v, err)
		}
	}
	h, l := c.Health()[0], c.LoadStats()
	if h.Missed-h0.Missed != 5 || h.Dropped-h0.Dropped != 5 || l.CacheErrors != l0.CacheErrors {
		t.Fatalf("5 GetOrLoad with the node down: %d missed, %d dropped, %d cache errors; want 5, 5, 0",
			h.Missed-h0.Missed, h.Dropped-h0.Dropped, l.CacheErrors-l0.CacheErrors)
	}
}
