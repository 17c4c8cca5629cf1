package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/backfill"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// fakeClock is the clock tests inject through Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// reshardCase is one change of nodes, as indices into a cluster of 8 servers.
type reshardCase struct {
	name     string
	from, to func(cl *cluster) []ring.Node
}

func reshardCases() []reshardCase {
	first := func(n int) []int {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	return []reshardCase{
		{"8to6", func(cl *cluster) []ring.Node { return cl.nodes(first(8)...) },
			func(cl *cluster) []ring.Node { return cl.nodes(first(6)...) }},
		{"6to8", func(cl *cluster) []ring.Node { return cl.nodes(first(6)...) },
			func(cl *cluster) []ring.Node { return cl.nodes(first(8)...) }},
		{"reweight", func(cl *cluster) []ring.Node { return cl.nodes(first(6)...) },
			func(cl *cluster) []ring.Node {
				ns := cl.nodes(first(6)...)
				ns[0].Weight, ns[1].Weight = 3, 2
				return ns
			}},
	}
}

func mustRing(t testing.TB, nodes []ring.Node) *ring.Ring {
	t.Helper()
	r, err := ring.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// countMoved returns how many of keys change owner from one placement to
// the other.
func countMoved(t testing.TB, keys []string, from, to []ring.Node) int {
	t.Helper()
	oldRing, newRing := mustRing(t, from), mustRing(t, to)
	moved := 0
	for _, k := range keys {
		if oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			moved++
		}
	}
	return moved
}

func numberedKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:key:%d", prefix, i)
	}
	return keys
}

func setAll(t testing.TB, c *Client, keys []string, ttl time.Duration) {
	t.Helper()
	for chunk := range slices.Chunk(keys, 500) {
		items := make(map[string][]byte, len(chunk))
		for _, k := range chunk {
			items[k] = []byte("v:" + k)
		}
		if err := c.SetMulti(context.Background(), items, ttl); err != nil {
			t.Fatalf("SetMulti: %v", err)
		}
	}
}

// TestReshardKeepsEveryKey is the point of the dual ring: right after a
// resharding every key written before it is still readable, the keys that
// moved are copied to their new owner on first read, and the next read is
// served by the new owner. Of 2,000 keys about 500 move in each case, and
// every count is checked exactly. The clusters run side by side: each has
// its servers, its client and a fake clock, and the calls wait on round
// trips more than on the CPU.
func TestReshardKeepsEveryKey(t *testing.T) {
	forEachCluster(t, 8, func(t *testing.T, cl *cluster) {
		t.Parallel()
		for _, rc := range reshardCases() {
			t.Run(rc.name, func(t *testing.T) {
				ctx := context.Background()
				clock := newFakeClock()
				from, to := rc.from(cl), rc.to(cl)
				// The cases share the cluster: 6to8 adds back the nodes
				// 8to6 left, holding its keys (of other names).
				c := cl.client(t, Options{Nodes: from, Now: clock.Now, SkipEmptyCheck: true})
				keys := numberedKeys(cl.kind+rc.name, 2000)
				setAll(t, c, keys, time.Hour)
				clock.Advance(time.Minute)

				if err := c.Reshard(to, time.Hour); err != nil {
					t.Fatal(err)
				}
				oldRing, newRing := mustRing(t, from), mustRing(t, to)
				var moved []string
				for _, k := range keys {
					if oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
						moved = append(moved, k)
					}
				}
				st := c.Migration()
				if !st.Active || st.Moved != ring.Moved(oldRing, newRing) || !st.End.Equal(clock.Now().Add(time.Hour)) {
					t.Fatalf("status after Reshard: %+v", st)
				}
				t.Logf("%s: %d of %d keys moved (exact fraction %.3f)", rc.name, len(moved), len(keys), st.Moved)

				// First read: half one by one, half in bulk; every key hits.
				half := len(keys) / 2
				for _, k := range keys[:half] {
					v, err := c.Get(ctx, k)
					if err != nil || string(v) != "v:"+k {
						t.Fatalf("Get(%q) right after the reshard = %q, %v", k, v, err)
					}
				}
				for chunk := range slices.Chunk(keys[half:], 500) {
					hits, err := c.GetMulti(ctx, chunk)
					if err != nil || len(hits) != len(chunk) {
						t.Fatalf("GetMulti right after the reshard: %d of %d hits, %v", len(hits), len(chunk), err)
					}
				}
				st = c.Migration()
				if st.FallbackHits != int64(len(moved)) || st.Backfills != int64(len(moved)) ||
					st.NewHits != int64(len(keys)-len(moved)) || st.FallbackMisses != 0 || st.BackfillsSkipped != 0 {
					t.Fatalf("after the first read of %d keys, %d moved: %+v", len(keys), len(moved), st)
				}
				for _, k := range moved[:min(len(moved), 300)] {
					if h := cl.holders(t, k); !slices.Contains(h, newRing.Locate(k).Addr) {
						t.Fatalf("moved key %q not backfilled to its new owner: held by %v", k, h)
					}
				}

				// Second read: the new owners answer everything.
				for chunk := range slices.Chunk(keys, 500) {
					if hits, err := c.GetMulti(ctx, chunk); err != nil || len(hits) != len(chunk) {
						t.Fatalf("second read: %d of %d hits, %v", len(hits), len(chunk), err)
					}
				}
				st2 := c.Migration()
				if st2.FallbackHits != st.FallbackHits || st2.NewHits != st.NewHits+int64(len(keys)) {
					t.Fatalf("second read was not served by the new owners: %+v", st2)
				}
			})
		}
	})
}

