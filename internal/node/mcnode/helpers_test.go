package mcnode

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/testserver"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// faultWait bounds the wait for a call that must end early (the node's
// own timeouts in those tests are longer).
const faultWait = 30 * time.Second

// observed is one call a recorder was told of.
type observed struct {
	op     node.Op
	err    error
	hasCtx bool
}

// recorder is an Observer that records every call.
type recorder struct {
	mu     sync.Mutex
	calls  []observed
	hits   [node.NumOps]int
	misses [node.NumOps]int
}

func (r *recorder) Begin() time.Time { return time.Now() }

func (r *recorder) Done(ctx context.Context, op node.Op, start time.Time, err error) {
	if start.IsZero() {
		panic("Done without Begin's start")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, observed{op, err, ctx != nil})
}

func (r *recorder) Keys(op node.Op, hits, misses int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hits[op] += hits
	r.misses[op] += misses
}

// take returns the calls recorded since the last take.
func (r *recorder) take() []observed {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

// keys returns the keys found and missed of op, and resets them.
func (r *recorder) keys(op node.Op) (hits, misses int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hits, misses = r.hits[op], r.misses[op]
	r.hits[op], r.misses[op] = 0, 0
	return hits, misses
}

// failures counts the recorded calls whose error is not nil and not an
// answer (a miss, a refused condition).
func failures(calls []observed) int {
	n := 0
	for _, c := range calls {
		if c.err != nil && c.err != node.ErrCacheMiss && c.err != node.ErrNotStored {
			n++
		}
	}
	return n
}

// newNode is a node of s with long timeouts (a busy machine's scheduling
// is not under test) unless cfg sets them, and a recorder.
func newNode(t *testing.T, s *testserver.Server, cfg Config) (*Node, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg.Addr, cfg.Observer = s.Addr, rec
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout, cfg.WriteTimeout, cfg.DialTimeout = 10*time.Second, 10*time.Second, 10*time.Second
	}
	n := New(cfg)
	t.Cleanup(func() { n.Close() })
	return n, rec
}

// paused stops s (SIGSTOP) until the returned resume, or the test's end.
func paused(t testing.TB, s *testserver.Server) (resume func()) {
	t.Helper()
	s.Pause()
	waitFor(t, "the server stopped", s.Paused)
	var once sync.Once
	resume = func() { once.Do(s.Resume) }
	t.Cleanup(resume)
	return resume
}

// waitFor polls cond, a state another goroutine or process reaches, for
// up to 20 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 20000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// waitErr receives an error that must come within faultWait, and be
// target.
func waitErr(t testing.TB, what string, errc <-chan error, target error) {
	t.Helper()
	select {
	case err := <-errc:
		if !errors.Is(err, target) {
			t.Fatalf("%s: %v, want %v", what, err, target)
		}
	case <-time.After(faultWait):
		t.Fatalf("%s still waits", what)
	}
}
