package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/ring"
)

// sweepKinds are the real servers the sweep runs against.
var sweepKinds = []string{"redis-server", "memcached"}

// kept is what a key must read back as after the migration.
type kept struct {
	kind    string        // "string", "counter", "hash", "list", "flags" (Memcached flags)
	value   string        // a string's value; a counter's, in decimal
	ttl     time.Duration // as written; 0: no expiry
	written [2]time.Time  // the write happened between these
	counter int64
}

// writeSweepData writes the 10,000 keys through c: 6,000 strings
// with TTLs from 1 minute to 1 day, 2,000 without expiry, 1,000 counters,
// and on Redis 500 hashes and 500 lists (half of each with a TTL), on
// Memcached 1,000 strings with flags instead.
func writeSweepData(t *testing.T, c *Client, prefix string) map[string]*kept {
	t.Helper()
	ctx := t.Context()
	data := map[string]*kept{}
	stamp := func(keys []string, write func()) {
		t0 := time.Now()
		write()
		t1 := time.Now()
		for _, k := range keys {
			data[k].written = [2]time.Time{t0, t1}
		}
	}
	for chunk := range slices.Chunk(numberedKeys(prefix+":ttl", 6000), 500) {
		items := map[string][]byte{}
		for _, k := range chunk {
			i, _ := strconv.Atoi(k[len(prefix)+9:])
			// Whole seconds, from 1 minute to 1 day: Memcached counts seconds.
			ttl := time.Minute + time.Duration(i)*(24*time.Hour-time.Minute)/6000/time.Second*time.Second
			data[k] = &kept{kind: "string", value: "v:" + k, ttl: ttl}
			items[k] = []byte(data[k].value)
		}
		stamp(chunk, func() {
			for k, v := range items { // one TTL per key
				if err := c.Set(ctx, k, v, data[k].ttl); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	// Keys the text protocols and URL-encoding must carry unchanged.
	forever := append(numberedKeys(prefix+":forever", 1998), prefix+":odd%41+ü", prefix+":odd%%")
	for chunk := range slices.Chunk(forever, 500) {
		items := map[string][]byte{}
		for _, k := range chunk {
			data[k] = &kept{kind: "string", value: "forever:" + k}
			items[k] = []byte(data[k].value)
		}
		stamp(chunk, func() {
			if err := c.SetMulti(ctx, items, 0); err != nil {
				t.Fatal(err)
			}
		})
	}
	for i, k := range numberedKeys(prefix+":counter", 1000) {
		data[k] = &kept{kind: "counter", counter: int64(41 + i)}
		stamp([]string{k}, func() {
			if v, err := c.Incr(ctx, k, int64(41+i)); err != nil || v != int64(41+i) {
				t.Fatalf("Incr(%q) = %d, %v", k, v, err)
			}
		})
	}
	for i, k := range numberedKeys(prefix+":other", 1000) {
		ttl := time.Duration(0)
		if i%2 == 0 {
			ttl = time.Duration(60+i) * time.Second
		}
		data[k] = &kept{ttl: ttl, value: "x:" + k}
		stamp([]string{k}, func() {
			var err error
			switch {
			case c.opts.Backend == Memcached:
				data[k].kind = "flags"
				err = c.Store(ctx, StoreSet, Item{Key: k, Value: []byte(data[k].value), Flags: uint32(1000 + i), TTL: ttl})
			case i < 500:
				data[k].kind = "hash"
				err = c.Redis(k).HSet(ctx, k, "f", data[k].value, "g", "2").Err()
			default:
				data[k].kind = "list"
				err = c.Redis(k).RPush(ctx, k, "a", data[k].value, "c").Err()
			}
			if err == nil && ttl > 0 && c.opts.Backend == Redis {
				err = c.Redis(k).Expire(ctx, k, ttl).Err()
			}
			if err != nil {
				t.Fatalf("writing %q: %v", k, err)
			}
		})
	}
	return data
}

// readBack is one key as its node holds it.
type readBack struct {
	found bool
	typ   string
	value string
	flags uint32
	ttl   time.Duration // 0: no expiry
}

// readOwners reads every key of data from the node that owns it in c's
// current placement, directly: Redis TYPE, PTTL and the value by type;
// Memcached mg.
func readOwners(t *testing.T, c *Client, data map[string]*kept) map[string]readBack {
	t.Helper()
	ctx := t.Context()
	st := c.state.Load()
	byNode := map[string][]string{}
	for k := range data {
		a := st.placement.Locate(k).Addr
		byNode[a] = append(byNode[a], k)
	}
	got := map[string]readBack{}
	for addr, keys := range byNode {
		for chunk := range slices.Chunk(keys, 200) {
			switch c.opts.Backend {
			case Memcached:
				items := metaGet(t, addr, chunk)
				for _, it := range items {
					got[it.Key] = readBack{found: it.Found, typ: "string", value: string(it.Value), flags: it.Flags, ttl: it.TTL}
				}
			default:
				n := redis.NewClient(&redis.Options{Addr: addr})
				defer n.Close()
				types := make([]*redis.StatusCmd, len(chunk))
				ttls := make([]*redis.DurationCmd, len(chunk))
				vals := make([]redis.Cmder, len(chunk))
				_, err := n.Pipelined(ctx, func(p redis.Pipeliner) error {
					for i, k := range chunk {
						types[i], ttls[i] = p.Type(ctx, k), p.PTTL(ctx, k)
						switch data[k].kind {
						case "hash":
							vals[i] = p.HGetAll(ctx, k)
						case "list":
							vals[i] = p.LRange(ctx, k, 0, -1)
						default:
							vals[i] = p.Get(ctx, k)
						}
					}
					return nil
				})
				if err != nil && err != redis.Nil {
					t.Fatalf("reading %s: %v", addr, err)
				}
				for i, k := range chunk {
					rb := readBack{typ: types[i].Val(), found: types[i].Val() != "none"}
					if d := ttls[i].Val(); d > 0 {
						rb.ttl = d
					}
					switch v := vals[i].(type) {
					case *redis.MapStringStringCmd:
						rb.value = v.Val()["f"] + "," + v.Val()["g"]
					case *redis.StringSliceCmd:
						rb.value = fmt.Sprint(v.Val())
					case *redis.StringCmd:
						rb.value = v.Val()
					}
					got[k] = rb
				}
			}
		}
	}
	return got
}

// metaGet reads keys' values, flags and remaining TTLs from the memcached
// at addr with the meta command mg, on a connection of its own.
func metaGet(t *testing.T, addr string, keys []string) []item {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	w := bufio.NewWriter(conn)
	for _, k := range keys {
		fmt.Fprintf(w, "mg %s v f t\r\n", k)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	items := make([]item, len(keys))
	for i, k := range keys {
		items[i].Key = k
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(l)
		if len(f) == 1 && f[0] == "EN" {
			continue
		}
		if len(f) < 2 || f[0] != "VA" {
			t.Fatalf("mg %s: %q", k, l)
		}
		size, _ := strconv.Atoi(f[1])
		for _, fl := range f[2:] {
			v, _ := strconv.ParseInt(fl[1:], 10, 64)
			switch fl[0] {
			case 'f':
				items[i].Flags = uint32(v)
			case 't':
				if v > 0 {
					items[i].TTL = time.Duration(v) * time.Second
				}
			}
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
		items[i].Value, items[i].Found = buf[:size], true
	}
	return items
}

// checkKept fails the test for every key that did not survive as written:
// its value, its type, and its remaining TTL within ±1s (none for keys
// without expiry).
func checkKept(t *testing.T, c *Client, data map[string]*kept) {
	t.Helper()
	checked := [2]time.Time{time.Now()}
	got := readOwners(t, c, data)
	checked[1] = time.Now()
	bad := 0
	for k, want := range data {
		g := got[k]
		wantValue, wantType := want.value, want.kind
		switch want.kind {
		case "counter":
			wantValue, wantType = strconv.FormatInt(want.counter, 10), "string"
		case "hash":
			wantValue = want.value + ",2"
		case "list":
			wantValue = fmt.Sprint([]string{"a", want.value, "c"})
		case "flags":
			wantType = "string"
		}
		problem := ""
		switch {
		case !g.found:
			problem = "missing"
		case g.typ != wantType || g.value != wantValue:
			problem = fmt.Sprintf("%s %q, want %s %q", g.typ, g.value, wantType, wantValue)
		case want.kind == "flags" && g.flags < 1000:
			problem = fmt.Sprintf("flags %d lost", g.flags)
		case want.ttl == 0 && g.ttl != 0:
			problem = fmt.Sprintf("gained a TTL: %v", g.ttl)
		case want.ttl != 0:
			// Remaining: ttl less the time since the write, which lies
			// between these bounds; the copy may be 1s off either way.
			// Memcached's TTLs run on its own clock of whole seconds, which
			// a loaded machine makes lag: a key it never copied can read a
			// second off too, so it gets that second more.
			slack := time.Second
			if c.opts.Backend == Memcached {
				slack += time.Second
			}
			lo := want.ttl - checked[1].Sub(want.written[0]) - slack
			hi := want.ttl - checked[0].Sub(want.written[1]) + slack
			if g.ttl < lo || g.ttl > hi {
				problem = fmt.Sprintf("TTL %v, want %v to %v", g.ttl, lo, hi)
			}
		}
		if problem != "" {
			if bad++; bad <= 10 {
				t.Errorf("%s key %q on %s: %s", want.kind, k, c.Locate(k).Addr, problem)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d keys did not survive", bad, len(data))
	}
}

// movedKeys returns the keys of data whose server differs between the
// placements.
func movedKeys(t testing.TB, data map[string]*kept, from, to []ring.Node) map[string]bool {
	oldRing, newRing := mustRing(t, from), mustRing(t, to)
	moved := map[string]bool{}
	for k := range data {
		if oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			moved[k] = true
		}
	}
	return moved
}

// TestSweepKeepsEverything is the scenario: 10,000 keys of every
// kind, a resharding with a 1-minute window and nothing read during it, a
// sweep, the end of the window, the removed nodes stopped. Every key reads
// back from its new owner with its value, its type and its remaining TTL,
// and every counter continues exactly.
func TestSweepKeepsEverything(t *testing.T) {
	for _, kind := range sweepKinds {
		for _, dir := range []string{"8to6", "6to8"} {
			t.Run(kind+"/"+dir, func(t *testing.T) {
				t.Parallel() // servers, client and clock of its own
				cl := newCluster(t, kind, 8)
				all, six := cl.nodes(), cl.nodes(0, 1, 2, 3, 4, 5)
				from, to := all, six
				if dir == "6to8" {
					from, to = six, all
				}
				clock := newFakeClock()
				c := cl.client(t, Options{Nodes: from, Now: clock.Now})
				data := writeSweepData(t, c, dir)
				moved := movedKeys(t, data, from, to)

				if err := c.Reshard(to, time.Minute); err != nil {
					t.Fatal(err)
				}
				var calls int
				s, err := c.Sweep(t.Context(), SweepOptions{Rate: -1, Progress: func(SweepStatus) { calls++ }})
				if err != nil {
					t.Fatalf("Sweep: %v (%+v)", err, s)
				}
				t.Logf("%d keys, %d moved: %+v", len(data), len(moved), s)
				if s.Copied != int64(len(moved)) || s.Failed != 0 || s.Gone != 0 ||
					s.NodesDone != len(from) || s.Nodes != len(from) || s.Scanned < int64(len(data)) ||
					s.Scanned != s.Copied+s.AlreadyCopied+s.SkippedNewer+s.SkippedUnmoved+s.Gone+s.Failed {
					t.Fatalf("sweep of %d keys, %d moved: %+v", len(data), len(moved), s)
				}
				if s.Keys != int64(len(data)) {
					t.Errorf("estimated keys %d, want %d", s.Keys, len(data))
				}
				if calls == 0 {
					t.Error("Progress never called")
				}
				m := c.Migration()
				if m.SweepCopied != s.Copied || m.SweepScanned != s.Scanned || m.SweepSkippedUnmoved != s.SkippedUnmoved {
					t.Fatalf("Migration() does not count the sweep: %+v", m)
				}

				clock.Advance(time.Minute + time.Second) // the window ends
				if c.Migration().Active {
					t.Fatal("window still open")
				}
				c.retireIfOver()
				if c.state.Load().mig != nil {
					t.Fatal("old placement not dropped at the end of the window")
				}
				if dir == "8to6" {
					cl.stop(6)
					cl.stop(7)
				}
				checkKept(t, c, data)
				for k, want := range data {
					if want.kind != "counter" {
						continue
					}
					if v, err := c.Incr(t.Context(), k, 1); err != nil || v != want.counter+1 {
						t.Fatalf("counter %q (moved: %v) continued at %d, %v; want %d", k, moved[k], v, err, want.counter+1)
					}
				}
			})
		}
	}
}

// sweepSetup writes n keys with a TTL of an hour through a client on 8
// nodes, reshards to 6 with a 1-minute window, and returns the client and
// the keys that move.
func sweepSetup(t *testing.T, cl *cluster, prefix string, n int) (c *Client, clock *fakeClock, moved []string) {
	t.Helper()
	clock, from, to, c := eightToSix(t, cl)
	keys := numberedKeys(prefix, n)
	setAll(t, c, keys, time.Hour)
	if err := c.Reshard(to, time.Minute); err != nil {
		t.Fatal(err)
	}
	oldRing, newRing := mustRing(t, from), mustRing(t, to)
	for _, k := range keys {
		if oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			moved = append(moved, k)
		}
	}
	return c, clock, moved
}

// TestSweepNeverOverwritesNewer writes newer values to the new owners before
// the sweep and while it runs (between its read of the old owner and its
// copy), and deletes keys in that gap: the newer values stay, and the
// deleted keys stay deleted.
func TestSweepNeverOverwritesNewer(t *testing.T) {
	for _, kind := range sweepKinds {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 8)
			c, _, moved := sweepSetup(t, cl, "newer", 2000)
			ctx := t.Context()
			before := moved[:50]
			for _, k := range before { // as a process already on the new ring might
				if err := cl.raw0(t, c.Locate(k).Addr).set(k, "before"); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			during, deleted := map[string]bool{}, map[string]bool{}
			opts := SweepOptions{Rate: -1, beforeCopy: func(keys []string) {
				mu.Lock()
				defer mu.Unlock()
				for _, k := range keys {
					switch {
					case slices.Contains(before, k):
					case len(during) < 20:
						during[k] = true
						if err := c.Set(ctx, k, []byte("during"), time.Hour); err != nil {
							t.Error(err)
						}
					case len(deleted) < 10:
						deleted[k] = true
						if err := c.Delete(ctx, k); err != nil {
							t.Error(err)
						}
					}
				}
			}}
			s, err := c.Sweep(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d moved: %+v", len(moved), s)
			if len(during) != 20 || len(deleted) != 10 {
				t.Fatalf("the hook saw too few keys: %d, %d", len(during), len(deleted))
			}
			if s.SkippedNewer != 80 || s.AlreadyCopied != 0 || s.Copied != int64(len(moved)-80) || s.Failed != 0 {
				t.Fatalf("sweep with 70 newer values and 10 deletes (buried) among %d moved keys: %+v", len(moved), s)
			}
			for _, k := range moved {
				want := "v:" + k
				switch {
				case slices.Contains(before, k):
					want = "before"
				case during[k]:
					want = "during"
				case deleted[k]:
					if h := cl.holders(t, k); len(h) != 0 {
						t.Fatalf("deleted key %q brought back by the sweep: on %v", k, h)
					}
					continue
				}
				if v, err := cl.raw(c.Locate(k).Addr).get(k); err != nil || string(v) != want {
					t.Fatalf("new owner of %q holds %q, %v; want %q", k, v, err, want)
				}
			}
		})
	}
}

// TestSweepResume cancels a sweep after its first copies and runs it again:
// the second run copies what is left and nothing twice.
func TestSweepResume(t *testing.T) {
	for _, kind := range sweepKinds {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 8)
			c, _, moved := sweepSetup(t, cl, "resume", 3000)
			ctx, cancel := context.WithCancel(t.Context())
			first, err := c.Sweep(ctx, SweepOptions{Rate: -1, Concurrency: 1, Progress: func(s SweepStatus) {
				if s.Copied > 0 {
					cancel()
				}
			}})
			if !errors.Is(err, context.Canceled) || first.Copied == 0 || first.Copied >= int64(len(moved)) {
				t.Fatalf("interrupted sweep: %+v, %v", first, err)
			}
			second, err := c.Sweep(t.Context(), SweepOptions{Rate: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d moved; first run %+v; second %+v", len(moved), first, second)
			if second.Copied != int64(len(moved))-first.Copied || second.AlreadyCopied != first.Copied || second.SkippedNewer != 0 || second.Failed != 0 {
				t.Fatalf("re-run after %d copies of %d: %+v", first.Copied, len(moved), second)
			}
			if m := c.Migration(); m.SweepAlreadyCopied != first.Copied || m.SweepSkippedNewer != 0 {
				t.Fatalf("Migration() after both runs: %d already copied, %d newer; want %d, 0", m.SweepAlreadyCopied, m.SweepSkippedNewer, first.Copied)
			}
			for _, k := range moved {
				if v, err := cl.raw(c.Locate(k).Addr).get(k); err != nil || string(v) != "v:"+k {
					t.Fatalf("new owner of %q holds %q, %v", k, v, err)
				}
			}
		})
	}
}

// TestSweepConcurrent runs two sweeps at once, as two processes would: they
// share the work, and each key is copied once.
func TestSweepConcurrent(t *testing.T) {
	for _, kind := range sweepKinds {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 8)
			c, clock, moved := sweepSetup(t, cl, "concurrent", 3000)
			m := c.Migration()
			other := cl.client(t, Options{Nodes: m.NewNodes, Now: clock.Now,
				MigrateFrom: &MigrateFrom{Nodes: m.OldNodes, Start: m.Start, Window: m.End.Sub(m.Start)}})
			var wg sync.WaitGroup
			var s [2]SweepStatus
			var errs [2]error
			for i, cc := range []*Client{c, other} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s[i], errs[i] = cc.Sweep(t.Context(), SweepOptions{Rate: -1})
				}()
			}
			wg.Wait()
			if errs[0] != nil || errs[1] != nil {
				t.Fatalf("concurrent sweeps: %v, %v", errs[0], errs[1])
			}
			t.Logf("%d moved: %+v and %+v", len(moved), s[0], s[1])
			if s[0].Copied+s[1].Copied != int64(len(moved)) || s[0].Copied+s[0].AlreadyCopied != int64(len(moved)) ||
				s[1].Copied+s[1].AlreadyCopied != int64(len(moved)) || s[0].SkippedNewer+s[1].SkippedNewer != 0 {
				t.Fatalf("two sweeps of %d moved keys: %+v and %+v", len(moved), s[0], s[1])
			}
		})
	}
}

