package client

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/ring"
)

// These tests give the client a long network timeout, slow, so that a call
// that returns within prompt against a server that never answers was ended
// by its context. The two are far apart: a call ended by its context takes
// milliseconds, and a loaded machine under -race stretches that to a
// second at worst, not ten.
const (
	slow   = 30 * time.Second
	prompt = 10 * time.Second
)

// blackHole starts a TCP server that accepts connections and reads them but
// never answers, and returns its address.
func blackHole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { io.Copy(io.Discard, conn) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// ctxOps are the operations on one key, or a few, run with ctx.
func ctxOps(c *Client) map[string]func(ctx context.Context) error {
	return map[string]func(ctx context.Context) error{
		"Get":    func(ctx context.Context) error { _, err := c.Get(ctx, "k"); return err },
		"Set":    func(ctx context.Context) error { return c.Set(ctx, "k", []byte("v"), 0) },
		"Add":    func(ctx context.Context) error { return c.Add(ctx, "k", []byte("v"), 0) },
		"Delete": func(ctx context.Context) error { return c.Delete(ctx, "k") },
		"Incr":   func(ctx context.Context) error { _, err := c.Incr(ctx, "k", 1); return err },
		"Touch":  func(ctx context.Context) error { return c.Touch(ctx, "k", time.Minute) },
		"GetMulti": func(ctx context.Context) error {
			_, err := c.GetMulti(ctx, []string{"k", "k1", "k2", "k3"})
			return err
		},
		"SetMulti": func(ctx context.Context) error {
			return c.SetMulti(ctx, map[string][]byte{"k": nil, "k1": nil, "k2": nil}, 0)
		},
		"DeleteMulti": func(ctx context.Context) error { return c.DeleteMulti(ctx, []string{"k", "k1", "k2", "k3"}) },
	}
}

// TestCancelledContext checks that an operation given a context that is
// already cancelled returns context.Canceled at once and writes nothing.
func TestCancelledContext(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		if err := c.Set(t.Context(), "warm", nil, 0); err != nil { // connections are open
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		for name, op := range ctxOps(c) {
			start := time.Now()
			err := op(ctx)
			if d := time.Since(start); d > prompt {
				t.Errorf("%s with a cancelled context took %v", name, d)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context = %v; want context.Canceled", name, err)
			}
		}
		for _, k := range []string{"k", "k1", "k2"} {
			if h := cl.holders(t, k); len(h) != 0 {
				t.Errorf("a write with a cancelled context stored %q on %v", k, h)
			}
		}
	})
}

// TestContextDeadline runs every operation against a server that never
// answers, with a 100ms deadline: it must return context.DeadlineExceeded,
// wrapped in a *NodeError, well before the client's ReadTimeout.
func TestContextDeadline(t *testing.T) {
	for _, b := range []Backend{Redis, Memcached} {
		t.Run(b.String(), func(t *testing.T) {
			hole := ring.Node{Name: "hole", Addr: blackHole(t)}
			c, err := New(Options{Backend: b, Nodes: []ring.Node{hole}, ReadTimeout: slow, WriteTimeout: slow})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })

			for name, op := range ctxOps(c) {
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				start := time.Now()
				err := op(ctx)
				d := time.Since(start)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s with a 100ms deadline = %v; want context.DeadlineExceeded", name, err)
				}
				if d > prompt {
					t.Errorf("%s with a 100ms deadline returned after %v", name, d)
				}
				var ne *NodeError
				if !errors.As(err, &ne) || ne.Node.Addr != hole.Addr {
					t.Errorf("%s with a 100ms deadline = %v; want a *NodeError for %s", name, err, hole.Addr)
				}
			}
		})
	}
}

// TestCancelMidCall checks that cancelling the context of a Memcached call
// under way returns at once: gomemcache takes no context, so the client
// stops waiting for it.
func TestCancelMidCall(t *testing.T) {
	hole := ring.Node{Name: "hole", Addr: blackHole(t)}
	c, err := New(Options{Backend: Memcached, Nodes: []ring.Node{hole}, ReadTimeout: slow, WriteTimeout: slow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for name, op := range ctxOps(c) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		err := op(ctx)
		if d := time.Since(start); d > prompt {
			t.Errorf("%s cancelled after 50ms returned after %v", name, d)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s cancelled after 50ms = %v; want context.Canceled", name, err)
		}
	}
}
