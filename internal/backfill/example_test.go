package backfill_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/backfill"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// Two values read from old owners are copied to their new owner, which
// a write reached first for one of them: that copy is skipped, the newer
// value kept.
func Example() {
	ctx := context.Background()
	newOwner := nodetest.NewMap()
	_ = newOwner.Set(ctx, "user:2", []byte("written since"), time.Hour)
	cs := &migration.Counters{}

	copies := []node.Item{
		{Key: "user:1", Value: []byte("from the old owner"), TTL: time.Hour},
		{Key: "user:2", Value: []byte("from the old owner"), TTL: time.Hour},
	}
	stored, err := backfill.Write(ctx, cs, newOwner, copies, false, false)
	fmt.Println(stored, err)
	fmt.Printf("user:1 %q, user:2 %q\n", newOwner.Value("user:1"), newOwner.Value("user:2"))
	s := cs.Snapshot()
	fmt.Println("backfills", s.Backfills, "skipped", s.BackfillsSkipped, "dropped", s.BackfillsDropped)
	// Output:
	// [true false] <nil>
	// user:1 "from the old owner", user:2 "written since"
	// backfills 1 skipped 1 dropped 0
}

// A read during a migration missed three keys on their new owner: the
// copier reads them on the old owner, reports the two it finds, and
// copies them over. A write reached the new owner first for one of
// them meanwhile: that copy is skipped, and the newer value read back
// and reported after the old one.
func ExampleCopier() {
	ctx := context.Background()
	oldOwner, newOwner := nodetest.NewMap(), nodetest.NewMap()
	_ = oldOwner.Set(ctx, "user:1", []byte("Ada"), time.Hour)
	_ = oldOwner.Set(ctx, "user:2", []byte("Bob"), time.Hour)
	_ = newOwner.Set(ctx, "user:2", []byte("Bob, written since"), time.Hour)
	a, b := ring.Node{Name: "a", Addr: "a:1"}, ring.Node{Name: "b", Addr: "b:1"}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mig, _ := migration.New(placement{a}, placement{b}, start, time.Hour)
	now := start.Add(time.Minute)

	keys := []string{"user:1", "user:2", "user:3"}
	routes := make([]migration.Route, len(keys))
	for i, k := range keys {
		routes[i] = mig.Route(k, now) // from a to b, copies allowed
	}
	cp := backfill.Copier{Migration: mig, Conns: nodetest.Conns{"a:1": oldOwner, "b:1": newOwner}, Now: now}
	err := cp.Copy(ctx, keys, routes, backfill.How{Reread: true}, func(it *node.Item) {
		fmt.Printf("%s %q\n", it.Key, it.Value)
	})
	fmt.Println(err)
	fmt.Printf("new owner: user:1 %q for %v\n", newOwner.Value("user:1"), newOwner.TTL("user:1"))
	s := mig.Counters.Snapshot()
	fmt.Println("found", s.FallbackHits, "missed", s.FallbackMisses, "copied", s.Backfills, "skipped", s.BackfillsSkipped)
	// Output:
	// user:1 "Ada"
	// user:2 "Bob"
	// user:2 "Bob, written since"
	// <nil>
	// new owner: user:1 "Ada" for 1h0m0s
	// found 2 missed 1 copied 1 skipped 1
}
