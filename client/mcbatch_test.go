package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// wireGets records the keys of every "gets" command written to a Memcached
// node, one entry per command.
type wireGets struct {
	mu   sync.Mutex
	cmds [][]string
}

type wireConn struct {
	net.Conn
	w *wireGets
}

func (c wireConn) Write(p []byte) (int, error) {
	c.w.mu.Lock()
	for _, line := range strings.Split(string(p), "\r\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "gets" {
			c.w.cmds = append(c.w.cmds, f[1:])
		}
	}
	c.w.mu.Unlock()
	return c.Conn.Write(p)
}

func (w *wireGets) commands() [][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]string(nil), w.cmds...)
}

// batchedClient is a Memcached client with AutoPipeline on one node, long
// timeouts, and its "gets" commands recorded.
func batchedClient(t *testing.T, s *testserver.Server) (*Client, *mcBatcher, *wireGets) {
	t.Helper()
	w := &wireGets{}
	c, err := New(Options{
		Backend:      Memcached,
		Nodes:        []ring.Node{{Name: "n0", Addr: s.Addr}},
		AutoPipeline: true,
		ReadTimeout:  time.Minute,
		WriteTimeout: time.Minute,
		NewMemcacheClient: func(_ ring.Node, mc *memcache.Client) *memcache.Client {
			dial := mc.DialContext
			mc.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := dial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return wireConn{conn, w}, nil
			}
			return mc
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, c.state.Load().own[s.Addr].(mcNode).batch, w
}

// loneGet starts a Get of key through c's batcher b, which has none in
// flight, against a paused node, and waits until it is the Get in flight;
// its error comes on the channel once the node answers.
func loneGet(t *testing.T, c *Client, b *mcBatcher, key string) <-chan error {
	t.Helper()
	lone := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), key)
		lone <- err
	}()
	waitFor(t, "the lone Get in flight", func() bool {
		select {
		case err := <-lone:
			t.Fatalf("lone Get returned early: %v", err)
		default:
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.busy
	})
	return lone
}

func (b *mcBatcher) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// TestMemcachedBatch: while one Get is in flight on a node that does not
// answer, the Gets that arrive wait, and go together in one multi-get when
// it ends; each caller gets its own answer (hits, misses, the same key
// twice), and Stats counts each as a Get.
func TestMemcachedBatch(t *testing.T) {
	ss := testserver.Memcached(t, 1)
	c, b, wire := batchedClient(t, ss[0])
	ctx := context.Background()
	const hits = 6
	for i := range hits {
		if err := c.Set(ctx, fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("v%d", i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := c.Get(ctx, "k0"); err != nil || string(v) != "v0" {
		t.Fatalf("lone Get = %q, %v", v, err)
	}
	resume := paused(t, ss[0])
	lone := loneGet(t, c, b, "k0")
	keys := []string{"k1", "k2", "k3", "k4", "k5", "k1", "absent1", "absent2"}
	type answer struct {
		v   []byte
		err error
	}
	answers := make([]chan answer, len(keys))
	for i, k := range keys {
		answers[i] = make(chan answer, 1)
		go func() {
			v, err := c.Get(ctx, k)
			answers[i] <- answer{v, err}
		}()
	}
	waitFor(t, "the Gets waiting", func() bool { return b.waiting() == len(keys) })
	resume()
	if err := <-lone; err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		a := <-answers[i]
		want := "v" + strings.TrimPrefix(k, "k")
		switch {
		case strings.HasPrefix(k, "absent"):
			if !errors.Is(a.err, ErrCacheMiss) {
				t.Errorf("Get %s: %q, %v; want ErrCacheMiss", k, a.v, a.err)
			}
		case a.err != nil || string(a.v) != want:
			t.Errorf("Get %s = %q, %v; want %q", k, a.v, a.err, want)
		}
	}
	cmds := wire.commands()
	batch := cmds[len(cmds)-1]
	if len(batch) != len(keys)-1 { // k1 asked once
		t.Fatalf("last gets command %v; want the %d distinct keys waiting in one", batch, len(keys)-1)
	}
	g := c.Stats().Nodes[0].Op("get")
	if want := int64(2 + len(keys)); g.OK != want || g.Hits != want-2 || g.Misses != 2 {
		t.Fatalf("Stats get: %+v; want %d ok, %d hits, 2 misses", g, want, want-2)
	}
}

// TestMemcachedBatchCancel: a Get waiting for a batch returns when its
// context ends, with the context's error; the batch then still serves the
// others.
func TestMemcachedBatchCancel(t *testing.T) {
	ss := testserver.Memcached(t, 1)
	c, b, _ := batchedClient(t, ss[0])
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	resume := paused(t, ss[0])
	lone := loneGet(t, c, b, "k")
	cctx, cancel := context.WithCancel(ctx)
	cancelled, other := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := c.Get(cctx, "k")
		cancelled <- err
	}()
	go func() {
		v, err := c.Get(ctx, "k")
		if err == nil && string(v) != "v" {
			err = fmt.Errorf("got %q", v)
		}
		other <- err
	}()
	waitFor(t, "the Gets waiting", func() bool { return b.waiting() == 2 })
	cancel()
	waitCancelled(t, "a Get waiting for its batch", cancelled)
	resume()
	if err := <-lone; err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatalf("the other waiter: %v", err)
	}
}