// TestSweepErrors checks the sweep's refusals: no migration, bad options, a
// closed client, a window that ends during the sweep, a node down.
func TestSweepErrors(t *testing.T) {
	cl := newCluster(t, "redis-server", 8)
	c, clock, _ := sweepSetup(t, cl, "errors", 2000)
	if _, err := c.Sweep(t.Context(), SweepOptions{Concurrency: -1}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("Concurrency -1: %v", err)
	}
	// The window ends during the sweep: it stops, and says so.
	s, err := c.Sweep(t.Context(), SweepOptions{Rate: -1, Concurrency: 1, Progress: func(SweepStatus) {
		clock.Advance(2 * time.Minute)
	}})
	if !errors.Is(err, ErrNoMigration) || s.NodesDone != 0 || s.Scanned == 0 {
		t.Fatalf("window over during the sweep: %+v, %v", s, err)
	}
	if _, err := c.Sweep(t.Context(), SweepOptions{}); !errors.Is(err, ErrNoMigration) {
		t.Fatalf("after the window: %v", err)
	}

	// A new owner down: its keys fail, named, and the others are copied.
	cl2 := newCluster(t, "redis-server", 8)
	c2, _, moved := sweepSetup(t, cl2, "down", 2000)
	cl2.stop(0)
	s, err = c2.Sweep(t.Context(), SweepOptions{Rate: -1})
	var ne *NodeError
	if !errors.As(err, &ne) || ne.Node.Addr != cl2.addrs[0] || s.Failed == 0 || s.Copied == 0 ||
		s.Failed+s.Copied != int64(len(moved)) || s.NodesDone != 7 {
		t.Fatalf("sweep with node 0 down: %+v, %v", s, err)
	}
	t.Logf("node 0 down: %+v: %v", s, err)
	c2.Close()
	if _, err := c2.Sweep(t.Context(), SweepOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestSweepPrefix sweeps one application's keys on shared servers: the
// others' stay where they are.
func TestSweepPrefix(t *testing.T) {
	for _, kind := range sweepKinds {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 8)
			c, _, moved := sweepSetup(t, cl, "app*[1]", 1000)
			others := numberedKeys("other", 1000)
			setAll(t, c, others, time.Hour)
			s, err := c.Sweep(t.Context(), SweepOptions{Rate: -1, Prefix: "app*[1]"})
			// Copies land on old nodes still being listed, and Redis SCAN
			// may list them: up to len(moved) more; the others' 1000 never.
			if err != nil || s.Copied != int64(len(moved)) || s.Scanned < 1000 || s.Scanned > int64(1000+len(moved)) {
				t.Fatalf("sweep of the prefix's %d keys, %d moved: %+v, %v", 1000, len(moved), s, err)
			}
		})
	}
}

