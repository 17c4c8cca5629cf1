package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
)

// TestBreaker checks the policy: threshold failures in a row mark a node
// down, once; a success in between starts the count again; a success while
// down marks it up, once.
func TestBreaker(t *testing.T) {
	b := &breaker{threshold: 3}
	for i := range 2 {
		if b.failure() || b.isDown() {
			t.Fatalf("down after %d failures; threshold 3", i+1)
		}
	}
	if b.success() {
		t.Fatal("a success while up reported the node coming up")
	}
	for i := range 2 {
		if b.failure() {
			t.Fatalf("down after a success and %d failures", i+1)
		}
	}
	if !b.failure() || !b.isDown() {
		t.Fatal("not down after 3 failures in a row")
	}
	if b.failure() {
		t.Fatal("a 4th failure reported the node going down again")
	}
	if !b.success() || b.isDown() {
		t.Fatal("a success while down did not mark the node up")
	}
	if b.success() {
		t.Fatal("a second success reported the node coming up again")
	}
	if b.failure() {
		t.Fatal("one failure after coming up marked the node down")
	}

	one := &breaker{threshold: 1}
	if !one.failure() {
		t.Fatal("threshold 1: the first failure does not mark the node down")
	}
}

// TestBackoff checks the probe waits: the interval, doubled each time, capped.
func TestBackoff(t *testing.T) {
	b := backoff{interval: 500 * time.Millisecond, max: 10 * time.Second}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := b.delay(i); got != w {
			t.Errorf("delay(%d) = %v; want %v", i, got, w)
		}
	}
	if got := b.delay(1 << 20); got != b.max {
		t.Errorf("delay of a huge attempt = %v; want the cap %v", got, b.max)
	}
	flat := backoff{interval: time.Minute, max: time.Minute}
	if got := flat.delay(3); got != time.Minute {
		t.Errorf("interval equal to the cap: delay(3) = %v", got)
	}
}

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestClassify checks which errors count against a node.
func TestClassify(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	live := context.Background()
	dialRefused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want outcome
	}{
		{"success", live, nil, answered},
		{"miss", live, ErrCacheMiss, answered},
		{"not stored", live, ErrNotStored, answered},
		{"redis nil", live, redis.Nil, answered},
		{"error reply", live, errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), answered},
		{"auth reply", live, errors.New("NOAUTH Authentication required."), answered},
		{"memcache server error", nil, fmt.Errorf("memcache: unexpected response line from %q: %q", "set", "SERVER_ERROR object too large for cache"), answered},
		{"refused dial", live, dialRefused, unreachable},
		{"refused dial, wrapped", live, fmt.Errorf("get: %w", dialRefused), unreachable},
		{"reset", live, reset, unreachable},
		{"i/o timeout", live, timeoutErr{}, unreachable},
		{"EOF mid-reply", live, io.ErrUnexpectedEOF, unreachable},
		{"EOF", nil, io.EOF, unreachable},
		{"broken pipe", nil, syscall.EPIPE, unreachable},
		{"no such host", live, &net.DNSError{Err: "no such host", Name: "cache-x", IsNotFound: true}, unreachable},
		{"login refused", live, fmt.Errorf("%w: %w", ErrAuth, errors.New("WRONGPASS invalid username-password pair")), answered},
		{"TLS refused", live, fmt.Errorf("%w: TLS handshake: %w", ErrAuth, &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}), answered},
		{"no permission", live, fmt.Errorf("%w: NOPERM", ErrNoPerm), answered},
		{"caller cancelled", cancelled, timeoutErr{}, unknown},
		{"caller deadline passed", expired, timeoutErr{}, unknown},
		{"context error", nil, context.DeadlineExceeded, unknown},
		{"node down", live, ErrNodeDown, unknown},
		{"client closed", live, ErrClosed, unknown},
		{"go-redis closed", live, fmt.Errorf("%w: %w", node.ErrClosed, redis.ErrClosed), unknown},
		{"unknown node", live, ErrUnknownNode, unknown},
	} {
		if got := classify(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: classify(%v) = %v; want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestNodeHealthProbe checks the mechanism without servers: the probe
// starts when the node goes down, retries, marks it up on the first answer
// and stops; close stops a probe that never succeeds.
func TestNodeHealthProbe(t *testing.T) {
	o := Options{FailureThreshold: 2, ProbeInterval: time.Millisecond}
	o.init()
	h := newNodeHealth(ring.Node{Name: "a", Addr: "127.0.0.1:1"}, &o)
	pings := make(chan chan error)
	h.ping = func(ctx context.Context) error {
		reply := make(chan error)
		pings <- reply
		return <-reply
	}
	refused := &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	h.Done(context.Background(), node.OpGet, time.Time{}, refused)
	h.Done(context.Background(), node.OpGet, time.Time{}, ErrCacheMiss) // an answer: the run starts again
	h.Done(context.Background(), node.OpGet, time.Time{}, refused)
	if h.isDown() {
		t.Fatal("down after failures that were not in a row")
	}
	h.Done(context.Background(), node.OpGet, time.Time{}, refused)
	if !h.isDown() || h.downs.Load() != 1 || h.failures.Load() != 3 {
		t.Fatalf("after 2 failures in a row: down %v, downs %d, failures %d", h.isDown(), h.downs.Load(), h.failures.Load())
	}
	(<-pings) <- refused // the first probe fails
	if !h.isDown() {
		t.Fatal("up after a failed probe")
	}
	(<-pings) <- nil // the second answers
	h.wg.Wait()      // and the probe goroutine ends
	if h.isDown() {
		t.Fatal("still down after a probe answered")
	}

	// Down again: a probe that never succeeds ends with close.
	h.Done(nil, node.OpGet, time.Time{}, refused)
	h.Done(nil, node.OpGet, time.Time{}, refused)
	(<-pings) <- refused
	done := make(chan struct{})
	go func() { h.close(); close(done) }()
	select {
	case reply := <-pings: // close raced a probe: let it fail
		reply <- context.Canceled
	case <-done:
	}
	<-done
	if h.probe {
		t.Fatal("probe still marked running after close")
	}
}

// TestNodeErrorNamesOnce: a node named by its address is said once.
func TestNodeErrorNamesOnce(t *testing.T) {
	for _, tc := range []struct {
		n    ring.Node
		want string
	}{
		{ring.Node{Name: "a", Addr: "h:1"}, "shardcache: get key \"k\" on node a (h:1): shardcache: node down"},
		{ring.Node{Name: "h:1", Addr: "h:1"}, "shardcache: get key \"k\" on node h:1: shardcache: node down"},
	} {
		err := &NodeError{Op: "get", Node: tc.n, Keys: []string{"k"}, Err: ErrNodeDown}
		if err.Error() != tc.want {
			t.Errorf("%v: %q, want %q", tc.n, err.Error(), tc.want)
		}
	}
}
