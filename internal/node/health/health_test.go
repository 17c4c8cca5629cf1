package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// TestBreaker checks the policy: threshold failures in a row mark a node
// down, once; a success in between starts the count again; a success while
// down marks it up, once.
func TestBreaker(t *testing.T) {
	b := NewBreaker(3)
	for i := range 2 {
		if b.Failure() || b.Down() {
			t.Fatalf("down after %d failures; threshold 3", i+1)
		}
	}
	if b.Success() {
		t.Fatal("a success while up reported the node coming up")
	}
	for i := range 2 {
		if b.Failure() {
			t.Fatalf("down after a success and %d failures", i+1)
		}
	}
	if !b.Failure() || !b.Down() {
		t.Fatal("not down after 3 failures in a row")
	}
	if b.Failure() {
		t.Fatal("a 4th failure reported the node going down again")
	}
	if !b.Success() || b.Down() {
		t.Fatal("a success while down did not mark the node up")
	}
	if b.Success() {
		t.Fatal("a second success reported the node coming up again")
	}
	if b.Failure() {
		t.Fatal("one failure after coming up marked the node down")
	}

	one := NewBreaker(1)
	if !one.Failure() {
		t.Fatal("threshold 1: the first failure does not mark the node down")
	}
}

// TestBackoff checks the probe waits: the interval, doubled each time, capped.
func TestBackoff(t *testing.T) {
	b := Backoff{Interval: 500 * time.Millisecond, Max: 10 * time.Second}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := b.Delay(i); got != w {
			t.Errorf("delay(%d) = %v; want %v", i, got, w)
		}
	}
	if got := b.Delay(1 << 20); got != b.Max {
		t.Errorf("delay of a huge attempt = %v; want the cap %v", got, b.Max)
	}
	flat := Backoff{Interval: time.Minute, Max: time.Minute}
	if got := flat.Delay(3); got != time.Minute {
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
		want Outcome
	}{
		{"success", live, nil, Answered},
		{"miss", live, node.ErrCacheMiss, Answered},
		{"not stored", live, node.ErrNotStored, Answered},
		{"redis nil", live, redis.Nil, Answered},
		{"error reply", live, errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), Answered},
		{"auth reply", live, errors.New("NOAUTH Authentication required."), Answered},
		{"memcache server error", nil, fmt.Errorf("memcache: unexpected response line from %q: %q", "set", "SERVER_ERROR object too large for cache"), Answered},
		{"refused dial", live, dialRefused, Unreachable},
		{"refused dial, wrapped", live, fmt.Errorf("get: %w", dialRefused), Unreachable},
		{"reset", live, reset, Unreachable},
		{"i/o timeout", live, timeoutErr{}, Unreachable},
		{"EOF mid-reply", live, io.ErrUnexpectedEOF, Unreachable},
		{"EOF", nil, io.EOF, Unreachable},
		{"broken pipe", nil, syscall.EPIPE, Unreachable},
		{"no such host", live, &net.DNSError{Err: "no such host", Name: "cache-x", IsNotFound: true}, Unreachable},
		{"login refused", live, fmt.Errorf("%w: %w", node.ErrAuth, errors.New("WRONGPASS invalid username-password pair")), Answered},
		{"TLS refused", live, fmt.Errorf("%w: TLS handshake: %w", node.ErrAuth, &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}), Answered},
		{"no permission", live, fmt.Errorf("%w: NOPERM", node.ErrNoPerm), Answered},
		{"caller cancelled", cancelled, timeoutErr{}, Unknown},
		{"caller deadline passed", expired, timeoutErr{}, Unknown},
		{"context error", nil, context.DeadlineExceeded, Unknown},
		{"node down", live, node.ErrNodeDown, Unknown},
		{"client closed", live, node.ErrClosed, Unknown},
		{"go-redis closed", live, fmt.Errorf("%w: %w", node.ErrClosed, redis.ErrClosed), Unknown},
		{"unknown node", live, node.ErrUnknownNode, Unknown},
	} {
		if got := Classify(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %v; want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestObserverProbe checks the mechanism without servers: the probe
// starts when the node goes down, retries, marks it up on the first answer
// and stops; close stops a probe that never succeeds.
func TestObserverProbe(t *testing.T) {
	h := New(Config{Name: "a", Addr: "127.0.0.1:1", Threshold: 2, ProbeInterval: time.Millisecond,
		ProbeCap: 20 * time.Millisecond, ProbeTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	pings := make(chan chan error)
	h.Ping = func(ctx context.Context) error {
		reply := make(chan error)
		pings <- reply
		return <-reply
	}
	refused := &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	h.Done(context.Background(), node.OpGet, time.Time{}, refused)
	h.Done(context.Background(), node.OpGet, time.Time{}, node.ErrCacheMiss) // an answer: the run starts again
	h.Done(context.Background(), node.OpGet, time.Time{}, refused)
	if h.Down() {
		t.Fatal("down after failures that were not in a row")
	}
	h.Done(context.Background(), node.OpGet, time.Time{}, refused)
	if !h.Down() || h.Downs.Load() != 1 || h.Failures.Load() != 3 {
		t.Fatalf("after 2 failures in a row: down %v, downs %d, failures %d", h.Down(), h.Downs.Load(), h.Failures.Load())
	}
	// A call answered before the node went down, observed after: it says
	// nothing of the node since, and leaves it down for the probe.
	h.Done(context.Background(), node.OpGet, time.Time{}, nil)
	if !h.Down() {
		t.Fatal("marked up by a call's answer while down; only the probe marks it up")
	}
	early := h.Begin()   // a call begun during the outage, which fails after the node is up
	(<-pings) <- refused // the first probe fails
	if !h.Down() {
		t.Fatal("up after a failed probe")
	}
	(<-pings) <- nil // the second answers
	h.wg.Wait()      // and the probe goroutine ends
	if h.Down() {
		t.Fatal("still down after a probe answered")
	}
	for range 2 {
		h.Done(context.Background(), node.OpGet, early, refused)
	}
	if h.Down() || h.Downs.Load() != 1 {
		t.Fatalf("down %v, downs %d: marked down again by calls begun before the probe found the node", h.Down(), h.Downs.Load())
	}
	if h.Begin().IsZero() {
		t.Fatal("Begin is zero on a node that can go down, without stats")
	}

	// Down again, by calls begun after the probe found it: a probe that
	// never succeeds ends with close.
	h.Done(nil, node.OpGet, h.Begin(), refused)
	h.Done(nil, node.OpGet, h.Begin(), refused)
	if !h.Down() || h.Downs.Load() != 2 {
		t.Fatalf("down %v, downs %d: calls begun after the probe found the node must count", h.Down(), h.Downs.Load())
	}
	(<-pings) <- refused
	done := make(chan struct{})
	go func() { h.Close(); close(done) }()
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

// TestCounters checks the latency buckets and the counts of Record.
func TestCounters(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {25 * time.Microsecond, 0}, {26 * time.Microsecond, 1}, {time.Millisecond, 5},
		{5 * time.Second, len(Bounds) - 1}, {time.Hour, len(Bounds)},
	} {
		if got := Bucket(tc.d); got != tc.want {
			t.Errorf("Bucket(%v) = %d; want %d", tc.d, got, tc.want)
		}
	}
	var s Counters
	for range 3 {
		s.Record(node.OpGet, time.Now().Add(-time.Hour), nil) // above every bound, however slow the test runs
	}
	s.Record(node.OpGet, time.Time{}, node.ErrNodeDown) // never reached the network: not timed
	got := s.Snapshot()
	if len(got) != 1 || got[0].OK != 3 || got[0].Hits != 3 || got[0].Errors[Down] != 1 || got[0].Latency[len(Bounds)] != 3 || got[0].LatencySum < 3*time.Hour {
		t.Fatalf("counts %+v", got)
	}
	var none *Counters
	none.Record(node.OpGet, time.Now(), nil)
	if none.Snapshot() != nil || !none.Begin().IsZero() {
		t.Fatal("a nil *Counters counted")
	}
}

// TestKindOf checks how errors are counted.
func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Kind
	}{
		{nil, None}, {node.ErrCacheMiss, None}, {node.ErrNotStored, None},
		{node.ErrNodeDown, Down}, {context.DeadlineExceeded, Timeout},
		{context.Canceled, Other}, {errors.New("WRONGTYPE"), Other},
	} {
		if got := KindOf(tc.err); got != tc.want {
			t.Errorf("KindOf(%v) = %d; want %d", tc.err, got, tc.want)
		}
	}
}

// TestProbeNow: a probe backing off for an hour tries at once when
// kicked, and a kick while up does nothing.
func TestProbeNow(t *testing.T) {
	h := New(Config{Name: "a", Addr: "127.0.0.1:1", Threshold: 1, ProbeInterval: time.Hour,
		ProbeCap: time.Hour, ProbeTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	defer h.Close()
	pinged := make(chan struct{}, 1)
	h.Ping = func(context.Context) error {
		pinged <- struct{}{}
		return nil
	}
	h.ProbeNow() // up: nothing to probe, and no kick left for later
	if len(h.kick) != 0 {
		t.Fatal("ProbeNow while up left a kick")
	}
	h.Done(context.Background(), node.OpGet, time.Time{}, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED})
	if !h.Down() {
		t.Fatal("not down after a refused dial with Threshold 1")
	}
	h.ProbeNow()
	select {
	case <-pinged:
	case <-time.After(20 * time.Second): // a bound: the backoff's wait is an hour
		t.Fatal("no probe after ProbeNow; the backoff's wait is an hour")
	}
	for range 20000 { // a bound, not a timing: Ping answered, the probe marks it up
		if !h.Down() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("still down after the probe's ping answered")
}
