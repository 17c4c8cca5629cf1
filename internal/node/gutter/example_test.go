package gutter_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/gutter"
	"github.com/shardcache/shardcache/internal/node/health"
	"github.com/shardcache/shardcache/internal/node/nodetest"
)

// home is the node held down: it counts the calls sent to its gutter,
// and keeps what was written there as hints.
type home struct {
	hints gutter.Hints
	calls int
}

func (h *home) Guttered()                               { h.calls++ }
func (h *home) Wrote(_ context.Context, keys ...string) { h.hints.Add(keys...) }
func (h *home) Fail(node.Op) error                      { return node.ErrNodeDown }

// target is the gutter pool's node, never held down here.
type target struct{ n *nodetest.Map }

func (t target) Conn() node.Node    { return t.n }
func (t target) Down() bool         { return false }
func (t target) Standin() node.Node { return nil }

// While home is held down, its writes go to the gutter with their TTLs
// capped, and home keeps their keys, to delete before it serves again;
// its counters do not move.
func Example() {
	h, t := &home{}, target{nodetest.NewMap()}
	g := gutter.New(h, t, 10*time.Second, nil)
	ctx := context.Background()

	_ = g.Set(ctx, "user:42", []byte("Ada"), time.Hour)
	v, _ := g.Get(ctx, "user:42")
	fmt.Println(string(v), t.n.TTL("user:42"))
	_, err := g.Incr(ctx, "hits", 1)
	fmt.Println(err)
	fmt.Println(h.hints.Take())
	fmt.Println(h.calls, "calls sent to the gutter")
	// Output:
	// Ada 10s
	// shardcache: node down
	// [user:42] false
	// 2 calls sent to the gutter
}

// A node held down comes back: before it is marked up, the keys written
// through its gutter meanwhile are deleted at home, where it still holds
// their values from before, and on the gutter, which a later outage would
// read again.
func ExampleReturn() {
	ctx := context.Background()
	obs := health.New(health.Config{Name: "a", Addr: "a:1", Threshold: 1, Logger: slog.New(slog.DiscardHandler)})
	defer obs.Close()
	obs.SetDown(true) // the breaker holds it down
	homeNode, gutterNode := nodetest.NewMap(), nodetest.NewMap()
	_ = homeNode.Set(ctx, "user:42", []byte("Ada"), 0)
	r := gutter.Return{Home: homeNode, Gutter: gutter.New(nil, target{gutterNode}, 10*time.Second, nil), Hints: &gutter.Hints{}, Health: obs}

	_ = gutterNode.Set(ctx, "user:42", []byte("Ada Lovelace"), 10*time.Second) // a write through the gutter
	r.Wrote(ctx, "user:42")
	fmt.Printf("down %v, home %q\n", obs.Down(), homeNode.Value("user:42"))
	r.ComeUp(ctx) // the probe found it
	fmt.Printf("down %v, home %q, gutter %q\n", obs.Down(), homeNode.Value("user:42"), gutterNode.Value("user:42"))
	// Output:
	// down true, home "Ada"
	// down false, home "", gutter ""
}
