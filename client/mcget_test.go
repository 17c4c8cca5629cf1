package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// TestMemcachedGetAnswers reads single-key Get answers from a fake server:
// a hit with its flags and CAS id, a miss, and each way an answer can be
// wrong, which is an error (never a panic or a wrong value) and closes the
// connection. A hit and a miss leave it in the pool.
func TestMemcachedGetAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, reply string
		want        *item // nil: a miss or an error
		wantErr     string
		is          error // the error errors.Is must find, beside wantErr
	}{
		{name: "hit", reply: "VALUE k 7 3 11\r\nabc\r\nEND\r\n", want: &item{value: []byte("abc"), flags: 7, cas: 11}},
		{name: "empty value", reply: "VALUE k 0 0 12\r\n\r\nEND\r\n", want: &item{value: []byte{}, cas: 12}},
		{name: "without cas", reply: "VALUE k 1 2\r\nhi\r\nEND\r\n", want: &item{value: []byte("hi"), flags: 1}},
		{name: "miss", reply: "END\r\n", is: ErrCacheMiss},
		{name: "server error", reply: "SERVER_ERROR out of memory\r\n", wantErr: "SERVER_ERROR"},
		{name: "login refused", reply: "CLIENT_ERROR unauthenticated\r\n", wantErr: "unauthenticated", is: ErrAuth},
		{name: "malformed line", reply: "VALUE k 0 x 1\r\n", wantErr: "bad line"},
		{name: "another key", reply: "VALUE z 0 1 1\r\nz\r\nEND\r\n", wantErr: "unexpected key"},
		{name: "no CR LF after the value", reply: "VALUE k 0 1 1\r\nabcEND\r\n", wantErr: "not followed by CR LF"},
		{name: "no END after the value", reply: "VALUE k 0 1 1\r\na\r\nVALUE\r\n", wantErr: "VALUE"},
		{name: "cut short", reply: "VALUE k 0 10 1\r\nabc", wantErr: "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			p := fakeMemcached(t, tc.reply, got)
			it, err := p.getItem(context.Background(), "k")
			if req := <-got; req != "gets k\r\n" {
				t.Errorf("request %q", req)
			}
			switch {
			case tc.want != nil:
				if err != nil {
					t.Fatal(err)
				}
				if !it.found || it.key != "k" || string(it.value) != string(tc.want.value) || it.flags != tc.want.flags || it.cas != tc.want.cas {
					t.Errorf("item %+v; want %q flags %d cas %d", it, tc.want.value, tc.want.flags, tc.want.cas)
				}
				if it.value == nil || cap(it.value) != len(it.value) {
					t.Errorf("value nil or with room past its end (cap %d, len %d)", cap(it.value), len(it.value))
				}
			case tc.is == ErrCacheMiss:
				if err != ErrCacheMiss || it.found {
					t.Fatalf("miss: %+v, %v; want ErrCacheMiss itself", it, err)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || (tc.is != nil && !errors.Is(err, tc.is)) {
					t.Fatalf("err = %v, want one with %q (errors.Is %v)", err, tc.wantErr, tc.is)
				}
				if len(p.idle) != 0 {
					t.Error("a connection that answered wrongly went back to the pool")
				}
				return
			}
			if len(p.idle) != 1 {
				t.Error("the connection did not go back to the pool")
			}
		})
	}
}

