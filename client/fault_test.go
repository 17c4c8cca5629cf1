package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// Fault injection on real servers: a node killed, hung, restarted, flapping,
// or behind a faulty network, while the others serve a concurrent load. The
// tests assert behaviour (which calls fail, with what, what reads back) and
// log the times they measure; they never assert on time.

// faultTimeout is the network timeout of the fault tests: what a call to a
// hung node costs until it is marked down. Long enough that a healthy node
// never reaches it on a busy machine under -race (make test-busy), with
// the fault tests' clusters running side by side.
const faultTimeout = 2 * time.Second

// faultProbe is the probe interval of the fault tests.
const faultProbe = 50 * time.Millisecond

// faultWait is a bound on waiting for the client to notice something: far
// above what any of it takes, so that only a real failure reaches it.
const faultWait = 30 * time.Second

// faultCluster is n real servers of a kind and a client over them.
type faultCluster struct {
	servers []*testserver.Server
	nodes   []ring.Node
	c       *Client
}

func newFaultCluster(t *testing.T, kind string, n int, opts Options) *faultCluster {
	t.Helper()
	fc := &faultCluster{}
	if kind == "redis-server" {
		fc.servers, opts.Backend = testserver.Redis(t, n), Redis
	} else {
		fc.servers, opts.Backend = testserver.Memcached(t, n), Memcached
	}
	for i, s := range fc.servers {
		fc.nodes = append(fc.nodes, ring.Node{Name: fmt.Sprintf("n%d", i), Addr: s.Addr})
	}
	if opts.Nodes == nil {
		opts.Nodes = fc.nodes
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = faultTimeout, faultTimeout, faultTimeout
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = faultProbe
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fc.c = c
	return fc
}

// health returns the health of the node at addr.
func healthOf(t *testing.T, c *Client, addr string) NodeHealth {
	t.Helper()
	for _, h := range c.Health() {
		if h.Node.Addr == addr {
			return h
		}
	}
	t.Fatalf("no health for %s in %v", addr, c.Health())
	return NodeHealth{}
}

// waitHealth polls until the node at addr is down (or up), and returns how
// long that took.
func waitHealth(t *testing.T, c *Client, addr string, down bool) time.Duration {
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
	var ne *NodeError
	if !errors.Is(err, ErrNodeDown) || !errors.As(err, &ne) || ne.Node.Addr != addr {
		t.Fatalf("%s on a down node = %v; want a *NodeError for %s with ErrNodeDown", what, err, addr)
	}
}

// load runs workers that Set and Get keys of their own (one writer per key,
// so the last value acknowledged is the value to read back) until stopped,
// and records what the client acknowledged and every unexpected error.
type load struct {
	t      *testing.T
	c      *Client
	victim string // the faulty node's address: its keys may fail, others not

	mu       sync.Mutex
	acked    map[string]string          // key → last value the client acknowledged
	maybe    map[string][]string        // key → values of failed writes since, which may have landed
	errs     []error                    // unexpected: on a healthy node, or untyped
	lat      map[string][]time.Duration // healthy nodes' Get latencies, by phase
	phase    string
	ops      atomic.Int64 // calls that returned
	writes   atomic.Int64 // writes acknowledged
	failures atomic.Int64 // calls to the victim that failed

	stop chan struct{}
	wg   sync.WaitGroup
}

func startLoad(t *testing.T, c *Client, victim string, workers int) *load {
	l := &load{t: t, c: c, victim: victim, acked: map[string]string{}, maybe: map[string][]string{}, lat: map[string][]time.Duration{},
		phase: "healthy", stop: make(chan struct{})}
	for w := range workers {
		l.wg.Add(1)
		go l.work(w)
	}
	t.Cleanup(l.halt)
	return l
}

func (l *load) work(w int) {
	defer l.wg.Done()
	ctx := context.Background()
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		key := fmt.Sprintf("w%d:%d", w, i/2%300)
		onVictim := l.c.Locate(key).Addr == l.victim
		var err error
		if i%2 == 0 {
			v := fmt.Sprintf("v%d", i)
			err = l.c.Set(ctx, key, []byte(v), 0)
			l.mu.Lock()
			if err == nil {
				l.acked[key] = v
				delete(l.maybe, key)
				l.writes.Add(1)
			} else if !errors.Is(err, ErrNodeDown) {
				l.maybe[key] = append(l.maybe[key], v) // a write that timed out may have landed
			}
			l.mu.Unlock()
		} else {
			start := time.Now()
			var got []byte
			got, err = l.c.Get(ctx, key)
			d := time.Since(start)
			l.mu.Lock()
			want, ok := l.acked[key]
			if !onVictim && err == nil {
				l.lat[l.phase] = append(l.lat[l.phase], d)
			}
			if err == nil && string(got) != want && !slices.Contains(l.maybe[key], string(got)) ||
				err == ErrCacheMiss && ok {
				l.errs = append(l.errs, fmt.Errorf("Get(%q) = %q, %v; the last write acknowledged was %q (%v)", key, got, err, want, ok))
			}
			l.mu.Unlock()
			if err == ErrCacheMiss {
				err = nil
			}
		}
		l.ops.Add(1)
		if err == nil {
			continue
		}
		var ne *NodeError
		if !onVictim || !errors.As(err, &ne) || ne.Node.Addr != l.victim {
			l.mu.Lock()
			l.errs = append(l.errs, fmt.Errorf("key %q (on the victim: %v): %w", key, onVictim, err))
			l.mu.Unlock()
			continue
		}
		l.failures.Add(1)
	}
}