// corruptRestore makes the first RESTORE of every restore script fail on
// the server (a payload that does not check), as a version mismatch
// would. The script's arguments: EVALSHA, its hash, the number of keys,
// the keys and their tombstones, then each key's payload and TTL; the
// test runs no other script.
type corruptRestore struct{ hits *atomic.Int64 }

func (corruptRestore) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h corruptRestore) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		corrupted := false
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			args := cmd.Args()
			if n, ok := args[2].(int); ok && n > 2 && len(args) > 3+n {
				args[3+n], corrupted = "not a dump", true
			}
		}
		err := next(ctx, cmd)
		if corrupted && !redis.HasErrorPrefix(err, "NOSCRIPT") { // else go-redis sends it again with EVAL
			h.hits.Add(1)
		}
		return err
	}
}

func (corruptRestore) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSweepPartialRestore fails one RESTORE in each round trip: those keys
// are counted as failed and named, the others of the same round trip are
// copied, and the sweep says it failed.
func TestSweepPartialRestore(t *testing.T) {
	cl := newCluster(t, "redis-server", 8)
	hits := new(atomic.Int64)
	clock, from, to := newFakeClock(), cl.nodes(0, 1, 2, 3, 4, 5, 6, 7), cl.nodes(0, 1, 2, 3, 4, 5)
	c := cl.client(t, Options{Nodes: from, Now: clock.Now, NewRedisClient: func(n ring.Node, opt *redis.Options) *redis.Client {
		rdb := redis.NewClient(opt)
		rdb.AddHook(corruptRestore{hits})
		return rdb
	}})
	keys := numberedKeys("partial", 2000)
	setAll(t, c, keys, time.Hour)
	if err := c.Reshard(to, time.Minute); err != nil {
		t.Fatal(err)
	}
	moved := map[string]bool{}
	oldRing, newRing := mustRing(t, from), mustRing(t, to)
	for _, k := range keys {
		if oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			moved[k] = true
		}
	}
	s, err := c.Sweep(t.Context(), SweepOptions{Rate: -1})
	var ne *NodeError
	if !errors.As(err, &ne) || s.Failed != hits.Load() || s.Copied != int64(len(moved))-s.Failed || s.Copied == 0 {
		t.Fatalf("%d RESTOREs corrupted among %d moved keys: %+v, %v", hits.Load(), len(moved), s, err)
	}
	copied := 0
	for k := range moved {
		if _, err := cl.raw(c.Locate(k).Addr).get(k); err == nil {
			copied++
		}
	}
	if int64(copied) != s.Copied {
		t.Fatalf("%d moved keys on their new owner, the sweep says %d", copied, s.Copied)
	}
}

