package lease_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/lease"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/ring"
)

// Two processes miss the same keys at once. The first takes their leases
// and loads; the second finds them held and waits. A Delete clears one
// lease during the load, so only the other key's value is stored.
func Example() {
	ctx := context.Background()
	a, b := nodetest.NewMap(), nodetest.NewMap()
	nodes := map[string]ring.Node{"user:1": {Name: "a", Addr: "a:1"}, "user:2": {Name: "b", Addr: "b:1"}}
	f := lease.Fleet{
		Config: lease.Config{Term: 10 * time.Second, MaxKeyLength: 250},
		Conns:  nodetest.Conns{"a:1": a, "b:1": b},
		Owner:  func(key string) ring.Node { return nodes[key] },
	}
	keys := []string{"user:1", "user:2"}

	first := &lease.Lease{Token: "first"}
	got, _, _ := f.Acquire(ctx, keys, first.Token)
	fmt.Println("first process holds", got)
	got, _, _ = f.Acquire(ctx, keys, "second")
	fmt.Println("second process holds", got)

	f.Clear(ctx, []string{"user:2"}) // a Delete of user:2 meanwhile

	// The loaded values, stored under the lease, batched by owner.
	bs := fanout.New(f.Conns)
	for i, k := range keys {
		bs.Add(f.Owner(k), node.Item{Key: k, Value: []byte("row of " + k), TTL: time.Hour}, i, false)
	}
	kept := make([]bool, len(keys))
	bs.Run(func(b *fanout.Batch) error { return f.Store(ctx, b, first, kept) })
	fmt.Println("stored", kept)
	fmt.Printf("user:1 = %q, its lease key %q gone: %v\n", a.Value("user:1"), f.Key("user:1"), a.Value(f.Key("user:1")) == nil)
	fmt.Printf("user:2 = %q\n", b.Value("user:2"))
	// Output:
	// first process holds [true true]
	// second process holds [false false]
	// stored [true false]
	// user:1 = "row of user:1", its lease key "shardcache:lease:user:1" gone: true
	// user:2 = ""
}

// Two processes' loads miss the same key. The first takes the lease and
// loads; the second waits, re-reading the key, until the first stores the
// value under its lease.
func ExampleWaiter() {
	ctx := context.Background()
	owner := nodetest.NewMap()
	cfg := lease.Config{Term: 10 * time.Second, MaxKeyLength: 250}
	var waits, cacheErrors atomic.Int64
	waiter := lease.Waiter{
		Config: cfg, Conns: nodetest.Conns{"a:1": owner}, Owner: ring.Node{Name: "a", Addr: "a:1"}, Every: time.Millisecond,
		Get: func(ctx context.Context) ([]byte, error) { return owner.Get(ctx, "user:1") },
		Release: func(ctx context.Context, l *lease.Lease) {
			_ = owner.ReleaseLeases(ctx, []string{cfg.Key("user:1")}, l.Token)
		},
		Closed: func() bool { return false },
		Waits:  &waits, CacheErrors: &cacheErrors,
	}

	first, _ := waiter.Wait(ctx, "user:1")
	fmt.Println("first process loads:", first.Lease != nil)
	second := make(chan lease.Got)
	go func() {
		got, _ := waiter.Wait(ctx, "user:1")
		second <- got
	}()
	for waits.Load() == 0 { // the second process waits
		time.Sleep(time.Millisecond)
	}
	_, _ = owner.StoreLeased(ctx, []node.Item{{Key: "user:1", Value: []byte("Ada")}}, []string{cfg.Key("user:1")}, first.Lease.Token)
	got := <-second
	fmt.Printf("second process reads %q (hit %v) after %d wait\n", got.Value, got.Hit, waits.Load())
	// Output:
	// first process loads: true
	// second process reads "Ada" (hit true) after 1 wait
}
