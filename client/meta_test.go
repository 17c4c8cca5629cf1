package client

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node/mcnode"
)

// TestMetaLeases runs the lease tests again with Options.MetaLeases: on
// memcached the lease is the placeholder item, on Redis the script.
func TestMetaLeases(t *testing.T) {
	metaLeases = true
	defer func() { metaLeases = false }()
	for name, test := range map[string]func(*testing.T){
		"OneLoadAcrossProcesses": TestLeaseOneLoadAcrossProcesses,
		"DeleteDuringLoad":       TestLeaseDeleteDuringLoad,
		"DuringMigration":        TestLeaseDuringMigration,
		"WaitEndsAtClose":        TestLeaseWaitEndsAtClose,
		"ReleasedWhenThrottled":  TestLeaseReleasedWhenThrottled,
		"Batch":                  TestLeaseBatch,
	} {
		t.Run(name, test)
	}
}

// serverCounts returns the cmd_get and cmd_set a memcached saw.
func serverCounts(t *testing.T, addr string) (gets, sets int64) {
	t.Helper()
	n := mcnode.New(mcnode.Config{Addr: addr})
	defer n.Close()
	st, err := n.Client().Stats(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	gets, _ = strconv.ParseInt(st["cmd_get"], 10, 64)
	sets, _ = strconv.ParseInt(st["cmd_set"], 10, 64)
	return gets, sets
}

// TestMetaLeaseCommands counts the commands a memcached sees for a
// GetOrLoad of a missing key under a lease: the read, the lease, the
// store. With MetaLeases the read is the lease's (an add pipelined with
// the mg, one round trip), and the store one ms.
func TestMetaLeaseCommands(t *testing.T) {
	cl := newCluster(t, "memcached", 1)
	for _, meta := range []bool{false, true} {
		c := cl.client(t, Options{Lease: testLease, MetaLeases: meta})
		key := fmt.Sprintf("cold-%v", meta)
		g0, s0 := serverCounts(t, cl.addrs[0])
		if _, err := c.GetOrLoad(t.Context(), key, time.Hour, openLoader("v", nil).load); err != nil {
			t.Fatal(err)
		}
		g1, s1 := serverCounts(t, cl.addrs[0])
		t.Logf("MetaLeases %v: a lease miss cost %d gets and %d sets", meta, g1-g0, s1-s0)
		if meta && (g1-g0 != 1 || s1-s0 != 2) {
			t.Errorf("MetaLeases: %d gets and %d sets; want 1 and 2 (the lease's add+mg; the store)", g1-g0, s1-s0)
		}
		mustGet(t, c, key, "v")
	}
}

// TestMetaLeaseOneRoundTrip: under MetaLeases a GetOrLoad (and a
// GetMultiOrLoad) that misses reaches its loader after one round trip to
// the key's node, on both
// backends: counted by the node's observer (one call a round trip) and by
// the server (Memcached: one mg, one add; Redis: one script, and no GET
// but the script's: commandstats counts a script's calls too).
func TestMetaLeaseOneRoundTrip(t *testing.T) {
	for _, kind := range []string{"memcached", "redis-server"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 1)
			c := cl.client(t, Options{Lease: testLease, MetaLeases: true})
			ctx := t.Context()
			if err := c.Set(ctx, "warm", []byte("x"), 0); err != nil { // the pool dialled, the script loaded
				t.Fatal(err)
			}
			if _, err := c.GetOrLoad(ctx, "warm-miss", time.Hour, openLoader("v", nil).load); err != nil {
				t.Fatal(err)
			}
			before := networkCalls(c, cl.addrs[0])
			server := func() (int64, int64) {
				if kind == "memcached" {
					return serverCounts(t, cl.addrs[0])
				}
				return int64(serverCalls(t, cl.addrs[0], "get", "mget")), int64(serverCalls(t, cl.addrs[0], "evalsha", "eval"))
			}
			a0, b0 := server()
			var trips, a, b int64
			v, err := c.GetOrLoad(ctx, "cold", time.Hour, func(context.Context) ([]byte, error) {
				trips = networkCalls(c, cl.addrs[0]) - before
				a1, b1 := server()
				a, b = a1-a0, b1-b0
				return []byte("loaded"), nil
			})
			if err != nil || string(v) != "loaded" {
				t.Fatalf("GetOrLoad = %q, %v", v, err)
			}
			if trips != 1 {
				t.Errorf("%d round trips before the load; want 1", trips)
			}
			if kind == "memcached" && (a != 1 || b != 1) {
				t.Errorf("before the load memcached ran %d gets and %d sets; want 1 mg and 1 add", a, b)
			}
			if kind != "memcached" && (a != 1 || b != 1) {
				t.Errorf("before the load Redis ran %d GET/MGET and %d scripts; want 1 script and its own GET", a, b)
			}
			if s := c.LoadStats(); s.Misses != 2 || s.Hits != 0 || s.Loads != 2 {
				t.Errorf("load stats %+v; want 2 misses, 2 loads", s)
			}
			if v, err := c.GetOrLoad(ctx, "cold", time.Hour, openLoader("again", nil).load); err != nil || string(v) != "loaded" {
				t.Errorf("second GetOrLoad = %q, %v; want the stored value", v, err)
			}
			if s := c.LoadStats(); s.Hits != 1 || s.Misses != 2 {
				t.Errorf("load stats %+v; want the hit counted", s)
			}

			// GetMultiOrLoad: one round trip to the owner before the load,
			// the hit among the keys counted as one.
			before = networkCalls(c, cl.addrs[0])
			got, err := c.GetMultiOrLoad(ctx, []string{"cold", "m1", "m2"}, time.Hour, func(_ context.Context, missing []string) (map[string][]byte, error) {
				trips = networkCalls(c, cl.addrs[0]) - before
				out := map[string][]byte{}
				for _, k := range missing {
					out[k] = []byte("loaded " + k)
				}
				return out, nil
			})
			if err != nil || len(got) != 3 || string(got["cold"]) != "loaded" || string(got["m2"]) != "loaded m2" {
				t.Fatalf("GetMultiOrLoad = %q, %v", got, err)
			}
			if trips != 1 {
				t.Errorf("GetMultiOrLoad: %d round trips before the load; want 1", trips)
			}
			if s := c.LoadStats(); s.Hits != 2 || s.Misses != 4 || s.Loads != 3 {
				t.Errorf("load stats %+v; want 2 hits, 4 misses, 3 loads", s)
			}
		})
	}
}