// TestSweepSpoolDir: a Memcached sweep spools each old node's listing in
// SweepOptions.SpoolDir; one it cannot write fails each node's sweep with
// ErrSweepSpool before anything is copied, and the sweep run again with a
// directory it can write copies every moved key.
func TestSweepSpoolDir(t *testing.T) {
	cl := newCluster(t, "memcached", 8)
	c, _, moved := sweepSetup(t, cl, "spool", 1000)
	s, err := c.Sweep(t.Context(), SweepOptions{Rate: -1, SpoolDir: t.TempDir() + "/missing"})
	joined, _ := err.(interface{ Unwrap() []error })
	spooled := 0
	if joined != nil {
		for _, e := range joined.Unwrap() {
			var ne *NodeError
			if errors.As(e, &ne) && errors.Is(e, ErrSweepSpool) {
				spooled++
			}
		}
	}
	if spooled != 8 || s.Scanned != 0 || s.Copied != 0 {
		t.Fatalf("sweep with a missing SpoolDir: %+v, %v; want a *NodeError with ErrSweepSpool from each of the 8 old nodes, nothing copied", s, err)
	}
	s, err = c.Sweep(t.Context(), SweepOptions{Rate: -1, SpoolDir: t.TempDir()})
	if err != nil || s.Copied != int64(len(moved)) {
		t.Fatalf("sweep with a writable SpoolDir: %+v, %v; want %d copied", s, err, len(moved))
	}
}

