package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// Node failures and restarts seen through the client: stalled nodes,
// quick and slow restarts, and the hooks of a node's go-redis client.

// TestMemcachedGetStalledNode: a Get to a node that has stopped answering
// (SIGSTOP) returns as soon as its context ends, with the context's error,
// long before the node's own timeout, and that does not count against the
// node; a Get the node's own timeout ends does, as before. Once the node
// answers again, the next Gets read their own answers: the connection the
// abandoned request went out on was not reused.
func TestMemcachedGetStalledNode(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	client := func(timeout time.Duration) *Client {
		c, err := New(Options{Backend: Memcached, Nodes: []ring.Node{{Name: "n0", Addr: s.Addr}},
			ReadTimeout: timeout, WriteTimeout: timeout, FailureThreshold: 100})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	patient, hasty := client(time.Minute), client(300*time.Millisecond)
	if err := patient.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Client{patient, hasty} { // a connection in each pool
		if v, err := c.Get(t.Context(), "k"); err != nil || string(v) != "v" {
			t.Fatalf("Get = %q, %v", v, err)
		}
	}
	resume := paused(t, s)
	get := func(c *Client, ctx context.Context) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := c.Get(ctx, "k")
			errc <- err
		}()
		return errc
	}

	// Cancelled while it waits for the stalled node: the node's minute is
	// not waited for (waitCancelled gives up well before).
	ctx, cancel := context.WithCancel(t.Context())
	errc := get(patient, ctx)
	select {
	case err := <-errc:
		t.Fatalf("Get on a stalled node returned %v before it was cancelled", err)
	case <-time.After(50 * time.Millisecond): // not synchronisation: the Get must still wait, whenever it was sent
	}
	cancel()
	waitCancelled(t, "Get cancelled on a stalled node", errc)

	// A deadline, the same.
	dctx, dcancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer dcancel()
	select {
	case err := <-get(patient, dctx):
		var ne *NodeError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) || ne.Node.Addr != s.Addr {
			t.Fatalf("Get with a deadline on a stalled node = %v; want context.DeadlineExceeded from the node", err)
		}
	case <-time.After(faultWait):
		t.Fatal("Get with a deadline on a stalled node still waits")
	}
	if h := healthOf(t, patient, s.Addr); h.Failures != 0 || h.Down {
		t.Errorf("after Gets their callers gave up on: %+v; want no failure counted", h)
	}

	// The node's own timeout: a failure of the node's.
	if _, err := hasty.Get(t.Context(), "k"); err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get past the node's timeout = %v; want the node's timeout", err)
	}
	if h := healthOf(t, hasty, s.Addr); h.Failures != 1 {
		t.Errorf("after a Get the node's timeout ended: %d failures, want 1", h.Failures)
	}

	resume()
	for _, c := range []*Client{patient, hasty} {
		for range 3 {
			if v, err := c.Get(t.Context(), "k"); err != nil || string(v) != "v" {
				t.Fatalf("Get once the node answers again = %q, %v", v, err)
			}
			if _, err := c.Get(t.Context(), "absent"); err != ErrCacheMiss {
				t.Fatalf("Get of an absent key once the node answers again = %v; want ErrCacheMiss", err)
			}
		}
	}
}

// TestQuickRestartGet: a node restarted between two Gets, too fast for its
// breaker to see, closed every pooled raw connection. The first Get to find
// one closed asks again on a new connection and drops the others: no Get
// fails, none counts against the node. (The pool is filled by misses: a
// miss leaves its connection in the pool.)
func TestQuickRestartGet(t *testing.T) {
	fc := newFaultCluster(t, "memcached", 2, Options{})
	c, victim := fc.c, fc.servers[0]
	keys := keysOn(c, victim.Addr, "quick:", 16)
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			for range 5 {
				if _, err := c.Get(t.Context(), k); err != ErrCacheMiss {
					t.Errorf("Get %s = %v; want ErrCacheMiss", k, err)
				}
			}
		})
	}
	wg.Wait()
	victim.Stop()
	victim.Restart()
	before := healthOf(t, c, victim.Addr)
	for round := range 30 {
		if _, err := c.Get(t.Context(), keys[round%len(keys)]); err != ErrCacheMiss {
			t.Fatalf("round %d after the restart: %v; want ErrCacheMiss", round, err)
		}
	}
	if h := healthOf(t, c, victim.Addr); h.Down || h.Downs != before.Downs || h.Failures != before.Failures {
		t.Errorf("after the restart: %+v; %d more failures", h, h.Failures-before.Failures)
	}
	if err := c.Set(t.Context(), keys[0], []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(t.Context(), keys[0]); err != nil || string(v) != "v" {
		t.Fatalf("Get after the restart = %q, %v", v, err)
	}
}