// await waits until n more calls have returned.
func (l *load) await(n int64) {
	l.t.Helper()
	target := l.ops.Load() + n
	start := time.Now()
	for l.ops.Load() < target {
		if time.Since(start) > faultWait {
			l.t.Fatalf("load: %d calls in %v; want %d more", l.ops.Load(), faultWait, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// setPhase labels the healthy nodes' latencies measured from now on.
func (l *load) setPhase(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phase = p
}

// forgetVictim drops the victim's acknowledged writes: a restart without
// persistence loses them, as it should.
func (l *load) forgetVictim() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k := range l.acked {
		if l.c.Locate(k).Addr == l.victim {
			delete(l.acked, k)
			n++
		}
	}
	for k := range l.maybe {
		if l.c.Locate(k).Addr == l.victim {
			delete(l.maybe, k)
		}
	}
	return n
}

func (l *load) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// finish stops the load, fails the test on an unexpected error, and checks
// that every acknowledged write reads back.
func (l *load) finish() {
	l.t.Helper()
	l.halt()
	for i, err := range l.errs {
		if i == 5 {
			l.t.Errorf("... and %d more", len(l.errs)-5)
			break
		}
		l.t.Errorf("load: %v", err)
	}
	keys := make([]string, 0, len(l.acked))
	for k := range l.acked {
		keys = append(keys, k)
	}
	hits, err := l.c.GetMulti(context.Background(), keys)
	if err != nil {
		l.t.Fatalf("reading back the acknowledged writes: %v", err)
	}
	lost := 0
	for k, v := range l.acked {
		if got := string(hits[k]); got != v && !slices.Contains(l.maybe[k], got) {
			lost++
		}
	}
	if lost > 0 {
		l.t.Errorf("%d of %d acknowledged writes do not read back", lost, len(l.acked))
	}
	l.t.Logf("load: %d calls, %d writes acknowledged, %d keys read back (all of them), %d calls to the faulty node failed",
		l.ops.Load(), l.writes.Load(), len(l.acked), l.failures.Load())
}

// percentiles returns the p50 and p99 of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}

// victimKey returns a key the client places on addr.
func victimKey(c *Client, addr string) string { return keysOn(c, addr, "victim:", 1)[0] }

// timeDown times n calls to a down node, each of which must fail at once
// with ErrNodeDown, and returns the slowest.
func timeDown(t *testing.T, c *Client, addr string, n int) (slowest time.Duration) {
	t.Helper()
	k := victimKey(c, addr)
	for range n {
		start := time.Now()
		_, err := c.Get(context.Background(), k)
		slowest = max(slowest, time.Since(start))
		checkDown(t, "Get", err, addr)
	}
	return slowest
}

// TestNodeKilled kills a node with SIGKILL under load, then restarts it:
// only its keys fail, with ErrNodeDown once the threshold is reached, and
// at once; it is up again by its probe alone; every write acknowledged
// reads back.
func TestNodeKilled(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fc := newFaultCluster(t, kind, 3, Options{})
			victim := fc.servers[1]
			l := startLoad(t, fc.c, victim.Addr, 4)
			l.await(300)

			victim.Stop() // SIGKILL
			detect := waitHealth(t, fc.c, victim.Addr, true)
			slowest := timeDown(t, fc.c, victim.Addr, 1000)
			// Multi-key calls fail the down node's part alone, at once.
			keys := []string{victimKey(fc.c, victim.Addr), victimKey(fc.c, fc.servers[0].Addr), victimKey(fc.c, fc.servers[2].Addr)}
			if err := fc.c.SetMulti(context.Background(), map[string][]byte{keys[0]: nil, keys[1]: nil, keys[2]: nil}, 0); len(nodeErrors(err)) != 1 {
				t.Fatalf("SetMulti with one node down = %v; want one *NodeError", err)
			} else {
				checkDown(t, "SetMulti", err, victim.Addr)
			}
			hits, err := fc.c.GetMulti(context.Background(), keys)
			checkDown(t, "GetMulti", err, victim.Addr)
			if len(nodeErrors(err)) != 1 || len(hits) != 2 {
				t.Fatalf("GetMulti with one node down: %d hits, %v; want the 2 of the live nodes", len(hits), err)
			}
			l.await(300) // the healthy nodes keep serving

			lost := l.forgetVictim() // while it is down, so no write to it is acknowledged
			start := time.Now()
			victim.Restart()
			restarted := time.Since(start)
			recover := restarted + waitHealth(t, fc.c, victim.Addr, false)
			l.await(300)
			l.finish()
			h := healthOf(t, fc.c, victim.Addr)
			if h.Downs != 1 {
				t.Errorf("node marked down %d times; want 1", h.Downs)
			}
			t.Logf("%s killed: down after %v, slowest of 1000 calls while down %v, up %v after the restart began "+
				"(the server took %v to answer; probe interval %v with backoff); %d failures counted; the restart lost %d keys acknowledged before it",
				kind, detect, slowest, recover, restarted, faultProbe, h.Failures, lost)
		})
	}
}