// eightToSix opens a client with a fake clock on the cluster's 8 nodes, and
// returns it with the nodes before and after retiring the last two.
func eightToSix(t *testing.T, cl *cluster) (clock *fakeClock, from, to []ring.Node, c *Client) {
	clock = newFakeClock()
	from, to = cl.nodes(0, 1, 2, 3, 4, 5, 6, 7), cl.nodes(0, 1, 2, 3, 4, 5)
	return clock, from, to, cl.client(t, Options{Nodes: from, Now: clock.Now})
}

// dualKeys returns n keys whose owner differs between from and to.
func dualKeys(t testing.TB, prefix string, from, to []ring.Node, n int) []string {
	oldRing, newRing := mustRing(t, from), mustRing(t, to)
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s:%d", prefix, i)
		if oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestWindowWritesAndDeletes checks that during the window writes reach both
// owners, and a delete removes the key from both so no later read brings a
// stale value back.
func TestWindowWritesAndDeletes(t *testing.T) {
	forEachCluster(t, 8, func(t *testing.T, cl *cluster) {
		ctx := context.Background()
		_, from, to, c := eightToSix(t, cl)
		keys := dualKeys(t, cl.kind, from, to, 40)
		setAll(t, c, keys, time.Hour) // written before: only on the old owners
		if err := c.Reshard(to, time.Hour); err != nil {
			t.Fatal(err)
		}
		oldRing, newRing := mustRing(t, from), mustRing(t, to)
		both := func(k string) []string {
			return []string{oldRing.Locate(k).Addr, newRing.Locate(k).Addr}
		}
		holdsEqual := func(k, want string) {
			t.Helper()
			for _, a := range both(k) {
				v, err := cl.raw(a).get(k)
				if err != nil || string(v) != want {
					t.Fatalf("%s on %s = %q, %v; want %q", k, a, v, err, want)
				}
			}
		}

		if err := c.Set(ctx, keys[0], []byte("new"), time.Hour); err != nil {
			t.Fatal(err)
		}
		holdsEqual(keys[0], "new")
		if err := c.SetMulti(ctx, map[string][]byte{keys[1]: []byte("m1"), keys[2]: []byte("m2")}, time.Hour); err != nil {
			t.Fatal(err)
		}
		holdsEqual(keys[1], "m1")
		holdsEqual(keys[2], "m2")

		// Add: a key still only on its old owner counts as present.
		if err := c.Add(ctx, keys[3], []byte("x"), time.Hour); !errors.Is(err, ErrNotStored) {
			t.Fatalf("Add of a key present on its old owner: %v, want ErrNotStored", err)
		}
		fresh := dualKeys(t, cl.kind+":fresh", from, to, 1)[0]
		if err := c.Add(ctx, fresh, []byte("added"), time.Hour); err != nil {
			t.Fatal(err)
		}
		holdsEqual(fresh, "added")

		// Incr: the counter moves to the new owner and continues from the
		// old value; the old copy is dropped so it cannot drift.
		counter := dualKeys(t, cl.kind+":counter", from, to, 1)[0]
		if err := cl.raw0(t, oldRing.Locate(counter).Addr).set(counter, "40"); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Incr(ctx, counter, 2); err != nil || n != 42 {
			t.Fatalf("Incr of a counter on its old owner = %d, %v; want 42", n, err)
		}
		if _, err := cl.raw(oldRing.Locate(counter).Addr).get(counter); err != ErrCacheMiss {
			t.Fatalf("old copy of the counter after Incr: %v, want a miss", err)
		}

		// Touch reaches a key only the old owner had.
		if err := c.Touch(ctx, keys[4], 2*time.Hour); err != nil {
			t.Fatalf("Touch of a key on its old owner: %v", err)
		}
		holdsEqual(keys[4], "v:"+keys[4])

		// Deletes reach both owners; later reads miss.
		if err := c.Delete(ctx, keys[5]); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteMulti(ctx, keys[6:10]); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys[5:10] {
			if h := cl.holders(t, k); len(h) != 0 {
				t.Fatalf("deleted %q still on %v", k, h)
			}
			if v, err := c.Get(ctx, k); err != ErrCacheMiss {
				t.Fatalf("Get of deleted %q = %q, %v: resurrected", k, v, err)
			}
		}
		if hits, _ := c.GetMulti(ctx, keys[5:10]); len(hits) != 0 {
			t.Fatalf("GetMulti resurrected deleted keys: %v", hits)
		}
		st := c.Migration()
		if st.DualWrites < 5 || st.DualDeletes != 5 || st.DualWriteErrors != 0 {
			t.Fatalf("dual writes/deletes not counted: %+v", st)
		}
	})
}

// raw0 returns a writer for one server, for planting values.
func (c *cluster) raw0(t testing.TB, addr string) interface{ set(k, v string) error } {
	t.Helper()
	if c.backend == Memcached {
		return rawMemcacheSet{c.raw(addr).(rawMemcache)}
	}
	return rawRedisSet{c.raw(addr).(rawRedis)}
}

type rawRedisSet struct{ rawRedis }

func (r rawRedisSet) set(k, v string) error { return r.rdb.Set(context.Background(), k, v, 0).Err() }

type rawMemcacheSet struct{ rawMemcache }

func (r rawMemcacheSet) set(k, v string) error {
	return r.mc.Set(&memcache.Item{Key: k, Value: []byte(v)})
}

// TestBackfillNeverOverwritesNewerValue races a write against a backfill: a
// newer value lands on the new owner between the read's miss and its copy.
// The copy must not overwrite it, and the read returns the newer value.
func TestBackfillNeverOverwritesNewerValue(t *testing.T) {
	for _, kind := range []string{"miniredis", "redis-server"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 8)
			from, to := cl.nodes(0, 1, 2, 3, 4, 5, 6, 7), cl.nodes(0, 1, 2, 3, 4, 5)
			key := dualKeys(t, kind, from, to, 1)[0]
			newOwner := mustRing(t, to).Locate(key).Addr
			writer := redis.NewClient(&redis.Options{Addr: newOwner})
			defer writer.Close()
			c := cl.client(t, Options{Nodes: from, NewRedisClient: func(n ring.Node, opt *redis.Options) *redis.Client {
				rdb := redis.NewClient(opt)
				if n.Addr == newOwner {
					rdb.AddHook(raceHook{key: key, writer: writer})
				}
				return rdb
			}})
			ctx := context.Background()
			if err := c.Set(ctx, key, []byte("old"), time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := c.Reshard(to, time.Hour); err != nil {
				t.Fatal(err)
			}
			v, err := c.Get(ctx, key)
			if err != nil || string(v) != "newer" {
				t.Fatalf("Get = %q, %v; want the newer value", v, err)
			}
			if got, _ := writer.Get(ctx, key).Result(); got != "newer" {
				t.Fatalf("new owner holds %q: the backfill overwrote the newer value", got)
			}
			if st := c.Migration(); st.BackfillsSkipped != 1 || st.Backfills != 0 {
				t.Fatalf("status: %+v, want one skipped backfill", st)
			}
		})
	}
	t.Run("memcached", func(t *testing.T) {
		cl := newCluster(t, "memcached", 2)
		c := cl.client(t, Options{Nodes: cl.nodes(0)})
		if err := c.Reshard(cl.nodes(1), time.Hour); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// The newer write lands first; then the copy of the old value comes.
		if err := cl.raw0(t, cl.addrs[1]).set("k", "newer"); err != nil {
			t.Fatal(err)
		}
		st := c.state.Load()
		stored, _ := backfill.Write(ctx, st.mig.Counters, st.conn(cl.nodes(1)[0]), []item{{Key: "k", Value: []byte("old"), TTL: time.Hour}}, false, false)
		if stored[0] {
			t.Fatal("backfill reported storing over a newer value")
		}
		if v, _ := cl.raw(cl.addrs[1]).get("k"); string(v) != "newer" {
			t.Fatalf("new owner holds %q after the backfill, want newer", v)
		}
	})
}