// TestMemcachedBatchNodeError: when the node dies, every Get waiting in the
// batch gets the node's error as a *NodeError, and each counts as a failure.
func TestMemcachedBatchNodeError(t *testing.T) {
	ss := testserver.Memcached(t, 1)
	c, b, _ := batchedClient(t, ss[0])
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	ss[0].Pause() // not paused(): this test kills the node, which its resume would then signal
	waitFor(t, "the server stopped", ss[0].Paused)
	lone := loneGet(t, c, b, "k")
	const waiters = 5
	errs := make(chan error, waiters)
	for i := range waiters {
		go func() {
			_, err := c.Get(ctx, fmt.Sprintf("w%d", i))
			errs <- err
		}()
	}
	waitFor(t, "the Gets waiting", func() bool { return b.waiting() == waiters })
	ss[0].Stop()
	var ne *NodeError
	if err := <-lone; !errors.As(err, &ne) {
		t.Fatalf("lone Get of a killed node: %v, want a *NodeError", err)
	}
	for range waiters {
		if err := <-errs; !errors.As(err, &ne) {
			t.Fatalf("waiting Get of a killed node: %v, want a *NodeError", err)
		}
	}
	if f := c.Health()[0].Failures; f != 1+waiters {
		t.Fatalf("%d failures counted; want %d", f, 1+waiters)
	}
}

// TestMemcachedBatchConcurrent: many callers Get and Set the same few keys
// at once through the batcher; every Get returns a value that was stored
// under its key, and every call is counted.
func TestMemcachedBatchConcurrent(t *testing.T) {
	ss := testserver.Memcached(t, 1)
	c, _, wire := batchedClient(t, ss[0])
	ctx := context.Background()
	const keys, callers, rounds = 16, 64, 40
	for i := range keys {
		if err := c.Set(ctx, fmt.Sprintf("c%d", i), []byte(fmt.Sprintf("c%d:0", i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, callers)
	for g := range callers {
		go func() {
			errc <- func() error {
				for r := range rounds {
					k := fmt.Sprintf("c%d", (g+r)%keys)
					if g%8 == 0 {
						if err := c.Set(ctx, k, []byte(fmt.Sprintf("%s:%d", k, g)), 0); err != nil {
							return err
						}
						continue
					}
					use := ctx
					if g%2 == 1 {
						use = cctx // a context that can end: call's other path
					}
					v, err := c.Get(use, k)
					if err != nil || !strings.HasPrefix(string(v), k+":") {
						return fmt.Errorf("Get %s = %q, %v", k, v, err)
					}
				}
				return nil
			}()
		}()
	}
	for range callers {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if g := c.Stats().Nodes[0].Op("get"); g.OK != callers*7/8*rounds || g.Hits != g.OK {
		t.Fatalf("Stats get: %+v; want %d hits", g, callers*7/8*rounds)
	}
	gets := 0
	for _, cmd := range wire.commands() {
		gets += len(cmd)
	}
	if gets > callers*7/8*rounds {
		t.Fatalf("%d keys asked of the node for %d Gets", gets, callers*7/8*rounds)
	}
}
