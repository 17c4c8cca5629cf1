package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node/gutter"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// grClient: regular nodes on ss[:n-1], the gutter on ss[n-1]. The breaker is
// driven by hand (down.Store / the probe's two steps), so no probe runs.
func grClient(t *testing.T, backend Backend, ss []*testserver.Server, o Options) *Client {
	t.Helper()
	var nodes []ring.Node
	for i, s := range ss[:len(ss)-1] {
		nodes = append(nodes, ring.Node{Name: fmt.Sprintf("n%d", i), Addr: s.Addr})
	}
	o.Backend, o.Nodes = backend, nodes
	o.Gutter = []ring.Node{{Name: "g", Addr: ss[len(ss)-1].Addr}}
	if o.ReadTimeout == 0 { // out of a healthy node's reach on a busy machine
		o.ReadTimeout, o.WriteTimeout = faultTimeout, faultTimeout
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func grMember(c *Client, addr string) *member { return c.state.Load().conns[addr] }

// probeUp is what probeLoop does once the ping answered: comeUp, which
// replays the hints and marks the node up.
func probeUp(t *testing.T, m *member) {
	t.Helper()
	m.h.ComeUp(context.Background())
	if m.h.Down() {
		t.Fatal("not marked up")
	}
}

// TestGutterWritesDuringReplay: a writer keeps writing keys that home
// holds "old" while a real probe replays 60,000 hints: no write that
// returned reads home's old value once the node is up (the hints and the
// flip up share a lock).
func TestGutterWritesDuringReplay(t *testing.T) {
	ss := testserver.Redis(t, 2)
	c := grClient(t, Redis, ss, Options{FailureThreshold: 1, ProbeInterval: 20 * time.Millisecond})
	ctx := t.Context()
	keys := keysOn(c, ss[0].Addr, "w", 3000)
	for _, k := range keys {
		if err := c.Set(ctx, k, []byte("old"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	m := grMember(c, ss[0].Addr)
	resume := paused(t, ss[0])
	c.Get(ctx, keys[0])
	waitFor(t, "down", m.h.Down)
	// 60000 hints: ~60 DeleteMulti round trips on replay
	filler := make([]string, 60000)
	for i := range filler {
		filler[i] = fmt.Sprintf("filler%d", i)
	}
	m.hints.Add(filler...)
	var written []string
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, k := range keys {
			if !m.h.Down() {
				return
			}
			if c.Set(ctx, k, []byte("new"), time.Hour) == nil {
				mu.Lock()
				written = append(written, k)
				mu.Unlock()
			}
			time.Sleep(200 * time.Microsecond) // a pace, so that writes go on through the replay
		}
	}()
	waitFor(t, "writes through the gutter", func() bool { mu.Lock(); defer mu.Unlock(); return len(written) >= 10 })
	resume()
	<-done
	waitFor(t, "up", func() bool { return !m.h.Down() })
	stale := 0
	for _, k := range written {
		if v, _ := c.Get(ctx, k); string(v) == "old" {
			stale++
		}
	}
	t.Logf("%d writes returned nil while home was down; %d read back home's old value", len(written), stale)
	if stale > 0 {
		t.Errorf("%d keys read stale after their Set returned", stale)
	}
}

// TestGutterFlap: the replay deletes the gutter's copies too: a second
// outage within GutterTTL does not read the first's value over a later
// write at home.
func TestGutterFlap(t *testing.T) {
	ss := testserver.Redis(t, 2)
	c := grClient(t, Redis, ss, Options{})
	ctx := t.Context()
	k := keysOn(c, ss[0].Addr, "k", 1)[0]
	m := grMember(c, ss[0].Addr)
	m.h.SetDown(true)
	if err := c.Set(ctx, k, []byte("v1"), time.Hour); err != nil { // to the gutter
		t.Fatal(err)
	}
	probeUp(t, m)
	if err := c.Set(ctx, k, []byte("v2"), time.Hour); err != nil { // at home
		t.Fatal(err)
	}
	mustGet(t, c, k, "v2")
	m.h.SetDown(true) // a second outage within GutterTTL
	if v, err := c.Get(ctx, k); string(v) == "v1" {
		t.Errorf("Get after Set(v2) returned = %q, %v: the gutter's copy from the first outage", v, err)
	}
	if err := c.Delete(ctx, k); err != nil {
		t.Fatal(err)
	}
}

// TestGutterStraggler: a write routed to the gutter just before home came
// back deletes its key at home past its caller's context, so home never
// serves the old value after the write returned.
func TestGutterStraggler(t *testing.T) {
	ss := testserver.Redis(t, 2)
	c := grClient(t, Redis, ss, Options{})
	ctx := t.Context()
	k := keysOn(c, ss[0].Addr, "k", 1)[0]
	if err := c.Set(ctx, k, []byte("old"), time.Hour); err != nil {
		t.Fatal(err)
	}
	m := grMember(c, ss[0].Addr)
	m.h.SetDown(true)
	if _, ok := c.state.Load().conn(ring.Node{Addr: ss[0].Addr}).(*gutter.Node); !ok {
		t.Fatal("a write to the node held down is not routed to its gutter")
	}
	probeUp(t, m) // home back
	// The straggler: its gutter round trip done, then its caller's context
	// ends (a deadline) before Wrote's DeleteMulti at home.
	if err := c.gutterConns[ss[1].Addr].Node.Set(ctx, k, []byte("new"), DefaultGutterTTL); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	m.Wrote(cctx, k)
	v, err := c.Get(ctx, k)
	if string(v) == "old" {
		keys, _ := m.hints.Take()
		t.Errorf("after the straggler's Set returned nil, Get = %q, %v; hint parked: %v", v, err, keys)
	}
}

// TestGutterFlushRefused: past DefaultGutterHints the probe flushes home;
// a server that refuses the flush (memcached -F) stays down, its keys
// still served by the gutter, rather than serve what it held.
func TestGutterFlushRefused(t *testing.T) {
	home := testserver.MemcachedArgs(t, 1, "-F")
	gut := testserver.Memcached(t, 1)
	ss := append(home, gut...)
	rec := &logRecorder{}
	c := grClient(t, Memcached, ss, Options{FailureThreshold: 1, ProbeInterval: 20 * time.Millisecond, Logger: slog.New(rec)})
	ctx := t.Context()
	k := keysOn(c, ss[0].Addr, "k", 1)[0]
	m := grMember(c, ss[0].Addr)
	m.h.SetDown(true)
	var many []string
	for i := range DefaultGutterHints + 1 {
		many = append(many, fmt.Sprintf("x%d", i))
	}
	m.hints.Add(many...) // 65,537 distinct keys written through the gutter
	if err := c.Set(ctx, k, []byte("v"), time.Hour); err != nil {
		t.Fatal(err)
	}
	m.h.StartProbe()
	// The probe's ping answers, its flush is refused, twice.
	waitFor(t, "two refused flushes", func() bool { return len(rec.find("not replayed")) >= 2 })
	mustGet(t, c, k, "v") // from the gutter
	if !c.Health()[0].Down {
		t.Fatal("the node that refused the flush is up")
	}
}

// TestGutterAdd: an Add through the gutter answers for the gutter's copy:
// one refused there (the key written through the gutter already) hints
// nothing, so home's untouched counter survives the return.
func TestGutterAdd(t *testing.T) {
	ss := testserver.Redis(t, 2)
	c := grClient(t, Redis, ss, Options{})
	ctx := t.Context()
	keys := keysOn(c, ss[0].Addr, "ctr", 2)
	ctr, other := keys[0], keys[1]
	if _, err := c.Incr(ctx, ctr, 5); err != nil {
		t.Fatal(err)
	}
	m := grMember(c, ss[0].Addr)
	m.h.SetDown(true)
	if _, err := c.Incr(ctx, ctr, 1); !errors.Is(err, ErrNodeDown) {
		t.Fatalf("Incr with home down: %v; want ErrNodeDown", err)
	}
	if err := c.Set(ctx, other, []byte("g"), time.Hour); err != nil {
		t.Fatal(err)
	}
	m.hints.Take() // as if replayed: only the refused Add below may hint
	if err := c.Add(ctx, other, []byte("x"), time.Hour); !errors.Is(err, ErrNotStored) {
		t.Fatalf("Add of a key on the gutter: %v; want ErrNotStored", err)
	}
	if keys, _ := m.hints.Take(); len(keys) != 0 {
		t.Fatalf("a refused Add hinted %v", keys)
	}
	probeUp(t, m)
	if v, err := c.Incr(ctx, ctr, 1); err != nil || v != 6 {
		t.Fatalf("Incr back home = %d, %v; want 6", v, err)
	}
}

// TestGutterGetMultiSharedGutter: on Memcached, a GetMulti over two down
// nodes that share one gutter has two batches for it: neither waits for
// the other's connection (the gutter is a node.Sender), with PoolSize 1:
// one that did would fail on the pool's timeout.
func TestGutterGetMultiSharedGutter(t *testing.T) {
	ss := testserver.Memcached(t, 3)
	c := grClient(t, Memcached, ss, Options{PoolSize: 1})
	ctx := t.Context()
	a, b := keysOn(c, ss[0].Addr, "a", 1)[0], keysOn(c, ss[1].Addr, "b", 1)[0]
	grMember(c, ss[0].Addr).h.SetDown(true)
	grMember(c, ss[1].Addr).h.SetDown(true)
	start := time.Now()
	if _, err := c.GetMulti(ctx, []string{a, b}); err != nil {
		t.Errorf("GetMulti over two guttered nodes: %v (after %v)", err, time.Since(start))
	}
}

// TestGutterNotRegular: a gutter node is refused as a regular one by
// Placement and Reshard too, not only by Options.Nodes.
func TestGutterNotRegular(t *testing.T) {
	ss := testserver.Redis(t, 2)
	g := ring.Node{Name: "g", Addr: ss[1].Addr}
	r, _ := ring.New([]ring.Node{{Name: "a", Addr: ss[0].Addr}, g})
	c, err := New(Options{Placement: r, Gutter: []ring.Node{g}})
	if err == nil {
		c.Close()
		t.Errorf("Placement naming the gutter node: accepted")
	}
	c, err = New(Options{Nodes: []ring.Node{{Name: "a", Addr: ss[0].Addr}}, Gutter: []ring.Node{g}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Reshard([]ring.Node{{Name: "a", Addr: ss[0].Addr}, g}, 0); err == nil {
		t.Errorf("Reshard onto the gutter node: accepted; member shared: %v", c.state.Load().conns[g.Addr] == c.gutterConns[g.Addr])
	}
}

// TestGutterOnlyProbeMarksUp: with a gutter, an answered call never marks
// its node up (only the probe does, after the hints): a call that finished
// as another tripped the breaker used to.
func TestGutterOnlyProbeMarksUp(t *testing.T) {
	ss := testserver.Redis(t, 2)
	c := grClient(t, Redis, ss, Options{FailureThreshold: 1, DisableStats: true})
	m := grMember(c, ss[0].Addr)
	h := m.h
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				h.Done(ctx, 0, time.Time{}, nil) // an answered call finishing
			}
		})
	}
	upByDone, trips := 0, 0
	for range 200000 {
		if h.Failure() {
			trips++ // tripped (no probe started: we are not Done)
			for range 50 {
				if !h.Down() {
					upByDone++
					break
				}
			}
			h.SetDown(false)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d trips", trips)
	if upByDone > 0 {
		t.Errorf("%d times a node tripped down was marked up by Done, no probe, no beforeUp", upByDone)
	}
}

// TestGutterNearCache: a near copy of home's value is not read after a
// write through the gutter, nor after the return.
func TestGutterNearCache(t *testing.T) {
	for _, b := range []Backend{Redis, Memcached} {
		t.Run(b.String(), func(t *testing.T) {
			var ss []*testserver.Server
			if b == Redis {
				ss = testserver.Redis(t, 2)
			} else {
				ss = testserver.Memcached(t, 2)
			}
			c := grClient(t, b, ss, Options{NearCache: &NearCache{}})
			ctx := t.Context()
			k := keysOn(c, ss[0].Addr, "k", 1)[0]
			c.Set(ctx, k, []byte("old"), time.Hour)
			mustGet(t, c, k, "old")
			mustGet(t, c, k, "old") // near copy
			m := grMember(c, ss[0].Addr)
			m.h.SetDown(true)
			if err := c.Set(ctx, k, []byte("new"), time.Hour); err != nil {
				t.Fatal(err)
			}
			mustGet(t, c, k, "new")
			probeUp(t, m)
			if v, err := c.Get(ctx, k); string(v) == "old" {
				t.Errorf("near/home stale after return: %q %v", v, err)
			}
		})
	}
}

// TestGutterGetMultiConcurrent: 16 callers' GetMulti over two down nodes
// sharing a gutter, PoolSize 4: none fails on the pool.
func TestGutterGetMultiConcurrent(t *testing.T) {
	ss := testserver.Memcached(t, 3)
	c := grClient(t, Memcached, ss, Options{PoolSize: 4})
	ctx := t.Context()
	a, b := keysOn(c, ss[0].Addr, "a", 1)[0], keysOn(c, ss[1].Addr, "b", 1)[0]
	grMember(c, ss[0].Addr).h.SetDown(true)
	grMember(c, ss[1].Addr).h.SetDown(true)
	var mu sync.Mutex
	var worst time.Duration
	timeouts := 0
	var wg sync.WaitGroup
	end := time.Now().Add(time.Second)
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(end) {
				s := time.Now()
				_, err := c.GetMulti(ctx, []string{a, b})
				d := time.Since(s)
				mu.Lock()
				worst = max(worst, d)
				if err != nil {
					timeouts++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("worst GetMulti %v, %d failed", worst, timeouts)
	if timeouts > 0 {
		t.Errorf("worst GetMulti %v, %d failed (pool timeouts)", worst, timeouts)
	}
}

// TestGutterHealth: Health lists the gutter's nodes, marked, after the
// others.
func TestGutterHealth(t *testing.T) {
	ss := testserver.Redis(t, 2)
	c := grClient(t, Redis, ss, Options{})
	h := c.Health()
	if len(h) != 2 || h[0].Gutter || !h[1].Gutter || h[1].Node.Addr != ss[1].Addr {
		t.Fatalf("Health = %+v; want the regular node, then the gutter's", h)
	}
}