// TestNodeHung stops a node with SIGSTOP under load, then continues it:
// calls to it cost at most the timeout until the threshold, then fail at
// once; the healthy nodes keep serving (their latency is logged); it is up
// again after SIGCONT by its probe alone, with its data.
func TestNodeHung(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fc := newFaultCluster(t, kind, 3, Options{})
			victim := fc.servers[1]
			l := startLoad(t, fc.c, victim.Addr, 4)
			l.await(600)

			l.setPhase("hung")
			victim.Pause()
			t.Cleanup(victim.Resume)
			detect := waitHealth(t, fc.c, victim.Addr, true)
			slowest := timeDown(t, fc.c, victim.Addr, 1000)
			l.await(600)

			l.setPhase("after")
			victim.Resume()
			recover := waitHealth(t, fc.c, victim.Addr, false)
			l.await(300)
			l.finish()
			p50, p99 := percentiles(l.lat["healthy"])
			h50, h99 := percentiles(l.lat["hung"])
			t.Logf("%s hung: down after %v (timeout %v, threshold %d), slowest of 1000 calls while down %v, up %v after SIGCONT; "+
				"healthy nodes' Gets: p50 %v p99 %v with all nodes up (%d), p50 %v p99 %v while one hangs (%d)",
				kind, detect, faultTimeout, DefaultFailureThreshold, slowest, recover,
				p50, p99, len(l.lat["healthy"]), h50, h99, len(l.lat["hung"]))
		})
	}
}

// TestNodeFlapping stops and continues a node several times under load:
// each stop marks it down once, each continue up again, no write is lost.
func TestNodeFlapping(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fc := newFaultCluster(t, kind, 3, Options{})
			victim := fc.servers[2]
			l := startLoad(t, fc.c, victim.Addr, 4)
			const flaps = 3
			for range flaps {
				l.await(100)
				victim.Pause()
				waitHealth(t, fc.c, victim.Addr, true)
				victim.Resume()
				waitHealth(t, fc.c, victim.Addr, false)
			}
			l.await(100)
			l.finish()
			if h := healthOf(t, fc.c, victim.Addr); h.Downs != flaps || h.Down {
				t.Fatalf("after %d flaps: %+v; want %d downs and up", flaps, h, flaps)
			}
		})
	}
}

