package loading_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/loading"
)

// clock is a clock the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestLimiter: a burst of tokens, then ErrThrottled at once for a token
// later than the caller's deadline or MaxWait; a refused load gives its
// token back, so the next token comes as soon as it would have.
func TestLimiter(t *testing.T) {
	ck := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := loading.NewLimiter(0.1, 2, 0, ck.Now) // a token every 10 s
	short, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	for i := range 2 {
		if err := lim.Admit(short, ck.Now(), "k"); err != nil {
			t.Fatalf("token %d of the burst: %v", i, err)
		}
	}
	for range 3 {
		if err := lim.Admit(short, ck.Now(), "k"); !errors.Is(err, loading.ErrThrottled) {
			t.Fatalf("past the burst within 1 s: %v, want ErrThrottled", err)
		}
	}
	ck.Advance(10 * time.Second)
	if err := lim.Admit(short, ck.Now(), "k"); err != nil {
		t.Fatalf("10 s later: %v", err)
	}

	never := loading.NewLimiter(1, 1, -1, ck.Now)
	if err := never.Admit(t.Context(), ck.Now(), "a"); err != nil {
		t.Fatal(err)
	}
	if err := never.Admit(t.Context(), ck.Now(), "b"); !errors.Is(err, loading.ErrThrottled) {
		t.Fatalf("MaxWait < 0 without a deadline: %v, want ErrThrottled", err)
	}
}

// TestLimiterWaitEnds: a load waiting for its token stops when its context
// ends, ErrThrottled wrapping the context's error.
func TestLimiterWaitEnds(t *testing.T) {
	ck := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := loading.NewLimiter(0.001, 1, 0, ck.Now)
	if err := lim.Admit(t.Context(), ck.Now(), "a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := lim.Admit(ctx, ck.Now(), "b") // no deadline: it would wait 1000 s
	if !errors.Is(err, loading.ErrThrottled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait whose context ends: %v", err)
	}
}

// TestCallBatch: a batch loader's panic is ErrPanic naming the keys; its
// answer otherwise is returned as it is.
func TestCallBatch(t *testing.T) {
	_, err := loading.CallBatch(t.Context(), []string{"a", "b"}, func(context.Context, []string) (map[string][]byte, error) { panic("boom") })
	if !errors.Is(err, loading.ErrPanic) || err.Error() != `shardcache: loader panicked: 2 keys from "a": boom` {
		t.Fatalf("panic: %v", err)
	}
	m, err := loading.CallBatch(t.Context(), []string{"a"}, func(_ context.Context, keys []string) (map[string][]byte, error) {
		return map[string][]byte{keys[0]: []byte("v")}, nil
	})
	if err != nil || string(m["a"]) != "v" {
		t.Fatalf("CallBatch = %q, %v", m, err)
	}
}

// TestBackground: a load keeps its starter's values but not its
// cancellation; Stop cancels the loads under way, waits for them, and
// refuses the next.
func TestBackground(t *testing.T) {
	var g loading.Background
	type key struct{}
	base, cancelBase := context.WithCancel(context.WithValue(t.Context(), key{}, "request"))
	ctx, done, ok := g.Start(base)
	if !ok {
		t.Fatal("Start refused before Stop")
	}
	cancelBase()
	if ctx.Err() != nil || ctx.Value(key{}) != "request" {
		t.Fatalf("the load's context: %v, value %v", ctx.Err(), ctx.Value(key{}))
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer done()
		<-ctx.Done() // the load runs until Stop cancels it
	}()
	g.Stop()
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before the load under way ended")
	}
	if _, _, ok := g.Start(t.Context()); ok {
		t.Fatal("Start after Stop")
	}
}