// serverCalls is serverCommands of the Redis server at addr.
func serverCalls(t *testing.T, addr string, cmds ...string) int {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	return serverCommands(t, rdb, cmds...)
}

func p99(lat []time.Duration) time.Duration { return lat[len(lat)*99/100] }

// TestHerdOnExpiredKey: 500 callers over 3 clients (goroutines standing
// for 3 processes) on a hot key just past its TTL. With leases, exactly
// one load and the herd waits for it; with StaleWhileRevalidate too,
// exactly one (background) load and every caller answered at once, served
// stale: no miss, no wait on a lease (counted; the latencies are logged).
//
// Only the hot key's first value has a short TTL, for the herd to find it
// expired: the herd's loads store theirs for a minute. With the short TTL
// on the herd's stores too, a herd that outlasted it on a busy machine
// expired the fresh value and loaded a second time.
func TestHerdOnExpiredKey(t *testing.T) {
	for _, kind := range []string{"memcached", "redis-server"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 3)
			const callers = 500
			const loadTime = 50 * time.Millisecond
			const long = time.Minute // the TTL of every store but the hot key's first
			// Memcached's TTLs are whole seconds: the soft TTL is 1 s there.
			ttl := time.Second
			if kind != "memcached" {
				ttl = 300 * time.Millisecond
			}
			var loads atomic.Int64
			load := func(context.Context) ([]byte, error) {
				loads.Add(1)
				time.Sleep(loadTime)
				return []byte("fresh"), nil
			}
			for _, swr := range []bool{false, true} {
				// A herd dials up to PoolSize connections at once: on a
				// busy machine one took longer than the 500 ms default.
				opts := Options{Lease: testLease, MetaLeases: true, PoolSize: 64, DialTimeout: 5 * time.Second}
				if swr {
					opts.StaleWhileRevalidate = time.Minute
				}
				clients := make([]*Client, 3)
				for i := range clients {
					clients[i] = cl.client(t, opts)
				}
				key := fmt.Sprintf("hot-%v", swr)
				// A plain hit, measured as the herd is, on a key well within
				// its TTL; a first round dials the pools' connections.
				plain := fmt.Sprintf("plain-%v", swr)
				if _, err := clients[0].GetOrLoad(t.Context(), plain, long, load); err != nil {
					t.Fatal(err)
				}
				herdTTL(t, clients, callers, plain, long, load)
				base := p99(herdTTL(t, clients, callers, plain, long, load))
				if !swr {
					// Without SWR the key is gone at its TTL: a Delete
					// stands for it.
					if _, err := clients[0].GetOrLoad(t.Context(), key, long, load); err != nil {
						t.Fatal(err)
					}
					if err := clients[0].Delete(t.Context(), key); err != nil {
						t.Fatal(err)
					}
				} else {
					if _, err := clients[0].GetOrLoad(t.Context(), key, ttl, load); err != nil {
						t.Fatal(err)
					}
					// Past the soft TTL, within the hard one: time has to
					// pass on the servers' clocks. Memcached's ticks whole
					// seconds, and its R compares whole seconds left.
					past := ttl + 200*time.Millisecond
					if kind == "memcached" {
						past = ttl + 2200*time.Millisecond
					}
					time.Sleep(past)
				}
				loads.Store(0)
				before := sumLoadStats(clients)
				lat := herdTTL(t, clients, callers, key, long, load)
				waitFor(t, "the refresh", func() bool { return loads.Load() >= 1 })
				for _, c := range clients { // the background refresh stored
					c.refreshes.Wait()
				}
				d := sumLoadStats(clients).minus(before)
				t.Logf("%s SWR %v: %d loads, %+v; herd p99 %v, plain hit p99 %v: ratio %.2f",
					kind, swr, loads.Load(), d, p99(lat), base, float64(p99(lat))/float64(base))
				if n := loads.Load(); n != 1 {
					t.Errorf("SWR %v: %d loads, want exactly 1", swr, n)
				}
				// "At once" is counted, not timed (a busy machine stretches
				// any latency): with SWR no caller missed or waited on the
				// refresh's lease. Without it the herd found the key gone
				// (callers a busy machine started late may find the load's
				// value already there: hits).
				if swr && (d.Misses != 0 || d.LeaseWaits != 0 || d.Stale == 0 || d.Hits != callers) {
					t.Errorf("SWR: %+v; want %d hits, stale ones among them, no miss and no wait", d, callers)
				}
				if !swr && (d.Misses == 0 || d.Stale != 0) {
					t.Errorf("without SWR: %+v; want misses, nothing stale", d)
				}
				if !swr && p99(lat) < loadTime {
					t.Errorf("without SWR: herd p99 %v under the load's %v", p99(lat), loadTime)
				}
				if v, err := clients[1].Get(t.Context(), key); swr && (err != nil || string(v) != "fresh") {
					t.Fatalf("after the herd: %q, %v", v, err)
				}
			}
		})
	}
}