// opTotals sums each kind of call's calls, hits and misses over c's nodes.
func opTotals(c *Client) map[string][3]int64 {
	totals := map[string][3]int64{}
	for _, n := range c.Stats().Nodes {
		for _, o := range n.Ops {
			t := totals[o.Op]
			totals[o.Op] = [3]int64{t[0] + o.Calls(), t[1] + o.Hits, t[2] + o.Misses}
		}
	}
	return totals
}

// TestSweepStatsApart (issue 45): a sweep's reads and copies count under
// the "sweep" op on both backends, never as the application's get,
// get_multi or add_multi, so that the hit rates read from Stats (and
// promstats' shardcache_keys_read_total) stay the application's: on
// Memcached its dumps are multi-gets and its copies adds, which counted
// as get_multi and add_multi, and raised the hit rate during a sweep. Run
// twice, the second sweep also reads back on the new owners the copies
// they refuse (AlreadyCopied); memcached-classic dumps with gets instead
// of mg.
func TestSweepStatsApart(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached", "memcached-classic"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 8)
			c, _, moved := sweepSetup(t, cl, "apart", 1000)
			before := opTotals(c)
			for run := range 2 {
				s, err := c.Sweep(t.Context(), SweepOptions{Rate: -1})
				if err != nil || s.Copied+s.AlreadyCopied != int64(len(moved)) || s.AlreadyCopied != int64(run*len(moved)) {
					t.Fatalf("sweep %d of %d moved keys: %+v, %v", run+1, len(moved), s, err)
				}
			}
			after := opTotals(c)
			for op, a := range after {
				b := before[op]
				d := [3]int64{a[0] - b[0], a[1] - b[1], a[2] - b[2]}
				switch op {
				case "sweep":
					// Each run sizes and lists each of the 8 old nodes: more
					// calls than those are its dumps and copies.
					if d[0] <= 2*2*8 || d[1] != 0 || d[2] != 0 {
						t.Errorf("sweep: %d calls, %d hits, %d misses; want more than %d calls (the dumps and copies), and no keys counted, as for any call but a read's", d[0], d[1], d[2], 2*2*8)
					}
				case "ping": // a probe is no application call either
				default:
					if d != [3]int64{} {
						t.Errorf("%s: %d calls, %d hits, %d misses during the sweeps; want none: the application made no call", op, d[0], d[1], d[2])
					}
				}
			}
		})
	}
}

// TestSweepRate: SweepOptions' zero value sweeps at the default limit,
// DefaultSweepRate, never without one; a negative Rate lifts the limit;
// the status says which limit the sweep ran under (shardcache sweep
// prints it, and takes --rate as Rate is taken).
func TestSweepRate(t *testing.T) {
	cl := newCluster(t, "redis-server", 8)
	c, _, moved := sweepSetup(t, cl, "rate", 300)
	for _, tc := range []struct {
		opts SweepOptions
		want int
	}{
		{SweepOptions{}, DefaultSweepRate},
		{SweepOptions{Rate: -1}, -1},
		{SweepOptions{Rate: 5000}, 5000},
	} {
		s, err := c.Sweep(t.Context(), tc.opts)
		if err != nil || s.Rate != tc.want || s.Copied+s.AlreadyCopied != int64(len(moved)) {
			t.Errorf("Sweep with Rate %d: %+v, %v; want Rate %d and the %d moved keys copied", tc.opts.Rate, s, err, tc.want, len(moved))
		}
	}
}