// keysFirstOn returns n keys of which the first is owned by the node at
// first, and the others spread over every node.
func keysFirstOn(c *Client, first string, n int) []string {
	keys := keysOn(c, first, "stall-first:", 1)
	for i := 0; len(keys) < n; i++ {
		keys = append(keys, fmt.Sprintf("stall:%d", i))
	}
	return keys
}

// TestMemcachedGetMultiStalledNode: GetMulti reads the nodes' answers in
// turn, and a node that does not answer (SIGSTOP), read first, costs the
// others nothing: their hits come back, with the stalled node's error
// alone, whether the pool's timeout or the caller's deadline ends the wait,
// and the healthy nodes stay up and count no failure.
func TestMemcachedGetMultiStalledNode(t *testing.T) {
	// The caller's deadline (half of faultTimeout) and the pool's timeout
	// (faultTimeout) are both out of a healthy node's reach on a busy
	// machine: 200 ms and 300 ms were not, and its answers went missing.
	fc := newFaultCluster(t, "memcached", 3, Options{FailureThreshold: 100})
	c, stalled := fc.c, fc.servers[0].Addr
	keys := keysFirstOn(c, stalled, 30)
	items := map[string][]byte{}
	want := 0
	for _, k := range keys {
		items[k] = []byte("v" + k)
		if c.Locate(k).Addr != stalled {
			want++
		}
	}
	if err := c.SetMulti(t.Context(), items, 0); err != nil {
		t.Fatal(err)
	}
	resume := paused(t, fc.servers[0])
	defer resume()
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: the pool's timeout ends the wait
	}{{"pool timeout", 0}, {"context deadline", faultTimeout / 2}} {
		for round := range 3 {
			ctx := t.Context()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			got, err := c.GetMulti(ctx, keys)
			var ne *NodeError
			if !errors.As(err, &ne) || ne.Node.Addr != stalled || strings.Count(err.Error(), "get_multi") != 1 {
				t.Fatalf("%s, round %d: err = %v; want the stalled node's alone", tc.name, round, err)
			}
			if len(got) != want {
				t.Fatalf("%s, round %d: %d hits from the healthy nodes, want %d", tc.name, round, len(got), want)
			}
		}
	}
	for _, s := range fc.servers[1:] {
		if h := healthOf(t, c, s.Addr); h.Down || h.Failures != 0 {
			t.Errorf("healthy node %s: %+v", s.Addr, h)
		}
	}
}

// TestRestartedNode: the pooled connections of multi-gets, pooled before a
// node restarted, do not outlive it. Restarted slowly, once marked down: a
// node marked down closes them. Restarted quickly, between two calls, too
// fast for its breaker to see: the first multi-get to find one closed asks
// again on a new connection and drops the others. Either way GetMulti then
// finds every key written since, no call fails, and none counts against
// the node.
func TestRestartedNode(t *testing.T) {
	for _, kind := range []string{"memcached", "redis-server"} {
		for _, quick := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/quick=%t", kind, quick), func(t *testing.T) {
				fc := newFaultCluster(t, kind, 2, Options{})
				c, victim := fc.c, fc.servers[0]
				keys := keysFirstOn(c, victim.Addr, 20)
				fillRawPool(t, c, keys)
				victim.Stop()
				for attempt := 0; !quick && !healthOf(t, c, victim.Addr).Down; attempt++ {
					if attempt == 1000 {
						t.Fatal("the stopped node is never marked down")
					}
					c.GetMulti(t.Context(), keys) // fails on the stopped node until it is marked down
				}
				victim.Restart()
				if !quick {
					waitHealth(t, c, victim.Addr, false)
				}
				checkRestarted(t, c, victim.Addr, keys)
			})
		}
	}
}

