package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// Near cache tests run on real redis-servers: miniredis has no CLIENT
// TRACKING. None waits for an invalidation with a sleep: each reads until it
// sees the change, within a bound of attempts (eventually), and fails past
// it.

// eventually calls f until it returns nil, at most 10 s of attempts a
// millisecond apart, and fails the test with f's last error after that.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	for range 10000 {
		if err = f(); err == nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s: still %v after 10000 attempts", what, err)
}

// nearOf returns the near cache statistics of the node at addr.
func nearOf(t *testing.T, c *Client, addr string) NearCacheStats {
	t.Helper()
	for _, s := range c.NearCacheStats() {
		if s.Node.Addr == addr {
			return s
		}
	}
	t.Fatalf("no near cache for %s in %+v", addr, c.NearCacheStats())
	return NearCacheStats{}
}

// serverGets returns how many GET and MGET commands the server has run, from
// INFO commandstats.
func serverGets(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	return serverCommands(t, rdb, "get", "mget")
}

// serverCommands returns how many of the commands cmds the server has run,
// from INFO commandstats (a script's own calls included).
func serverCommands(t *testing.T, rdb *redis.Client, cmds ...string) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.SplitSeq(info, "\n") {
		for _, cmd := range cmds {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				calls, _, _ := strings.Cut(rest, ",")
				v, err := strconv.Atoi(calls)
				if err != nil {
					t.Fatalf("commandstats %q: %v", line, err)
				}
				n += v
			}
		}
	}
	return n
}

// getStats returns the node's "get" statistics.
func getStats(c *Client, addr string) OpStats {
	for _, n := range c.Stats().Nodes {
		if n.Node.Addr != addr {
			continue
		}
		for _, o := range n.Ops {
			if o.Op == "get" {
				return o
			}
		}
	}
	return OpStats{}
}