// TestFailOpen checks that with FailOpen a down node's keys read as misses
// and its writes are dropped and counted, while deletes still fail; no key
// goes to another node.
func TestFailOpen(t *testing.T) {
	cl := newCluster(t, "miniredis", 3)
	c := cl.client(t, Options{FailOpen: true, FailureThreshold: 1, ProbeInterval: time.Hour})
	ctx := t.Context()
	down := cl.nodes(1)[0]
	k := victimKey(c, down.Addr)
	others := []string{victimKey(c, cl.addrs[0]), victimKey(c, cl.addrs[2])}
	cl.stop(1)
	if _, err := c.Get(ctx, k); errors.Is(err, ErrNodeDown) || err == nil {
		t.Fatalf("first Get of a stopped node = %v; want its connection error", err)
	}
	waitHealth(t, c, down.Addr, true)

	if _, err := c.Get(ctx, k); err != ErrCacheMiss {
		t.Errorf("FailOpen Get of a down node's key = %v; want ErrCacheMiss", err)
	}
	if err := c.Set(ctx, k, []byte("v"), 0); err != nil {
		t.Errorf("FailOpen Set = %v; want nil (dropped)", err)
	}
	if err := c.Add(ctx, k, []byte("v"), 0); err != nil {
		t.Errorf("FailOpen Add = %v; want nil (dropped)", err)
	}
	if err := c.Touch(ctx, k, time.Minute); err != ErrCacheMiss {
		t.Errorf("FailOpen Touch = %v; want ErrCacheMiss", err)
	}
	items := map[string][]byte{k: []byte("v"), others[0]: []byte("v"), others[1]: []byte("v")}
	if err := c.SetMulti(ctx, items, 0); err != nil {
		t.Errorf("FailOpen SetMulti = %v; want nil, the down node's part dropped", err)
	}
	hits, err := c.GetMulti(ctx, []string{k, others[0], others[1]})
	if err != nil || len(hits) != 2 || hits[k] != nil {
		t.Errorf("FailOpen GetMulti = %d hits %v, %v; want the 2 live ones and no error", len(hits), hits, err)
	}
	checkDown(t, "FailOpen Delete", c.Delete(ctx, k), down.Addr)
	checkDown(t, "FailOpen DeleteMulti", c.DeleteMulti(ctx, []string{k, "absent"}), down.Addr)
	_, err = c.Incr(ctx, k, 1)
	checkDown(t, "FailOpen Incr", err, down.Addr)
	for _, o := range others {
		if h := cl.holders(t, o); !slices.Equal(h, []string{c.Locate(o).Addr}) {
			t.Errorf("%q is on %v; want only its own node", o, h)
		}
	}
	if h := cl.holders(t, k); len(h) != 0 {
		t.Errorf("the down node's key was written to %v", h)
	}
	if h := healthOf(t, c, down.Addr); h.Missed != 3 || h.Dropped != 3 {
		t.Errorf("health %+v; want 3 reads missed (Get, Touch, GetMulti) and 3 writes dropped (Set, Add, SetMulti)", h)
	}
}

