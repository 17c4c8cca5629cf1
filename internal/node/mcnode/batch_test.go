package mcnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/testserver"
)

// wireGets records the keys of every "gets" command written to a node,
// one entry per command.
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

// batchedNode is a node with Batch, long timeouts, and its "gets"
// commands recorded.
func batchedNode(t *testing.T, s *testserver.Server) (*Node, *recorder, *wireGets) {
	t.Helper()
	w := &wireGets{}
	n, rec := newNode(t, s, Config{Batch: true, ReadTimeout: time.Minute, WriteTimeout: time.Minute,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return wireConn{conn, w}, nil
		}})
	return n, rec, w
}

// loneGet starts a Get of key through n's batcher, which has none in
// flight, against a paused server, and waits until it is the Get in
// flight; its error comes on the channel once the server answers.
func loneGet(t *testing.T, n *Node, key string) <-chan error {
	t.Helper()
	lone := make(chan error, 1)
	go func() {
		_, err := n.Get(context.Background(), key)
		lone <- err
	}()
	waitFor(t, "the lone Get in flight", func() bool {
		select {
		case err := <-lone:
			t.Fatalf("lone Get returned early: %v", err)
		default:
		}
		n.batch.mu.Lock()
		defer n.batch.mu.Unlock()
		return n.batch.busy
	})
	return lone
}

// TestBatch: while one Get is in flight on a server that does not answer,
// the Gets that arrive wait, and go together in one multi-get when it
// ends; each caller gets its own answer (hits, misses, the same key
// twice), and each is observed as one Get.
func TestBatch(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, rec, wire := batchedNode(t, s)
	ctx := context.Background()
	for i := range 6 {
		if err := n.Set(ctx, fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("v%d", i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := n.Get(ctx, "k0"); err != nil || string(v) != "v0" {
		t.Fatalf("lone Get = %q, %v", v, err)
	}
	rec.take()
	resume := paused(t, s)
	lone := loneGet(t, n, "k0")
	keys := []string{"k1", "k2", "k3", "k4", "k5", "k1", "absent1", "absent2"}
	type answer struct {
		v   []byte
		err error
	}
	answers := make([]chan answer, len(keys))
	for i, k := range keys {
		answers[i] = make(chan answer, 1)
		go func() {
			v, err := n.Get(ctx, k)
			answers[i] <- answer{v, err}
		}()
	}
	waitFor(t, "the Gets waiting", func() bool { return n.batch.waiting() == len(keys) })
	resume()
	if err := <-lone; err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		a := <-answers[i]
		want := "v" + strings.TrimPrefix(k, "k")
		switch {
		case strings.HasPrefix(k, "absent"):
			if a.err != node.ErrCacheMiss {
				t.Errorf("Get %s: %q, %v; want node.ErrCacheMiss", k, a.v, a.err)
			}
		case a.err != nil || string(a.v) != want:
			t.Errorf("Get %s = %q, %v; want %q", k, a.v, a.err, want)
		}
	}
	cmds := wire.commands()
	if batch := cmds[len(cmds)-1]; len(batch) != len(keys)-1 { // k1 asked once
		t.Fatalf("last gets command %v; want the %d distinct keys waiting in one", batch, len(keys)-1)
	}
	calls := rec.take()
	if len(calls) != 1+len(keys) {
		t.Fatalf("%d calls observed, want %d Gets", len(calls), 1+len(keys))
	}
	misses := 0
	for _, c := range calls {
		if c.op != node.OpGet || (c.err != nil && c.err != node.ErrCacheMiss) {
			t.Errorf("observed %+v, want a Get's hit or miss", c)
		}
		if c.err == node.ErrCacheMiss {
			misses++
		}
	}
	if misses != 2 {
		t.Errorf("%d misses observed, want 2", misses)
	}
}

// TestBatchCancel: a Get waiting for a batch returns when its context
// ends, with the context's error; the batch still serves the others.
func TestBatchCancel(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, _, _ := batchedNode(t, s)
	ctx := context.Background()
	if err := n.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	resume := paused(t, s)
	lone := loneGet(t, n, "k")
	cctx, cancel := context.WithCancel(ctx)
	cancelled, other := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := n.Get(cctx, "k")
		cancelled <- err
	}()
	go func() {
		v, err := n.Get(ctx, "k")
		if err == nil && string(v) != "v" {
			err = fmt.Errorf("got %q", v)
		}
		other <- err
	}()
	waitFor(t, "the Gets waiting", func() bool { return n.batch.waiting() == 2 })
	cancel()
	waitErr(t, "a Get waiting for its batch", cancelled, context.Canceled)
	resume()
	if err := <-lone; err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatalf("the other waiter: %v", err)
	}
}

