package gutter

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
)

type testHome struct {
	hints Hints
	calls int
}

func (h *testHome) Guttered()                               { h.calls++ }
func (h *testHome) Wrote(_ context.Context, keys ...string) { h.hints.Add(keys...) }
func (h *testHome) Fail(node.Op) error                      { return node.ErrNodeDown }

type testTarget struct {
	n, standin *nodetest.Map
	down       bool
}

func (t *testTarget) Conn() node.Node    { return t.n }
func (t *testTarget) Down() bool         { return t.down }
func (t *testTarget) Standin() node.Node { return t.standin }

// TestNode: TTLs capped (no expiry too), an Add refused is no hint, a
// target held down gets none of the calls (its stand-in does) and Forget
// leaves it alone, and what home does not lend fails with home's error.
func TestNode(t *testing.T) {
	ctx := t.Context()
	h, to := &testHome{}, &testTarget{n: nodetest.NewMap(), standin: nodetest.NewMap()}
	g := New(h, to, 10*time.Second, nil)
	for key, ttl := range map[string]time.Duration{"a": time.Hour, "b": 0, "c": time.Second} {
		if err := g.Set(ctx, key, []byte("v"), ttl); err != nil {
			t.Fatal(err)
		}
	}
	if got := [3]time.Duration{to.n.TTL("a"), to.n.TTL("b"), to.n.TTL("c")}; got != [3]time.Duration{10 * time.Second, 10 * time.Second, time.Second} {
		t.Errorf("TTLs on the target: %v", got)
	}
	h.hints.Take()
	if err := g.Add(ctx, "a", []byte("w"), 0); err != node.ErrNotStored {
		t.Fatalf("Add of a key on the target: %v", err)
	}
	if keys, _ := h.hints.Take(); len(keys) != 0 {
		t.Errorf("a refused Add hinted %v", keys)
	}
	if _, err := g.Incr(ctx, "n", 1); err != node.ErrNodeDown {
		t.Errorf("Incr: %v; want ErrNodeDown", err)
	}
	if err := g.Flush(ctx); err != node.ErrNodeDown {
		t.Errorf("Flush: %v; want ErrNodeDown", err)
	}

	to.down = true
	g.Forget(ctx, []string{"a"})
	if to.n.Value("a") == nil {
		t.Error("Forget deleted on a target held down")
	}
	if err := g.Set(ctx, "d", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if to.n.Value("d") != nil || to.standin.Value("d") == nil {
		t.Error("a Set with the target held down did not go to its stand-in")
	}
	to.down = false
	g.Forget(ctx, []string{"a", "b"})
	if to.n.Value("a") != nil || to.n.Value("b") != nil {
		t.Error("Forget left keys on the target")
	}
	if keys, _ := h.hints.Take(); !slices.Equal(keys, []string{"d"}) {
		t.Errorf("hints %v; want [d]", keys)
	}
	if h.calls != 5 { // three Sets, the Add, the Set while down: Incr, Flush and Forget are not the target's calls
		t.Errorf("%d calls counted; want 5", h.calls)
	}
}