// TestFailOpenFallback: with FailOpen, an old owner held down during a
// migration makes its moved keys misses, counted as the new owner's would
// be, for Get and GetMulti alike.
func TestFailOpenFallback(t *testing.T) {
	cl := newCluster(t, "miniredis", 3)
	c := cl.client(t, Options{FailOpen: true, FailureThreshold: 1, ProbeInterval: time.Hour})
	ctx := t.Context()
	old := cl.nodes(2)[0]
	moved := keysOn(c, old.Addr, "moved:", 3)
	for _, k := range moved {
		if err := c.Set(ctx, k, []byte(k), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Reshard(cl.nodes(0, 1), time.Hour); err != nil {
		t.Fatal(err)
	}
	cl.stop(2)
	if _, err := c.Get(ctx, moved[0]); err == nil || err == ErrCacheMiss {
		t.Fatalf("first Get with the old owner stopped = %v; want its connection error", err)
	}
	waitHealth(t, c, old.Addr, true)
	if _, err := c.Get(ctx, moved[1]); err != ErrCacheMiss {
		t.Errorf("FailOpen Get of a moved key, old owner down = %v; want ErrCacheMiss", err)
	}
	if hits, err := c.GetMulti(ctx, moved); err != nil || len(hits) != 0 {
		t.Errorf("FailOpen GetMulti of moved keys, old owner down = %v, %v; want no hits, no error", hits, err)
	}
	if h := healthOf(t, c, old.Addr); h.Missed != 4 {
		t.Errorf("health %+v; want 4 reads missed (Get, and GetMulti's 3 keys)", h)
	}
}

// TestMigrationWithNodeDown checks faults during a migration: a hung old
// owner fails fallback reads with its *NodeError (the key may be there: a
// miss would send the caller to its database believing it lost), at once
// once it is down, and dual writes failed copies; a dead new owner fails
// its keys with ErrNodeDown.
func TestMigrationWithNodeDown(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fc := newFaultCluster(t, kind, 3, Options{})
			c, ctx := fc.c, context.Background()
			old := fc.servers[2]
			moved := keysOn(c, old.Addr, "moved:", 20)
			for _, k := range moved {
				if err := c.Set(ctx, k, []byte(k), 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Reshard(fc.nodes[:2], time.Hour); err != nil {
				t.Fatal(err)
			}
			old.Pause()
			t.Cleanup(old.Resume)
			i := 0
			for ; !healthOf(t, c, old.Addr).Down; i++ {
				if i == 10*DefaultFailureThreshold {
					t.Fatalf("old owner not down after %d fallback reads: %+v", i, healthOf(t, c, old.Addr))
				}
				var ne *NodeError
				if _, err := c.Get(ctx, moved[i]); !errors.As(err, &ne) || ne.Node.Addr != old.Addr {
					t.Fatalf("Get of a moved key with its old owner hung = %v; want its *NodeError", err)
				}
			}
			before := c.Migration()
			k := moved[i]
			_, err := c.Get(ctx, k)
			checkDown(t, "Get of a moved key with its old owner down", err, old.Addr)
			hits, err := c.GetMulti(ctx, moved[i:i+2])
			checkDown(t, "GetMulti of moved keys with their old owner down", err, old.Addr)
			if len(hits) != 0 {
				t.Fatalf("GetMulti with the old owner down found %v", hits)
			}
			before.FallbackErrors += 2 // GetMulti's
			// A write the old owner would miss is refused: once the new
			// owner lost the key, readers falling back would read the old
			// value (copy.go).
			checkDown(t, "Set during the window with the old owner down", c.Set(ctx, k, []byte("new"), 0), old.Addr)
			checkDown(t, "Delete with the old owner down", c.Delete(ctx, k), old.Addr)
			after := c.Migration()
			if after.FallbackErrors != before.FallbackErrors+1 || after.DualWrites != before.DualWrites+1 ||
				after.DualWriteErrors != before.DualWriteErrors+1 {
				t.Fatalf("counters before %+v, after %+v; want one more fallback error, dual write and failed copy", before, after)
			}

			// A new owner killed: its keys fail, with ErrNodeDown once down.
			dead := fc.servers[0]
			dk := victimKey(c, dead.Addr)
			dead.Stop()
			err = nil
			for j := 0; j < 10*DefaultFailureThreshold && !errors.Is(err, ErrNodeDown); j++ {
				_, err = c.Get(ctx, dk)
				if err == nil || err == ErrCacheMiss {
					t.Fatalf("Get from a killed new owner = %v; want a *NodeError", err)
				}
			}
			checkDown(t, "Get from a killed new owner", err, dead.Addr)
		})
	}
}

// TestMemcachedRealCause checks that a Memcached node that cannot be reached
// reports why (refused, timed out), not gomemcache's "no servers configured
// or available".
func TestMemcachedRealCause(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	hole := blackHole(t)
	c, err := New(Options{Backend: Memcached, Nodes: []ring.Node{{Name: "closed", Addr: closed}, {Name: "hole", Addr: hole}},
		ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for addr, want := range map[string]func(error) bool{
		closed: func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) },
		hole: func(err error) bool {
			var ne net.Error
			return errors.As(err, &ne) && ne.Timeout()
		},
	} {
		_, err := c.Get(context.Background(), victimKey(c, addr))
		if !want(err) || errors.Is(err, memcache.ErrNoServers) {
			t.Errorf("Get from %s = %v; want the real cause", addr, err)
		}
	}
}