// sumLoadStats adds up the clients' LoadStats.
func sumLoadStats(clients []*Client) LoadStats {
	var s LoadStats
	for _, c := range clients {
		s = s.plus(c.LoadStats())
	}
	return s
}

// herdTTL runs callers GetOrLoad calls of key (with ttl) spread over
// clients, all at once, and returns their latencies, sorted.
func herdTTL(t *testing.T, clients []*Client, callers int, key string, ttl time.Duration, load func(context.Context) ([]byte, error)) []time.Duration {
	t.Helper()
	lat := make([]time.Duration, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		c := clients[i%len(clients)]
		wg.Go(func() {
			<-start
			t0 := time.Now()
			v, err := c.GetOrLoad(t.Context(), key, ttl, load)
			lat[i] = time.Since(t0)
			if err != nil || len(v) == 0 {
				t.Errorf("caller %d: %q, %v", i, v, err)
			}
		})
	}
	close(start)
	wg.Wait()
	slices.Sort(lat)
	return lat
}

// TestRefreshDeleteDuringLoad: a Delete while a background refresh loads
// makes its store fail, so the key stays deleted; EarlyRefresh refreshes a
// value before its TTL, once, and answers at once meanwhile.
func TestRefreshDeleteDuringLoad(t *testing.T) {
	for _, kind := range []string{"memcached", "redis-server", "miniredis"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 1)
			ctx := t.Context()
			// Memcached's R compares whole seconds: a window of a minute
			// covers a value of a minute's TTL within the second.
			c := cl.client(t, Options{Lease: testLease, EarlyRefresh: time.Minute})
			other := cl.client(t, Options{EarlyRefresh: time.Minute}) // its Delete clears the refresh's lease without Lease
			if err := c.Set(ctx, "k", []byte("old"), 59*time.Second); err != nil {
				t.Fatal(err)
			}
			l := newLoader("new", nil)
			v, err := c.GetOrLoad(ctx, "k", time.Hour, l.load)
			if err != nil || string(v) != "old" {
				t.Fatalf("GetOrLoad in the window = %q, %v; want the value at once", v, err)
			}
			<-l.entered
			if v, err := c.GetOrLoad(ctx, "k", time.Hour, l.load); err != nil || string(v) != "old" {
				t.Fatalf("GetOrLoad during the refresh = %q, %v", v, err)
			}
			if err := other.Delete(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			close(l.release)
			c.refreshes.Wait()
			mustMiss(t, c, "k")
			if s := c.LoadStats(); s.Refreshes != 1 || s.LeasesLost != 1 || s.Stale != 2 || l.calls.Load() != 1 {
				t.Fatalf("LoadStats = %+v, %d loads; want one refresh, its lease lost", s, l.calls.Load())
			}
			// Without a Delete the refresh lands, and the next read is fresh.
			if err := c.Set(ctx, "k", []byte("old"), 59*time.Second); err != nil {
				t.Fatal(err)
			}
			if v, err := c.GetOrLoad(ctx, "k", time.Hour, openLoader("new", nil).load); err != nil || string(v) != "old" {
				t.Fatalf("GetOrLoad in the window = %q, %v", v, err)
			}
			c.refreshes.Wait()
			mustGet(t, other, "k", "new")
		})
	}
}

// plus and minus add and subtract LoadStats field by field.
func (s LoadStats) plus(o LoadStats) LoadStats  { return combineLoadStats(s, o, 1) }
func (s LoadStats) minus(o LoadStats) LoadStats { return combineLoadStats(s, o, -1) }

func combineLoadStats(a, b LoadStats, sign int64) LoadStats {
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(b)
	for i := range va.NumField() {
		va.Field(i).SetInt(va.Field(i).Int() + sign*vb.Field(i).Int())
	}
	return a
}