// TestMemcachedGetLargeValue: a value many times the connection's read
// buffer comes back whole from a real memcached, with its flags and a CAS
// id that a CompareAndSwap then succeeds with, in a buffer of exactly its
// size; the connection serves the next Get.
func TestMemcachedGetLargeValue(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	c, err := New(Options{Backend: Memcached, Nodes: []ring.Node{{Name: "n0", Addr: s.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	big := bytes.Repeat([]byte("0123456789abcdef\r\n"), 512<<10/18) // ~512 KiB, CR LFs inside
	if err := c.Store(ctx, StoreSet, Item{Key: "big", Value: big, Flags: 42}); err != nil {
		t.Fatal(err)
	}
	it, err := c.GetItem(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(it.Value, big) || it.Flags != 42 || it.CasID == 0 {
		t.Fatalf("GetItem: %d bytes (equal %v), flags %d, cas %d; want %d bytes, flags 42, a cas", len(it.Value), bytes.Equal(it.Value, big), it.Flags, it.CasID, len(big))
	}
	if cap(it.Value) != len(it.Value) {
		t.Errorf("value of %d bytes in a buffer of %d", len(it.Value), cap(it.Value))
	}
	if err := c.Store(ctx, StoreCAS, Item{Key: "big", Value: []byte("small"), CasID: it.CasID}); err != nil {
		t.Fatalf("CompareAndSwap with the CasID Get returned: %v", err)
	}
	if v, err := c.Get(ctx, "big"); err != nil || string(v) != "small" {
		t.Fatalf("Get after the swap = %q, %v", v, err)
	}
}

// armedConn is a connection that, after a Write, closes the channel armed
// holds, if any: a request is then on its way to the server.
type armedConn struct {
	net.Conn
	armed *atomic.Pointer[chan struct{}]
}

func (c armedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if ch := c.armed.Swap(nil); ch != nil {
		close(*ch)
	}
	return n, err
}

// TestMemcachedGetStalledNode: a Get to a node that has stopped answering
// (SIGSTOP) returns as soon as its context ends, with the context's error,
// long before the node's own timeout, and that does not count against the
// node; a Get the node's own timeout ends does, as before. Once the node
// answers again, the next Gets read their own answers: the connection the
// abandoned request went out on was not reused.
func TestMemcachedGetStalledNode(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	var armed atomic.Pointer[chan struct{}]
	client := func(timeout time.Duration) *Client {
		c, err := New(Options{Backend: Memcached, Nodes: []ring.Node{{Name: "n0", Addr: s.Addr}},
			ReadTimeout: timeout, WriteTimeout: timeout, FailureThreshold: 100,
			NewMemcacheClient: func(_ ring.Node, mc *memcache.Client) *memcache.Client {
				dial := mc.DialContext
				mc.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					conn, err := dial(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return armedConn{Conn: conn, armed: &armed}, nil
				}
				return mc
			}})
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

	// Cancelled once the request is written: the node's minute is not
	// waited for (waitCancelled gives up well before).
	sent := make(chan struct{})
	armed.Store(&sent)
	ctx, cancel := context.WithCancel(t.Context())
	errc := get(patient, ctx)
	select {
	case <-sent:
	case err := <-errc:
		t.Fatalf("Get on a stalled node returned %v before it sent its request", err)
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
	if h := health(t, patient, s.Addr); h.Failures != 0 || h.Down {
		t.Errorf("after Gets their callers gave up on: %+v; want no failure counted", h)
	}

	// The node's own timeout: a failure of the node's.
	if _, err := hasty.Get(t.Context(), "k"); err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get past the node's timeout = %v; want the node's timeout", err)
	}
	if h := health(t, hasty, s.Addr); h.Failures != 1 {
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
	before := health(t, c, victim.Addr)
	for round := range 30 {
		if _, err := c.Get(t.Context(), keys[round%len(keys)]); err != ErrCacheMiss {
			t.Fatalf("round %d after the restart: %v; want ErrCacheMiss", round, err)
		}
	}
	if h := health(t, c, victim.Addr); h.Down || h.Downs != before.Downs || h.Failures != before.Failures {
		t.Errorf("after the restart: %+v; %d more failures", h, h.Failures-before.Failures)
	}
	if err := c.Set(t.Context(), keys[0], []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(t.Context(), keys[0]); err != nil || string(v) != "v" {
		t.Fatalf("Get after the restart = %q, %v", v, err)
	}
}

// TestMemcachedBatchAnswers: a batch of waiting Gets (Options.AutoPipeline)
// is one "gets" of its distinct keys; each waiter gets its own answer, a
// key's second waiter a copy of the value, and a wrong answer fails every
// waiter and closes the connection.
func TestMemcachedBatchAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, reply string
		wantErr     string
	}{
		{name: "hit and miss", reply: "VALUE a 0 1 1\r\nx\r\nEND\r\n"},
		{name: "malformed", reply: "VALUE a 0 x 1\r\n", wantErr: "bad line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			n := mcNode{raw: fakeMemcached(t, tc.reply, got), batch: &mcBatcher{busy: true}}
			var batch []*mcWaiter
			for _, k := range []string{"a", "b", "a"} {
				batch = append(batch, &mcWaiter{key: k, done: make(chan struct{})})
			}
			n.batch.run(n, batch)
			if req := <-got; req != "gets a b\r\n" {
				t.Errorf("request %q", req)
			}
			for _, w := range batch {
				<-w.done
			}
			if tc.wantErr != "" {
				for _, w := range batch {
					if w.err == nil || !strings.Contains(w.err.Error(), tc.wantErr) {
						t.Errorf("waiter %s: %q, %v; want an error with %q", w.key, w.value, w.err, tc.wantErr)
					}
				}
				if len(n.raw.idle) != 0 {
					t.Error("a connection that answered wrongly went back to the pool")
				}
				return
			}
			a1, b, a2 := batch[0], batch[1], batch[2]
			if a1.err != nil || string(a1.value) != "x" || a2.err != nil || string(a2.value) != "x" {
				t.Errorf("waiters of a: %q, %v and %q, %v; want x twice", a1.value, a1.err, a2.value, a2.err)
			}
			if &a1.value[0] == &a2.value[0] {
				t.Error("the two waiters of a share one buffer")
			}
			if b.err != ErrCacheMiss {
				t.Errorf("waiter of b: %q, %v; want ErrCacheMiss", b.value, b.err)
			}
			if len(n.raw.idle) != 1 {
				t.Error("the connection did not go back to the pool")
			}
		})
	}
}

// TestMemcachedAskPartialAnswer: a pooled connection that ends with EOF
// after part of an answer fails the call (a server that died mid-answer);
// it is not asked again, which would mix the dead connection's values with
// the next one's answer (a batcher's waiters would get them as hits).
func TestMemcachedAskPartialAnswer(t *testing.T) {
	var conns atomic.Int32
	p := &rawConns{addr: "fake", timeout: 2 * time.Second, maxIdle: 1}
	p.dial = func(context.Context, string, string) (net.Conn, error) {
		n := conns.Add(1)
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			r := bufio.NewReader(server)
			for req := 0; ; req++ {
				if _, err := r.ReadString('\n'); err != nil {
					return
				}
				switch {
				case n == 1 && req == 0: // a first call, to pool the connection
					server.Write([]byte("END\r\n"))
				case n == 1: // a's value, then the server dies before END
					server.Write([]byte("VALUE a 0 3 1\r\nold\r\n"))
					return
				default: // the restarted server: empty
					server.Write([]byte("END\r\n"))
				}
			}
		}()
		return client, nil
	}
	ctx := context.Background()
	var out1 [1]answer
	c, err := p.ask(ctx, opGet, []string{"x"}, out1[:])
	c.end(err)
	if err != ErrCacheMiss || !c.pooled && conns.Load() != 1 {
		t.Fatalf("first ask: %v", err)
	}
	out := make([]answer, 2)
	c, err = p.ask(ctx, opGet, []string{"a", "b"}, out)
	if c.rawConn != nil {
		c.end(err)
	}
	if err == nil || err == ErrCacheMiss || conns.Load() != 1 {
		t.Errorf("ask after part of an answer: %v on %d connections; want the connection's EOF, and no second connection", err, conns.Load())
	}
}
