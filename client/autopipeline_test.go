package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node/redisnode"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// batchHook counts the commands that reach a go-redis client in pipelines
// and one by one, by name.
type batchHook struct {
	mu        sync.Mutex
	pipelined map[string]int
	alone     map[string]int
}

func newBatchHook() *batchHook {
	return &batchHook{pipelined: map[string]int{}, alone: map[string]int{}}
}

func (*batchHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b *batchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		b.mu.Lock()
		b.alone[cmd.Name()]++
		b.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (b *batchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		b.mu.Lock()
		for _, c := range cmds {
			b.pipelined[c.Name()]++
		}
		b.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (b *batchHook) counts(name string) (pipelined, alone int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pipelined[name], b.alone[name]
}

// TestAutoPipeline runs every single-key call from concurrent callers with
// Options.AutoPipeline on real redis-servers: each gets its own answer, the
// calls ride the auto-pipeliner's batches, and Stats counts each call.
// (Without AutoPipeline every one of these commands goes alone.)
func TestAutoPipeline(t *testing.T) {
	cl := newCluster(t, "redis-autopipeline", 2)
	hook := newBatchHook()
	c := cl.client(t, Options{NewRedisClient: func(_ ring.Node, opt *redis.Options) *redis.Client {
		rdb := redis.NewClient(opt)
		rdb.AddHook(hook)
		return rdb
	}})
	ctx := context.Background()
	const callers, rounds = 32, 5
	errc := make(chan error, callers)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- func() error {
				for r := range rounds {
					k := fmt.Sprintf("ap:%d:%d", g, r)
					v := []byte(k)
					if err := c.Set(ctx, k, v, time.Hour); err != nil {
						return fmt.Errorf("Set %s: %w", k, err)
					}
					if got, err := c.Get(ctx, k); err != nil || string(got) != k {
						return fmt.Errorf("Get %s = %q, %v", k, got, err)
					}
					if err := c.Add(ctx, k, v, time.Hour); !errors.Is(err, ErrNotStored) {
						return fmt.Errorf("Add of present %s: %v, want ErrNotStored", k, err)
					}
					if err := c.Touch(ctx, k, time.Hour); err != nil {
						return fmt.Errorf("Touch %s: %w", k, err)
					}
					if err := c.Delete(ctx, k); err != nil {
						return fmt.Errorf("Delete %s: %w", k, err)
					}
					if _, err := c.Get(ctx, k); !errors.Is(err, ErrCacheMiss) {
						return fmt.Errorf("Get of deleted %s: %v, want ErrCacheMiss", k, err)
					}
					if err := c.Touch(ctx, k, time.Hour); !errors.Is(err, ErrCacheMiss) {
						return fmt.Errorf("Touch of deleted %s: %v, want ErrCacheMiss", k, err)
					}
					if err := c.Add(ctx, k, v, 0); err != nil {
						return fmt.Errorf("Add of absent %s: %w", k, err)
					}
					n := "n" + k
					for i := int64(1); i <= 3; i++ {
						if got, err := c.Incr(ctx, n, 1); err != nil || got != i {
							return fmt.Errorf("Incr %s = %d, %v; want %d", n, got, err, i)
						}
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}

	const calls = callers * rounds
	shared := 0
	for _, name := range []string{"get", "set", "del", "pexpire", "incrby"} {
		p, a := hook.counts(name)
		want := calls
		switch name {
		case "get", "pexpire":
			want = 2 * calls
		case "set":
			want = 3 * calls // Set and two Adds (SET NX)
		case "incrby":
			want = 3 * calls
		}
		// A batch of one goes alone (go-redis's fast path).
		if p+a != want {
			t.Errorf("%s: %d pipelined, %d alone; want %d", name, p, a, want)
		}
		shared += p
	}
	if shared == 0 {
		t.Error("no call shared a pipeline")
	}
	got := map[string]OpStats{}
	for _, ns := range c.Stats().Nodes {
		for _, o := range ns.Ops {
			s := got[o.Op]
			s.OK += o.OK
			s.Hits += o.Hits
			s.Misses += o.Misses
			got[o.Op] = s
		}
	}
	want := map[string]OpStats{
		"get":    {OK: 2 * calls, Hits: calls, Misses: calls},
		"set":    {OK: calls},
		"add":    {OK: 2 * calls},
		"touch":  {OK: 2 * calls},
		"delete": {OK: calls},
		"incr":   {OK: 3 * calls},
	}
	for op, w := range want {
		if g := got[op]; g.OK != w.OK || g.Hits != w.Hits || g.Misses != w.Misses {
			t.Errorf("Stats %s: ok %d hits %d misses %d; want ok %d hits %d misses %d",
				op, g.OK, g.Hits, g.Misses, w.OK, w.Hits, w.Misses)
		}
	}
}

// TestAutoPipelineContext: callers waiting for a batch on a node that does
// not answer return when their context ends, with the context's error, long
// before the node's timeouts; the node is not held against them, and once
// it answers again the call that was alone on the wire (sent without the
// auto-pipeliner, with go-redis's usual context handling) gets its value.
func TestAutoPipelineContext(t *testing.T) {
	ss := testserver.Redis(t, 1)
	c, err := New(Options{
		Backend:      Redis,
		Nodes:        []ring.Node{{Name: "n0", Addr: ss[0].Addr}},
		AutoPipeline: true,
		ReadTimeout:  time.Minute,
		WriteTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	ap := c.state.Load().own[ss[0].Addr].Node.(*redisnode.Node)
	resume := paused(t, ss[0])
	lone := make(chan error, 1)
	go func() {
		v, err := c.Get(ctx, "k")
		if err == nil && string(v) != "v" {
			err = fmt.Errorf("got %q", v)
		}
		lone <- err
	}()
	waitFor(t, "the first Get under way", func() bool { return ap.CallsUnderWay() == 1 })

	const waiters = 4
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := c.Get(cctx, "k")
			done <- err
		}()
	}
	waitFor(t, "the Gets queued", func() bool { return ap.CallsUnderWay() == 1+waiters })
	cancel()
	for range waiters {
		waitCancelled(t, "a Get queued for the paused node", done)
	}
	resume()
	if err := <-lone; err != nil {
		t.Fatalf("the lone Get after resume: %v", err)
	}
	if v, err := c.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get after resume = %q, %v", v, err)
	}
	for _, h := range c.Health() {
		if h.Down || h.Failures != 0 {
			t.Fatalf("health after cancelled calls: %+v", h)
		}
	}
}

// TestAutoPipelineNodeDown: a batch that fails on the network fails every
// caller in it with a *NodeError, and counts against the node as the same
// calls would without auto-pipelining.
func TestAutoPipelineNodeDown(t *testing.T) {
	cl := newCluster(t, "redis-autopipeline", 1)
	c := cl.client(t, Options{FailureThreshold: 1 << 20})
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	cl.stop(0)
	const callers = 8
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Get(ctx, "k")
			var ne *NodeError
			if errors.As(err, &ne) {
				failed.Add(1)
			} else {
				t.Errorf("Get of a stopped node: %v, want a *NodeError", err)
			}
		}()
	}
	wg.Wait()
	if f := c.Health()[0].Failures; f != callers || failed.Load() != callers {
		t.Fatalf("%d callers failed, %d failures counted; want %d each", failed.Load(), f, callers)
	}
}

// TestAutoPipelineGetMulti: with Options.AutoPipeline, GetMulti's MGET to
// a node joins the auto-pipeliner's batch while other calls to that node are
// under way, and goes alone when there are none: concurrent callers each
// get exactly their own hits and misses, some MGETs share a pipeline, a
// lone caller's never do, and Stats counts every key.
func TestAutoPipelineGetMulti(t *testing.T) {
	cl := newCluster(t, "redis-autopipeline", 2)
	hook := newBatchHook()
	c := cl.client(t, Options{NewRedisClient: func(_ ring.Node, opt *redis.Options) *redis.Client {
		rdb := redis.NewClient(opt)
		rdb.AddHook(hook)
		return rdb
	}})
	ctx := context.Background()
	const callers, rounds, perCall = 32, 5, 40
	keys := make([]string, perCall)
	items := map[string][]byte{}
	for i := range keys {
		keys[i] = fmt.Sprintf("apm:%d", i)
		if i%4 != 0 { // one key in four is a miss
			items[keys[i]] = []byte("v" + keys[i])
		}
	}
	if err := c.SetMulti(ctx, items, time.Hour); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, k := range keys {
		nodes[c.Locate(k).Addr] = true
	}
	if len(nodes) != 2 {
		t.Fatalf("the keys reach %d of 2 nodes", len(nodes))
	}
	check := func() error { return getAll(ctx, c, keys, items) }
	// Alone first: one call at a time, every MGET sent at once.
	for range rounds {
		if err := check(); err != nil {
			t.Fatal(err)
		}
	}
	if p, a := hook.counts("mget"); p != 0 || a != 2*rounds {
		t.Fatalf("lone caller: %d MGETs pipelined, %d alone; want 0 and %d", p, a, 2*rounds)
	}
	errc := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range rounds {
				if err := check(); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	calls := (callers + 1) * rounds
	p, a := hook.counts("mget")
	if p+a != 2*calls {
		t.Errorf("%d MGETs pipelined, %d alone; want %d in all", p, a, 2*calls)
	}
	if p == 0 {
		t.Error("no MGET shared a pipeline")
	}
	var s OpStats
	for _, ns := range c.Stats().Nodes {
		for _, o := range ns.Ops {
			if o.Op == "get_multi" {
				s.OK, s.Hits, s.Misses = s.OK+o.OK, s.Hits+o.Hits, s.Misses+o.Misses
			}
		}
	}
	if want := (OpStats{OK: 2 * int64(calls), Hits: int64(calls * len(items)), Misses: int64(calls * (perCall - len(items)))}); s.OK != want.OK || s.Hits != want.Hits || s.Misses != want.Misses {
		t.Errorf("Stats get_multi: ok %d hits %d misses %d; want ok %d hits %d misses %d", s.OK, s.Hits, s.Misses, want.OK, want.Hits, want.Misses)
	}
}

// getAll checks that GetMulti of keys through c finds exactly items.
func getAll(ctx context.Context, c *Client, keys []string, items map[string][]byte) error {
	got, err := c.GetMulti(ctx, keys)
	if err != nil {
		return err
	}
	if len(got) != len(items) {
		return fmt.Errorf("%d hits, want %d", len(got), len(items))
	}
	for k, v := range items {
		if string(got[k]) != string(v) {
			return fmt.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	return nil
}