// raceHook writes "newer" under key through writer right after the new
// owner answers a GET of key with a miss: the window a concurrent write can
// hit between the read's miss and its backfill.
type raceHook struct {
	key    string
	writer *redis.Client
}

func (raceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h raceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "get" && err == redis.Nil && cmd.Args()[1] == h.key {
			h.writer.Set(ctx, h.key, "newer", time.Hour)
		}
		return err
	}
}

func (raceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestWindowEnd checks that when the window has passed the old placement is
// dropped with no call: removed nodes get no traffic and their pools close,
// while nodes of both placements keep theirs.
func TestWindowEnd(t *testing.T) {
	forEachCluster(t, 8, func(t *testing.T, cl *cluster) {
		ctx := context.Background()
		clock, from, to, c := eightToSix(t, cl)
		c.grace = 0 // the pools close at once; TestWindowEndGrace tests the grace period
		keys := numberedKeys(cl.kind, 2000)
		setAll(t, c, keys, 0)
		if err := c.Reshard(to, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		if got := len(c.pools.Addrs()); got != 8 {
			t.Fatalf("%d pools open during the window, want 8", got)
		}
		if err := c.Reshard(from, time.Minute); !errors.Is(err, ErrMigrationActive) {
			t.Fatalf("Reshard during the window: %v, want ErrMigrationActive", err)
		}
		clock.Advance(10 * time.Minute)
		cl.stop(6)
		cl.stop(7)
		before := c.Migration()
		if before.Active {
			t.Fatalf("migration still active after its window: %+v", before)
		}
		hits, err := c.GetMulti(ctx, keys)
		if err != nil {
			t.Fatalf("GetMulti after the window touched a removed node: %v", err)
		}
		for _, k := range keys {
			_, err := c.Get(ctx, k)
			if err != nil && err != ErrCacheMiss {
				t.Fatalf("Get(%q) after the window: %v", k, err)
			}
			if err := c.Set(ctx, k, []byte("x"), time.Minute); err != nil {
				t.Fatalf("Set(%q) after the window: %v", k, err)
			}
		}
		after := c.Migration()
		if after.FallbackHits+after.FallbackErrors+after.DualWrites != before.FallbackHits+before.FallbackErrors+before.DualWrites {
			t.Fatalf("traffic to old owners after the window: before %+v after %+v", before, after)
		}
		moved := ring.Moved(mustRing(t, from), mustRing(t, to))
		if frac := 1 - float64(len(hits))/float64(len(keys)); frac < moved-0.05 || frac > moved+0.05 {
			t.Errorf("after the window %.3f of never-read keys miss, want about the moved fraction %.3f", frac, moved)
		}
		open := c.pools.Addrs()
		slices.Sort(open)
		want := cl.addrs[:6]
		slices.Sort(want)
		if !slices.Equal(open, want) {
			t.Fatalf("pools open after the window: %v, want the 6 kept nodes %v", open, want)
		}
		// Nodes 6 and 7 are stopped: adding them back is refused, as
		// whether they hold old keys cannot be read.
		var ne *NodeError
		if err := c.Reshard(from, time.Minute); !errors.As(err, &ne) || ne.Op != "check_empty" {
			t.Fatalf("Reshard adding back stopped nodes: %v, want their check_empty NodeError", err)
		}
		if err := c.Reshard(to[:5], time.Minute); err != nil {
			t.Fatalf("Reshard after the window: %v", err)
		}
	})
}

// TestWindowEndsWithoutTraffic checks that the timer drops the old placement
// when no operation comes to notice the end of the window.
func TestWindowEndsWithoutTraffic(t *testing.T) {
	cl := newCluster(t, "miniredis", 3)
	// Short timeouts, for a short grace period before the pool closes.
	c := cl.client(t, Options{Nodes: cl.nodes(0, 1, 2), DialTimeout: 50 * time.Millisecond,
		ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
	if err := c.Reshard(cl.nodes(0, 1), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.pools.Addrs()) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("removed node's pool still open 5s after a 50ms window: %v", c.pools.Addrs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMigrateFromResumesWindow checks that a process started mid-window with
// MigrateFrom behaves as the one that resharded, and one started after the
// window does not migrate.
func TestMigrateFromResumesWindow(t *testing.T) {
	forEachCluster(t, 8, func(t *testing.T, cl *cluster) {
		ctx := context.Background()
		clock := newFakeClock()
		from, to := cl.nodes(0, 1, 2, 3, 4, 5, 6, 7), cl.nodes(0, 1, 2, 3, 4, 5)
		writer := cl.client(t, Options{Nodes: from, Now: clock.Now})
		keys := numberedKeys(cl.kind, 3000)
		setAll(t, writer, keys, time.Hour)
		start := clock.Now()
		clock.Advance(20 * time.Minute)

		c := cl.client(t, Options{Nodes: to, Now: clock.Now,
			MigrateFrom: &MigrateFrom{Nodes: from, Start: start, Window: time.Hour}})
		st := c.Migration()
		if !st.Active || !st.Start.Equal(start) || !st.End.Equal(start.Add(time.Hour)) {
			t.Fatalf("status of a resumed migration: %+v", st)
		}
		for chunk := range slices.Chunk(keys, 1000) {
			if hits, err := c.GetMulti(ctx, chunk); err != nil || len(hits) != len(chunk) {
				t.Fatalf("resumed migration: %d of %d hits, %v", len(hits), len(chunk), err)
			}
		}
		if st := c.Migration(); st.FallbackHits == 0 || st.Backfills != st.FallbackHits {
			t.Fatalf("resumed migration did not fall back and backfill: %+v", st)
		}

		clock.Advance(time.Hour)
		late := cl.client(t, Options{Nodes: to, Now: clock.Now,
			MigrateFrom: &MigrateFrom{Nodes: from, Start: start, Window: time.Hour}})
		if st := late.Migration(); st.Active || len(late.pools.Addrs()) != 6 {
			t.Fatalf("client started after the window migrates: %+v, pools %v", st, late.pools.Addrs())
		}
	})
}

func TestReshardErrors(t *testing.T) {
	cl := newCluster(t, "miniredis", 3)
	c := cl.client(t, Options{Nodes: cl.nodes(0, 1)})
	c.grace = 0 // pools close at once
	if err := c.Reshard(cl.nodes(0, 1, 2), -time.Second); !errors.Is(err, migration.ErrBadWindow) {
		t.Errorf("negative window: %v", err)
	}
	if err := c.Reshard(nil, time.Minute); !errors.Is(err, ring.ErrNoNodes) {
		t.Errorf("no nodes: %v", err)
	}
	dup := cl.nodes(0, 1)
	dup[1].Name = dup[0].Name
	if err := c.Reshard(dup, time.Minute); !errors.Is(err, ring.ErrDuplicateName) {
		t.Errorf("duplicate names: %v", err)
	}
	if got := len(c.pools.Addrs()); got != 2 {
		t.Errorf("failed reshards left %d pools open, want 2", got)
	}
	// A zero window switches at once.
	if err := c.Reshard(cl.nodes(2), 0); err != nil {
		t.Fatal(err)
	}
	if st := c.Migration(); st.Active || c.Locate("any").Addr != cl.addrs[2] || len(c.pools.Addrs()) != 1 {
		t.Errorf("zero-window reshard: %+v, pools %v", st, c.pools.Addrs())
	}
	c.Close()
	if err := c.Reshard(cl.nodes(0), time.Minute); !errors.Is(err, ErrClosed) {
		t.Errorf("Reshard after Close: %v", err)
	}
}

// TestReshardUnderLoad reshards and ends windows while goroutines read and
// write; run with -race. No operation may fail but with a miss.
func TestReshardUnderLoad(t *testing.T) {
	cl := newCluster(t, "miniredis", 8)
	clock := newFakeClock()
	// Nodes leave and come back holding keys, again and again.
	c := cl.client(t, Options{Nodes: cl.nodes(0, 1, 2, 3, 4, 5, 6, 7), Now: clock.Now, SkipEmptyCheck: true})
	c.grace = 100 * time.Millisecond // retired nodes close soon after each window
	keys := numberedKeys("load", 500)
	setAll(t, c, keys, 0)
	ctx := context.Background()
	var stop atomic.Bool
	var ops atomic.Int64
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; !stop.Load(); i++ {
				k := keys[i%len(keys)]
				var err error
				switch i % 4 {
				case 0:
					_, err = c.Get(ctx, k)
				case 1:
					err = c.Set(ctx, k, []byte("v"), 0)
				case 2:
					_, err = c.GetMulti(ctx, keys[i%400:i%400+50])
				case 3:
					_, err = c.Incr(ctx, k+":n", 1)
				}
				if err != nil && err != ErrCacheMiss {
					errs <- err
					return
				}
				ops.Add(1)
			}
		}()
	}
	// await waits until the workers have done n more operations, or one
	// has failed.
	const perPhase = 200
	await := func(what string) {
		t.Helper()
		target := ops.Load() + perPhase
		for start := time.Now(); ops.Load() < target; time.Sleep(time.Millisecond) {
			if len(errs) > 0 || time.Since(start) > 30*time.Second {
				stop.Store(true)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatalf("operation failed during resharding: %v", err)
				}
				t.Fatalf("%s: %d operations in 30s; want %d more", what, ops.Load(), perPhase)
			}
		}
	}
	layouts := [][]int{{0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 6, 7}, {2, 3, 4, 5, 6, 7}, {0, 1, 2, 3}}
	var fallbacks int64
	for _, l := range layouts {
		if err := c.Reshard(cl.nodes(l...), time.Minute); err != nil {
			t.Fatal(err)
		}
		await(fmt.Sprintf("window to %v", l))
		clock.Advance(time.Minute)
		st := c.Migration()
		fallbacks += st.FallbackHits + st.FallbackMisses
		await(fmt.Sprintf("after the window to %v", l))
		if c.Migration().Active {
			t.Fatalf("window to %v still active after it ended", l)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("operation failed during resharding: %v", err)
	}
	t.Logf("%d operations across %d reshardings, %d fallback reads", ops.Load(), len(layouts), fallbacks)
	if n := ops.Load(); n < int64(2*perPhase*len(layouts)) {
		t.Fatalf("%d operations; want at least %d", n, 2*perPhase*len(layouts))
	}
	if fallbacks == 0 {
		t.Fatal("no read fell back to an old owner: the windows saw no traffic")
	}
	// The pools of the last layout's nodes alone stay open, once the grace
	// period of the retired ones has passed.
	want := cl.addrs[:4]
	slices.Sort(want)
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		open := c.pools.Addrs()
		slices.Sort(open)
		if slices.Equal(open, want) {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("pools open after the last window: %v; want those of nodes 0-3 %v", open, want)
		}
	}
}

// TestAsyncBackfill checks that asynchronous backfills are written by the
// worker, and dropped and counted when the queue is full, which is logged
// once.
func TestAsyncBackfill(t *testing.T) {
	cl := newCluster(t, "miniredis", 2)
	release := make(chan struct{})
	entered := make(chan struct{}, 16)
	armed := new(atomic.Bool)
	rec := &logRecorder{}
	c := cl.client(t, Options{Nodes: cl.nodes(0), AsyncBackfill: true, BackfillQueue: 1, Logger: slog.New(rec),
		NewRedisClient: func(n ring.Node, opt *redis.Options) *redis.Client {
			rdb := redis.NewClient(opt)
			rdb.AddHook(blockBackfills{armed, entered, release})
			return rdb
		}})
	ctx := context.Background()
	keys := numberedKeys("async", 4)
	setAll(t, c, keys, time.Hour)
	if err := c.Reshard(cl.nodes(1), time.Hour); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	// Bulk fallback reads are pipelines too: read one by one instead.
	for i, k := range keys {
		if v, err := c.Get(ctx, k); err != nil || string(v) != "v:"+k {
			t.Fatalf("Get(%q) = %q, %v", k, v, err)
		}
		if i == 0 {
			<-entered // the worker is now stuck in its first backfill
		}
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := c.Migration()
		if st.Backfills+st.BackfillsDropped == 4 {
			if st.Backfills != 2 || st.BackfillsDropped != 2 {
				t.Fatalf("queue of 1 with the worker busy: %+v, want 2 written and 2 dropped", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backfills not done: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if h := cl.holders(t, keys[0]); !slices.Contains(h, cl.addrs[1]) {
		t.Fatalf("async backfill did not reach the new owner: %v", h)
	}
	if full := rec.find("backfill queue full"); len(full) != 1 || full[0].attrs["node"] != "n1" || full[0].attrs["addr"] != cl.addrs[1] {
		t.Fatalf("queue full lines %+v; want one, for n1 at %s", full, cl.addrs[1])
	}
}

// blockBackfills holds every script (a backfill's copy) once armed,
// until release.
type blockBackfills struct {
	armed   *atomic.Bool
	entered chan<- struct{}
	release <-chan struct{}
}

func (blockBackfills) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b blockBackfills) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); b.armed.Load() && (name == "evalsha" || name == "eval") {
			b.entered <- struct{}{}
			<-b.release
		}
		return next(ctx, cmd)
	}
}

func (blockBackfills) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