// TestBatchNodeError: when the server dies, every Get waiting in the
// batch gets its error, and each is observed as a failure.
func TestBatchNodeError(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, rec, _ := batchedNode(t, s)
	ctx := context.Background()
	if err := n.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	rec.take()
	s.Pause() // not paused(): the test kills the server, which its resume would then signal
	waitFor(t, "the server stopped", s.Paused)
	lone := loneGet(t, n, "k")
	const waiters = 5
	errs := make(chan error, waiters)
	for i := range waiters {
		go func() {
			_, err := n.Get(ctx, fmt.Sprintf("w%d", i))
			errs <- err
		}()
	}
	waitFor(t, "the Gets waiting", func() bool { return n.batch.waiting() == waiters })
	s.Stop()
	if err := <-lone; err == nil || err == node.ErrCacheMiss {
		t.Fatalf("lone Get of a killed server: %v", err)
	}
	for range waiters {
		if err := <-errs; err == nil || err == node.ErrCacheMiss {
			t.Fatalf("waiting Get of a killed server: %v", err)
		}
	}
	if f := failures(rec.take()); f != 1+waiters {
		t.Fatalf("%d failures observed; want %d", f, 1+waiters)
	}
}

// TestBatchConcurrent: many callers Get and Set the same few keys at once
// through the batcher; every Get returns a value stored under its key,
// every Get is observed, and no more keys are asked than Gets made.
func TestBatchConcurrent(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, rec, wire := batchedNode(t, s)
	ctx := context.Background()
	const keys, callers, rounds = 16, 64, 40
	for i := range keys {
		if err := n.Set(ctx, fmt.Sprintf("c%d", i), []byte(fmt.Sprintf("c%d:0", i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	rec.take()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, callers)
	for g := range callers {
		go func() {
			errc <- func() error {
				for r := range rounds {
					k := fmt.Sprintf("c%d", (g+r)%keys)
					if g%8 == 0 {
						if err := n.Set(ctx, k, []byte(fmt.Sprintf("%s:%d", k, g)), 0); err != nil {
							return err
						}
						continue
					}
					use := ctx
					if g%2 == 1 {
						use = cctx // a context that can end
					}
					v, err := n.Get(use, k)
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
	gets := 0
	for _, c := range rec.take() {
		if c.op == node.OpGet {
			gets++
		}
	}
	if want := callers * 7 / 8 * rounds; gets != want {
		t.Fatalf("%d Gets observed, want %d", gets, want)
	}
	asked := 0
	for _, cmd := range wire.commands() {
		asked += len(cmd)
	}
	if asked > callers*7/8*rounds {
		t.Fatalf("%d keys asked of the server for %d Gets", asked, callers*7/8*rounds)
	}
}

// TestBatchAnswers: a batch of waiting Gets is one "gets" of its distinct
// keys; each waiter gets its own answer, a key's second waiter a copy of
// the value, and a wrong answer fails every waiter.
func TestBatchAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, reply string
		wantErr     string
	}{
		{name: "hit and miss", reply: "VALUE a 0 1 1\r\nx\r\nEND\r\n"},
		{name: "malformed", reply: "VALUE a 0 x 1\r\n", wantErr: "bad line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			n := fakeNode(t, Config{Batch: true}, func(_ int, r *bufio.Reader, w io.Writer) {
				req, _ := r.ReadString('\n')
				got <- req
				io.WriteString(w, tc.reply)
				io.Copy(io.Discard, r)
			})
			var batch []*waiter
			for _, k := range []string{"a", "b", "a"} {
				batch = append(batch, &waiter{key: k, done: make(chan struct{})})
			}
			n.batch.busy = true
			n.batch.run(n, batch)
			if req := <-got; req != "gets a b\r\n" {
				t.Errorf("request %q", req)
			}
			if tc.wantErr != "" {
				for _, w := range batch {
					if w.err == nil || !strings.Contains(w.err.Error(), tc.wantErr) {
						t.Errorf("waiter %s: %q, %v; want an error with %q", w.key, w.value, w.err, tc.wantErr)
					}
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
			if !errors.Is(b.err, node.ErrCacheMiss) {
				t.Errorf("waiter of b: %q, %v; want node.ErrCacheMiss", b.value, b.err)
			}
			if n.batch.busy {
				t.Error("the batcher is still busy after its last batch")
			}
		})
	}
}