// plainRedis is a go-redis client of addr without a near cache: another
// process.
func plainRedis(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// expect returns nil when c's Get of key returns want (nil: a miss).
func expect(ctx context.Context, c *Client, key string, want []byte) error {
	v, err := c.Get(ctx, key)
	switch {
	case want == nil && errors.Is(err, ErrCacheMiss):
		return nil
	case err != nil:
		return err
	case want == nil || !bytes.Equal(v, want):
		return fmt.Errorf("Get(%s) = %q, want %q", key, v, want)
	}
	return nil
}

// TestNearCache: a key read twice is answered from process memory the
// second time (the server runs no GET, the node's Stats count no call, the
// near cache counts a hit), and a write through another client, which the
// façade knows nothing of, reaches the next reads: the server invalidates
// the near copy. A miss is kept too, and a value created by another client
// invalidates it.
func TestNearCache(t *testing.T) {
	for _, ap := range []bool{false, true} {
		t.Run(fmt.Sprintf("AutoPipeline=%v", ap), func(t *testing.T) {
			cl := newCluster(t, "redis-server", 1)
			addr := cl.addrs[0]
			c := cl.client(t, Options{NearCache: &NearCache{MaxAge: -1}, AutoPipeline: ap}) // MaxAge off: exact counts
			other := plainRedis(t, addr)
			ctx := context.Background()

			if err := c.Set(ctx, "k", []byte("v1"), 0); err != nil {
				t.Fatal(err)
			}
			if err := expect(ctx, c, "k", []byte("v1")); err != nil { // fills the near cache
				t.Fatal(err)
			}
			gets, calls, near := serverGets(t, other), getStats(c, addr).Calls(), nearOf(t, c, addr)
			const reads = 100
			for range reads {
				if err := expect(ctx, c, "k", []byte("v1")); err != nil {
					t.Fatal(err)
				}
			}
			if d := serverGets(t, other) - gets; d != 0 {
				t.Errorf("the server ran %d GETs for %d near reads", d, reads)
			}
			if d := getStats(c, addr).Calls() - calls; d != 0 {
				t.Errorf("Stats counted %d get calls for %d near reads", d, reads)
			}
			after := nearOf(t, c, addr)
			if d := after.Hits - near.Hits; d != reads || after.Misses != near.Misses || after.Entries != 1 {
				t.Errorf("near cache: %d hits for %d reads, misses %d → %d, %d entries", d, reads, near.Misses, after.Misses, after.Entries)
			}

			if err := other.Set(ctx, "k", "v2", 0).Err(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a write by another client", func() error { return expect(ctx, c, "k", []byte("v2")) })
			if err := other.Del(ctx, "k").Err(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a delete by another client", func() error { return expect(ctx, c, "k", nil) })

			// A miss is kept, and invalidated when the key is created.
			if err := expect(ctx, c, "absent", nil); err != nil {
				t.Fatal(err)
			}
			hits := nearOf(t, c, addr).Hits
			if err := expect(ctx, c, "absent", nil); err != nil {
				t.Fatal(err)
			}
			if nearOf(t, c, addr).Hits != hits+1 {
				t.Errorf("a miss read twice was not answered from the near cache")
			}
			if err := other.Set(ctx, "absent", "now", 0).Err(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a key created by another client", func() error { return expect(ctx, c, "absent", []byte("now")) })
			if s := nearOf(t, c, addr); s.HitRatio() <= 0.9 {
				t.Errorf("hit ratio %.2f after %d hits and %d misses", s.HitRatio(), s.Hits, s.Misses)
			}
		})
	}
}

// TestNearCacheOwnWrites: every write through the façade is read back at
// once, with no retry: the client drops its own near copies of the keys it
// writes, without waiting for the server's invalidation. Each round first
// makes sure the old value is a near copy.
func TestNearCacheOwnWrites(t *testing.T) {
	for _, ap := range []bool{false, true} {
		t.Run(fmt.Sprintf("AutoPipeline=%v", ap), func(t *testing.T) {
			cl := newCluster(t, "redis-server", 2)
			c := cl.client(t, Options{NearCache: &NearCache{}, AutoPipeline: ap})
			ctx := context.Background()
			near := func(key string) {
				t.Helper()
				addr := c.Locate(key).Addr
				hits := nearOf(t, c, addr).Hits
				if _, err := c.Get(ctx, key); err != nil && !errors.Is(err, ErrCacheMiss) {
					t.Fatal(err)
				}
				if _, err := c.Get(ctx, key); err != nil && !errors.Is(err, ErrCacheMiss) {
					t.Fatal(err)
				}
				if nearOf(t, c, addr).Hits == hits {
					t.Fatalf("%s: not answered from the near cache", key)
				}
			}
			check := func(key string, want []byte) {
				t.Helper()
				if err := expect(ctx, c, key, want); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 20 {
				k := fmt.Sprintf("own:%d", i)
				v := func(s string) []byte { return []byte(fmt.Sprint(s, i)) }
				near(k)
				if err := c.Set(ctx, k, v("set"), 0); err != nil {
					t.Fatal(err)
				}
				check(k, v("set"))
				near(k)
				if err := c.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
				check(k, nil)
				near(k)
				if err := c.Add(ctx, k, v("add"), time.Hour); err != nil {
					t.Fatal(err)
				}
				check(k, v("add"))
				near(k)
				if err := c.SetMulti(ctx, map[string][]byte{k: v("multi")}, 0); err != nil {
					t.Fatal(err)
				}
				check(k, v("multi"))
				near(k)
				if err := c.DeleteMulti(ctx, []string{k}); err != nil {
					t.Fatal(err)
				}
				check(k, nil)
				near(k)
				if _, err := c.Incr(ctx, k, 7); err != nil {
					t.Fatal(err)
				}
				check(k, []byte("7"))
				near(k)
				if err := c.Redis(k).Set(ctx, k, v("direct"), 0).Err(); err != nil { // Client.Redis's client is the node's
					t.Fatal(err)
				}
				check(k, v("direct"))
			}
			// Client.Redis's reads that go-redis caches go through the near
			// cache too, and its writes drop their copies.
			rdb, addr := c.Redis("h"), c.Locate("h").Addr
			for i := range 3 {
				want := fmt.Sprint("f", i)
				if err := rdb.HSet(ctx, "h", "f", want).Err(); err != nil {
					t.Fatal(err)
				}
				hits := nearOf(t, c, addr).Hits
				eventually(t, "HGET from the near cache", func() error {
					if got, err := rdb.HGet(ctx, "h", "f").Result(); err != nil || got != want {
						t.Fatalf("HGET = %q, %v; want %q", got, err, want)
					}
					if nearOf(t, c, addr).Hits == hits {
						return errors.New("no near hit")
					}
					return nil
				})
			}
		})
	}
}

// TestNearCacheMaxAge: a near copy that nobody invalidates is read from its
// node again once it is MaxAge old. MaxAge is what bounds how long a near
// copy can outlive its key's TTL, when Redis has not deleted the expired
// key yet.
func TestNearCacheMaxAge(t *testing.T) {
	cl := newCluster(t, "redis-server", 1)
	addr := cl.addrs[0]
	c := cl.client(t, Options{NearCache: &NearCache{MaxAge: 20 * time.Millisecond}})
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if err := expect(ctx, c, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	misses := nearOf(t, c, addr).Misses
	eventually(t, "a read from the node after MaxAge", func() error {
		if err := expect(ctx, c, "k", []byte("v")); err != nil {
			return err
		}
		if m := nearOf(t, c, addr).Misses; m == misses {
			return fmt.Errorf("all reads answered from the near cache")
		}
		return nil
	})
}

// TestNearCacheTTL: a near copy goes when its key expires on the server:
// once the TTL has passed and Redis has deleted the key (here another
// client's read makes it, as Redis's active expiry would later), the
// façade's next reads miss.
func TestNearCacheTTL(t *testing.T) {
	cl := newCluster(t, "redis-server", 1)
	c := cl.client(t, Options{NearCache: &NearCache{MaxAge: -1}}) // no MaxAge: the expiry alone
	other := plainRedis(t, cl.addrs[0])
	ctx := context.Background()
	if err := c.Set(ctx, "ttl", []byte("v"), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := expect(ctx, c, "ttl", []byte("v")); err != nil {
		t.Fatal(err)
	}
	hits := nearOf(t, c, cl.addrs[0]).Hits
	if err := expect(ctx, c, "ttl", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if nearOf(t, c, cl.addrs[0]).Hits != hits+1 {
		t.Fatal("not answered from the near cache")
	}
	eventually(t, "the key's expiry on the server", func() error {
		if n, err := other.Exists(ctx, "ttl").Result(); err != nil || n != 0 {
			return fmt.Errorf("EXISTS %d, %v", n, err)
		}
		return nil
	})
	eventually(t, "the near copy of an expired key", func() error { return expect(ctx, c, "ttl", nil) })
}

// TestNearCacheLargeValue: a value larger than a shard of MaxBytes is never
// kept near, and is read whole from its node every time; smaller values
// beside it are kept.
func TestNearCacheLargeValue(t *testing.T) {
	cl := newCluster(t, "redis-server", 1)
	addr := cl.addrs[0]
	const budget = 64 << 10 // 16 shards of 4 KiB
	c := cl.client(t, Options{NearCache: &NearCache{MaxBytes: budget, MaxAge: -1}})
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 8<<10)
	if err := c.Set(ctx, "big", big, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "small", []byte("s"), 0); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := expect(ctx, c, "big", big); err != nil {
			t.Fatal(err)
		}
		if err := expect(ctx, c, "small", []byte("s")); err != nil {
			t.Fatal(err)
		}
	}
	s := nearOf(t, c, addr)
	if s.Entries != 1 || s.Hits != 4 || s.Misses != 6 || s.Bytes > budget {
		t.Errorf("near cache %+v: want the small value alone, 4 hits and 6 misses (5 of them the big value's)", s)
	}
}

// TestNearCacheMigration: near copies come only from a key's current owner.
// A key read during a migration through a fallback to its old owner leaves
// no near copy of the old owner's; a second client that knows only the new
// placement then writes the key, which the old owner never sees, and the
// first client's next reads return the new value.
func TestNearCacheMigration(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("AsyncBackfill=%v", async), func(t *testing.T) {
			cl := newCluster(t, "redis-server", 2)
			oldAddr, newAddr := cl.addrs[0], cl.addrs[1]
			ctx := context.Background()
			// The key is on the old owner, written by the old placement's world.
			if err := plainRedis(t, oldAddr).Set(ctx, "m", "old", 0).Err(); err != nil {
				t.Fatal(err)
			}
			a := cl.client(t, Options{Nodes: cl.nodes(1), NearCache: &NearCache{}, AsyncBackfill: async,
				MigrateFrom: &MigrateFrom{Nodes: cl.nodes(0), Start: time.Now(), Window: time.Hour}})
			b := cl.client(t, Options{Nodes: cl.nodes(1), NearCache: &NearCache{}})

			before := nearOf(t, a, oldAddr)
			if err := expect(ctx, a, "m", []byte("old")); err != nil { // a fallback
				t.Fatal(err)
			}
			if st := a.Migration(); st.FallbackHits != 1 {
				t.Fatalf("FallbackHits %d, want 1", st.FallbackHits)
			}
			if after := nearOf(t, a, oldAddr); after != before {
				t.Errorf("the fallback read went through the old owner's near cache: %+v → %+v", before, after)
			}
			// Read again, until the copy on the new owner is a near copy there.
			eventually(t, "the backfilled value as a near copy", func() error {
				if err := expect(ctx, a, "m", []byte("old")); err != nil {
					return err
				}
				if nearOf(t, a, newAddr).Hits == 0 {
					return errors.New("not yet answered from the near cache")
				}
				return nil
			})

			if err := b.Set(ctx, "m", []byte("new"), 0); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a write through the new placement alone", func() error { return expect(ctx, a, "m", []byte("new")) })
			// The old owner still has the old value: nobody wrote it there.
			if v, err := plainRedis(t, oldAddr).Get(ctx, "m").Result(); err != nil || v != "old" {
				t.Fatalf("old owner: %q, %v", v, err)
			}
		})
	}
}

// TestNearCacheReshard: every node's client has a near cache, those a
// Reshard adds included, and a node that leaves with the end of a window
// takes its near cache with it.
func TestNearCacheReshard(t *testing.T) {
	cl := newCluster(t, "redis-server", 2)
	c := cl.client(t, Options{Nodes: cl.nodes(0), NearCache: &NearCache{MaxAge: -1}})
	ctx := context.Background()
	if err := c.Reshard(cl.nodes(1), time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := len(c.NearCacheStats()); got != 2 {
		t.Fatalf("%d near caches during the window, want 2", got)
	}
	if err := c.Set(ctx, "r", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := expect(ctx, c, "r", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if s := nearOf(t, c, cl.addrs[1]); s.Hits != 2 {
		t.Errorf("new node's near cache: %+v, want 2 hits", s)
	}
	if err := c.Reshard(cl.nodes(1), 0); !errors.Is(err, ErrMigrationActive) {
		t.Fatalf("Reshard during the window: %v", err)
	}
	// Node 1 holds what c wrote.
	c2 := cl.client(t, Options{Nodes: cl.nodes(0), NearCache: &NearCache{}, SkipEmptyCheck: true})
	if err := c2.Reshard(cl.nodes(1), 0); err != nil {
		t.Fatal(err)
	}
	if s := c2.NearCacheStats(); len(s) != 1 || s[0].Node.Addr != cl.addrs[1] {
		t.Fatalf("after a Reshard without a window: %+v, want the new node's alone", s)
	}
}

// TestNearCacheOptions: a Redis near cache is on database 0, through hooks
// that keep it, anything else failing New with ErrNearCache; a Memcached
// one needs a MaxAge, and bounds of either kind make sense.
func TestNearCacheOptions(t *testing.T) {
	cl := newCluster(t, "redis-server", 1)
	nodes := cl.nodes()
	for _, tc := range []struct {
		name string
		opts Options
		want error
	}{
		{"memcached without MaxAge", Options{Backend: Memcached, NearCache: &NearCache{MaxAge: -1}}, ErrBadOptions},
		{"db", Options{DB: 1}, ErrNearCache},
		{"node db", Options{NodeCredentials: func(_ ring.Node, c Credentials) Credentials { c.DB = 2; return c }}, ErrNearCache},
		{"hook that drops it", Options{NewRedisClient: func(n ring.Node, _ *redis.Options) *redis.Client {
			return redis.NewClient(&redis.Options{Addr: n.Addr})
		}}, ErrNearCache},
		{"hook that sets RESP2", Options{NewRedisClient: func(_ ring.Node, opt *redis.Options) *redis.Client {
			opt.Protocol = 2
			return redis.NewClient(opt)
		}}, ErrNearCache},
		{"negative bytes", Options{NearCache: &NearCache{MaxBytes: -1}}, ErrBadOptions},
		{"no bound", Options{NearCache: &NearCache{MaxEntries: -1}}, ErrBadOptions},
		{"drain under 1ms", Options{NearCache: &NearCache{DrainInterval: time.Microsecond}}, ErrBadOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Nodes = nodes
			if o.NearCache == nil {
				o.NearCache = &NearCache{}
			}
			c, err := New(o)
			if err == nil {
				c.Close()
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrBadOptions) {
				t.Fatalf("New: %v, want %v (and ErrBadOptions)", err, tc.want)
			}
		})
	}

	// A hook that passes the options on keeps the near cache, and its own
	// hooks see the calls that reach the server.
	hook := newBatchHook()
	c := cl.client(t, Options{NearCache: &NearCache{MaxEntries: 10, MaxAge: -1}, NewRedisClient: func(_ ring.Node, opt *redis.Options) *redis.Client {
		rdb := redis.NewClient(opt)
		rdb.AddHook(hook)
		return rdb
	}})
	ctx := context.Background()
	if err := c.Set(ctx, "h", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := expect(ctx, c, "h", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if s := nearOf(t, c, cl.addrs[0]); s.Hits != 2 {
		t.Errorf("through the hook's client: %+v, want 2 near hits", s)
	}

	// A server without CLIENT TRACKING (miniredis): go-redis turns its cache
	// off and every read goes to the server.
	m := miniredis.RunT(t)
	mc, err := New(Options{Nodes: []ring.Node{{Name: "m", Addr: m.Addr()}}, NearCache: &NearCache{}})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if err := mc.Set(ctx, "k", []byte("v1"), 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := expect(ctx, mc, "k", []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	m.Set("k", "v2")
	if err := expect(ctx, mc, "k", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if s := mc.NearCacheStats(); len(s) != 1 || s[0].Hits != 0 {
		t.Errorf("without CLIENT TRACKING: %+v, want no near hits", s)
	}
	if s := (&Client{}).NearCacheStats(); s != nil {
		t.Errorf("closed client: %+v", s)
	}
}

// TestNearCacheConcurrent: readers and writers of a few hot keys at once,
// through the façade and through another client, under -race. Once the
// writers are done, every reader's next reads converge on the last value.
func TestNearCacheConcurrent(t *testing.T) {
	for _, ap := range []bool{false, true} {
		t.Run(fmt.Sprintf("AutoPipeline=%v", ap), func(t *testing.T) {
			cl := newCluster(t, "redis-server", 2)
			c := cl.client(t, Options{NearCache: &NearCache{MaxEntries: 100}, AutoPipeline: ap})
			others := []*redis.Client{plainRedis(t, cl.addrs[0]), plainRedis(t, cl.addrs[1])}
			ctx := context.Background()
			keys := []string{"hot:0", "hot:1", "hot:2", "hot:3"}
			other := func(k string) *redis.Client {
				if c.Locate(k).Addr == cl.addrs[0] {
					return others[0]
				}
				return others[1]
			}
			var wg sync.WaitGroup
			errc := make(chan error, 16)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 200 {
						k := keys[(g+i)%len(keys)]
						var err error
						switch {
						case g == 0 && i%4 == 0:
							err = c.Set(ctx, k, []byte(fmt.Sprint(g, ":", i)), 0)
						case g == 1 && i%4 == 0:
							err = other(k).Set(ctx, k, fmt.Sprint(g, ":", i), 0).Err()
						case g == 2 && i%16 == 0:
							err = c.Delete(ctx, k)
						default:
							_, err = c.Get(ctx, k)
							if errors.Is(err, ErrCacheMiss) {
								err = nil
							}
						}
						if err != nil {
							errc <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			for _, k := range keys {
				if err := other(k).Set(ctx, k, "final:"+k, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range keys {
				eventually(t, "the last write of "+k, func() error { return expect(ctx, c, k, []byte("final:"+k)) })
			}
			var hits int64
			for _, s := range c.NearCacheStats() {
				hits += s.Hits
			}
			if hits == 0 {
				t.Error("no read was answered from the near cache")
			}
		})
	}
}

// TestNearCacheHealth: near hits are not the node's answers. A node that
// stops answering (paused: its connections stay open) is marked down after
// FailureThreshold failed calls in a row, however many near hits come in
// between; counted as answers, they would restart the count each time.
// go-redis drops the near copies a connection fetched when it drops the
// connection (a timed-out call's), so the hot key is fetched on the
// connection a FIFO pool hands out last.
func TestNearCacheHealth(t *testing.T) {
	ss := testserver.Redis(t, 1)
	o := Options{Nodes: []ring.Node{{Name: "a", Addr: ss[0].Addr}}, NearCache: &NearCache{MaxAge: -1},
		FailureThreshold: 2, ProbeInterval: time.Hour,
		// faultTimeout: a healthy call on a busy machine never reaches it
		// (100 ms did, and counted a third timeout).
		DialTimeout: faultTimeout, ReadTimeout: faultTimeout, WriteTimeout: faultTimeout,
		NewRedisClient: func(_ ring.Node, opt *redis.Options) *redis.Client {
			opt.PoolFIFO = true
			return redis.NewClient(opt)
		}}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "hot", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	// Open a few connections, so that the failed calls take others than the
	// hot key's.
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Redis("x").Do(ctx, "blpop", "no-list", "0.05").Err() // holds its connection 50ms
		}()
	}
	wg.Wait()
	for range 2 {
		if err := expect(ctx, c, "hot", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	ss[0].Pause()
	defer ss[0].Resume()
	hits := 0
	for i := 0; i < 4 && !c.Health()[0].Down; i++ {
		if _, err := c.Get(ctx, fmt.Sprint("cold:", i)); err == nil {
			t.Fatal("a Get of a paused server succeeded")
		}
		if err := expect(ctx, c, "hot", []byte("v")); err == nil {
			hits++
		}
	}
	if h := c.Health()[0]; !h.Down {
		t.Fatalf("node not marked down: %+v", h)
	}
	if hits == 0 {
		t.Fatal("no near hit between the failures: the test proves nothing")
	}
	if _, err := c.Get(ctx, "hot"); !errors.Is(err, ErrNodeDown) {
		t.Errorf("Get of a near-cached key of a node held down: %v, want ErrNodeDown", err)
	}
	if calls := getStats(c, ss[0].Addr); calls.Errors.Timeout != 2 {
		t.Errorf("get errors %+v, want the 2 timed-out calls", calls.Errors)
	}
}

// TestNearCacheACLUser: with a Redis ACL user (part of go-redis's namespace
// of the cache) the near cache keeps copies, and a write through the façade
// drops them at once: the next Get returns the new value, and the reads
// after it are answered from the near cache again.
func TestNearCacheACLUser(t *testing.T) {
	ss := testserver.SecureRedis(t, 1, testserver.Security{ACL: []string{"cache on >near-secret ~* +@all"}})
	for _, viaHook := range []bool{false, true} {
		t.Run(fmt.Sprintf("viaHook=%v", viaHook), func(t *testing.T) { testNearCacheACLUser(t, ss[0].Addr, viaHook) })
	}
}

// testNearCacheACLUser logs in as the ACL user through Options, or through
// a NewRedisClient hook that sets the user in the options it is given.
func testNearCacheACLUser(t *testing.T, addr string, viaHook bool) {
	o := Options{Nodes: []ring.Node{{Name: "a", Addr: addr}}, Username: "cache", Password: "near-secret", NearCache: &NearCache{}}
	if viaHook {
		o.Username, o.Password = "", ""
		o.NewRedisClient = func(_ ring.Node, opt *redis.Options) *redis.Client {
			opt.Username, opt.Password = "cache", "near-secret"
			return redis.NewClient(opt)
		}
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := range 10 {
		want := []byte(fmt.Sprint("v", i))
		if err := c.Set(ctx, "u", want, 0); err != nil {
			t.Fatal(err)
		}
		if err := expect(ctx, c, "u", want); err != nil {
			t.Fatal(err)
		}
		hits := nearOf(t, c, addr).Hits
		eventually(t, "a near hit", func() error {
			if err := expect(ctx, c, "u", want); err != nil {
				t.Fatal(err)
			}
			if nearOf(t, c, addr).Hits == hits {
				return errors.New("no near hit")
			}
			return nil
		})
	}
}

// TestNearCacheGetMulti: a GetMulti of keys the near cache does not hold
// reads the nodes, is counted in their Stats as a get_multi, and fills no
// copy (nor counts a near miss); a Get of the same keys afterwards fills the
// near cache as usual. (TestNearCacheGetMultiNear: the keys it holds.)
func TestNearCacheGetMulti(t *testing.T) {
	cl := newCluster(t, "redis-server", 2)
	c := cl.client(t, Options{NearCache: &NearCache{MaxAge: -1}})
	ctx := context.Background()
	keys := []string{"gm:0", "gm:1", "gm:2", "gm:3", "gm:4", "gm:5"}
	items := map[string][]byte{}
	for _, k := range keys {
		items[k] = []byte("v-" + k)
	}
	if err := c.SetMulti(ctx, items, 0); err != nil {
		t.Fatal(err)
	}
	others := map[string]*redis.Client{cl.addrs[0]: plainRedis(t, cl.addrs[0]), cl.addrs[1]: plainRedis(t, cl.addrs[1])}
	gets := func() int { return serverGets(t, others[cl.addrs[0]]) + serverGets(t, others[cl.addrs[1]]) }
	before := gets()
	for range 3 {
		got, err := c.GetMulti(ctx, append(keys, "gm:absent"))
		if err != nil || len(got) != len(keys) {
			t.Fatalf("GetMulti: %d of %d, %v", len(got), len(keys), err)
		}
	}
	if d := gets() - before; d != 6 { // 3 GetMultis over 2 nodes
		t.Errorf("the servers ran %d MGETs for 3 GetMultis over 2 nodes, want 6", d)
	}
	var calls int64
	for _, n := range c.Stats().Nodes {
		for _, o := range n.Ops {
			if o.Op == "get_multi" {
				calls += o.Calls()
			}
		}
	}
	if calls != 6 {
		t.Errorf("Stats: %d get_multi calls, want 6", calls)
	}
	for _, s := range c.NearCacheStats() {
		if s.Hits != 0 || s.Misses != 0 || s.Entries != 0 {
			t.Errorf("GetMulti went through the near cache of %s: %+v", s.Node.Addr, s)
		}
	}
	for range 2 {
		if err := expect(ctx, c, keys[0], items[keys[0]]); err != nil {
			t.Fatal(err)
		}
	}
	if s := nearOf(t, c, c.Locate(keys[0]).Addr); s.Hits != 1 {
		t.Errorf("Get after GetMulti: %+v, want a near hit", s)
	}
}