// fillRawPool fills the pool of raw connections with idle ones, by
// concurrent multi-gets of keys.
func fillRawPool(t *testing.T, c *Client, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 5 {
				if _, err := c.GetMulti(t.Context(), keys); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

// checkRestarted writes keys and reads them back in 30 rounds of GetMulti,
// each of which must find them all, with no failure counted against the
// node at addr.
func checkRestarted(t *testing.T, c *Client, addr string, keys []string) {
	t.Helper()
	items := map[string][]byte{}
	for _, k := range keys {
		items[k] = []byte(k)
	}
	if err := c.SetMulti(t.Context(), items, 0); err != nil {
		t.Fatal(err)
	}
	before := healthOf(t, c, addr)
	for round := range 30 {
		got, err := c.GetMulti(t.Context(), keys)
		if err != nil || len(got) != len(keys) {
			t.Fatalf("round %d after the restart: %d of %d keys, %v", round, len(got), len(keys), err)
		}
	}
	if h := healthOf(t, c, addr); h.Down || h.Downs != before.Downs || h.Failures != before.Failures {
		t.Errorf("after the restart: %+v; marked down %d more times, %d more failures", h, h.Downs-before.Downs, h.Failures-before.Failures)
	}
}

// TestRedisGetMultiRaw: a client's own go-redis clients leave GetMulti's
// MGETs to the raw connections, and Stats counts them as it counts go-redis's
// (calls, hits, misses); the clients of a NewRedisClient hook get every
// MGET, so that the hooks they carry (tracing, metrics) see them.
func TestRedisGetMultiRaw(t *testing.T) {
	servers := testserver.Redis(t, 2)
	nodes := []ring.Node{{Name: "a", Addr: servers[0].Addr}, {Name: "b", Addr: servers[1].Addr}}
	ctx := context.Background()
	var mgets atomic.Int64
	own, err := New(Options{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	hooked, err := New(Options{Nodes: nodes, NewRedisClient: func(_ ring.Node, opt *redis.Options) *redis.Client {
		rdb := redis.NewClient(opt)
		rdb.AddHook(countHook{&mgets})
		return rdb
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer hooked.Close()
	keys := numberedKeys("raw", 40)
	for _, k := range keys[:30] {
		if err := own.Set(ctx, k, []byte("v:"+k), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*Client{own, hooked} {
		hits, err := c.GetMulti(ctx, keys)
		if err != nil || len(hits) != 30 {
			t.Fatalf("GetMulti: %d hits, %v; want 30", len(hits), err)
		}
		for _, k := range keys[:30] {
			if string(hits[k]) != "v:"+k {
				t.Fatalf("GetMulti[%q] = %q", k, hits[k])
			}
		}
	}
	if n := mgets.Load(); n != int64(len(nodes)) {
		t.Errorf("the hook's clients saw %d MGETs; want one per node, %d", n, len(nodes))
	}
	var calls, hits, misses int64
	for _, s := range own.Stats().Nodes {
		o := s.Op("get_multi")
		calls, hits, misses = calls+o.Calls(), hits+o.Hits, misses+o.Misses
	}
	if calls != int64(len(nodes)) || hits != 30 || misses != 10 {
		t.Errorf("Stats of the raw MGETs: %d calls, %d hits, %d misses; want %d, 30, 10", calls, hits, misses, len(nodes))
	}
}

// countHook counts the MGETs a go-redis client sends, alone or in
// pipelines.
type countHook struct{ mgets *atomic.Int64 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "mget" {
			h.mgets.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == "mget" {
				h.mgets.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestRedisHookAfterNew: a hook added to a node's go-redis client after
// New, through Client.Redis (redisotel, say), sees every MGET GetMulti sends
// that node from then on, with AutoPipeline or without, alone or among
// concurrent callers.
func TestRedisHookAfterNew(t *testing.T) {
	servers := testserver.Redis(t, 2)
	nodes := []ring.Node{{Name: "a", Addr: servers[0].Addr}, {Name: "b", Addr: servers[1].Addr}}
	for _, ap := range []bool{false, true} {
		t.Run(fmt.Sprintf("autopipeline=%t", ap), func(t *testing.T) {
			c, err := New(Options{Nodes: nodes, AutoPipeline: ap})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			keys := numberedKeys("hooked", 40)
			items := map[string][]byte{}
			for _, k := range keys {
				items[k] = []byte("v:" + k)
			}
			if err := c.SetMulti(t.Context(), items, time.Minute); err != nil {
				t.Fatal(err)
			}
			// A GetMulti before the hook: the MGETs may take the fast path.
			if err := getAll(t.Context(), c, keys, items); err != nil {
				t.Fatal(err)
			}
			var mgets [2]atomic.Int64
			batches := newBatchHook()
			for i, n := range nodes {
				k := keysOn(c, n.Addr, "hookkey:", 1)[0]
				c.Redis(k).AddHook(countHook{&mgets[i]})
				c.Redis(k).AddHook(batches)
			}
			const rounds = 20
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range rounds {
						if err := getAll(t.Context(), c, keys, items); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			for i := range nodes {
				if n := mgets[i].Load(); n != 4*rounds {
					t.Errorf("node %s: the hook saw %d MGETs of %d GetMultis", nodes[i].Name, n, 4*rounds)
				}
			}
			batches.mu.Lock()
			batched := batches.pipelined["mget"]
			batches.mu.Unlock()
			if ap && batched == 0 {
				t.Error("no MGET went through the auto-pipeliner: the hook's sight of its batches is not tested")
			}
		})
	}
}

// TestRedisHookSeesEveryCommand: a hook added through Client.Redis sees
// every command the façade sends that node, whatever the call: what the
// server itself logged (MONITOR), command by command, but the connections'
// own setup (HELLO, CLIENT SETINFO), which go-redis sends outside its
// hooks.
func TestRedisHookSeesEveryCommand(t *testing.T) {
	servers := testserver.Redis(t, 2)
	nodes := []ring.Node{{Name: "a", Addr: servers[0].Addr}, {Name: "b", Addr: servers[1].Addr}}
	for _, opts := range []Options{{}, {AutoPipeline: true}, {Lease: time.Second, MetaLeases: true, StaleWhileRevalidate: time.Minute}} {
		opts.Nodes = nodes
		t.Run(fmt.Sprintf("autopipeline=%t,leases=%t", opts.AutoPipeline, opts.Lease > 0), func(t *testing.T) {
			c, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			hooks := make([]*batchHook, len(nodes))
			monitors := make([]*testserver.Monitor, len(nodes))
			var keys []string
			for i, n := range nodes {
				k := keysOn(c, n.Addr, "seen:", 1)[0]
				keys = append(keys, k)
				hooks[i] = newBatchHook()
				c.Redis(k).AddHook(hooks[i])
				monitors[i] = servers[i].Monitor(t)
			}
			for _, k := range keys {
				for _, op := range entryPoints(c, k) {
					op(t.Context()) // misses, refusals (Increment on Redis) and type errors (Incr) included
				}
			}
			c.Close() // and with it any work of the calls still under way
			for i := range servers {
				sent := monitors[i].Stop(t)
				seen := map[string]int64{}
				hooks[i].mu.Lock()
				for _, m := range []map[string]int{hooks[i].alone, hooks[i].pipelined} {
					for name, n := range m {
						seen[name] += int64(n)
					}
				}
				hooks[i].mu.Unlock()
				for name, n := range sent {
					if name == "hello" || name == "client" {
						continue // a new connection's setup
					}
					if n != seen[name] {
						t.Errorf("node %s: the server was sent %s %d times, the hook saw %d", nodes[i].Name, name, n, seen[name])
					}
				}
				if len(sent) < 10 {
					t.Errorf("node %s was sent only %v: the calls did not reach it", nodes[i].Name, sent)
				}
			}
		})
	}
}
