package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestItemsMemcached checks the item operations on Memcached nodes outside a
// migration: flags and CAS ids survive, each condition answers its sentinel.
func TestItemsMemcached(t *testing.T) {
	ctx := context.Background()
	cl := newCluster(t, "memcached", 3)
	c := cl.client(t, Options{})

	if err := c.Store(ctx, StoreSet, Item{Key: "f", Value: []byte("v"), Flags: 42}); err != nil {
		t.Fatal(err)
	}
	it, err := c.GetItem(ctx, "f")
	if err != nil || string(it.Value) != "v" || it.Flags != 42 || it.CasID == 0 {
		t.Fatalf("GetItem = %+v, %v; want v, flags 42, a CAS id", it, err)
	}
	stale := it
	it.Value = []byte("w")
	if err := c.Store(ctx, StoreCAS, it); err != nil {
		t.Fatalf("CAS with a fresh id: %v", err)
	}
	if err := c.Store(ctx, StoreCAS, stale); !errors.Is(err, ErrCASConflict) {
		t.Fatalf("CAS with a stale id = %v, want ErrCASConflict", err)
	}
	if err := c.Store(ctx, StoreReplace, Item{Key: "absent", Value: []byte("x")}); !errors.Is(err, ErrNotStored) {
		t.Fatalf("Replace of an absent key = %v, want ErrNotStored", err)
	}
	if err := c.Store(ctx, StoreAppend, Item{Key: "f", Value: []byte(">")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Store(ctx, StorePrepend, Item{Key: "f", Value: []byte("<")}); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, "f", "<w>")
	if err := c.Store(ctx, StoreOp(99), Item{Key: "f"}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("Store(99) = %v, want ErrBadOptions", err)
	}
	if _, err := c.Increment(ctx, "counter", 1); !errors.Is(err, ErrCacheMiss) {
		t.Fatalf("Increment of a missing key = %v, want ErrCacheMiss", err)
	}
	c.Set(ctx, "counter", []byte("5"), 0)
	if v, err := c.Decrement(ctx, "counter", 9); err != nil || v != 0 {
		t.Fatalf("Decrement below 0 = %d, %v; want 0", v, err)
	}
	if found, err := c.DeleteFound(ctx, "counter"); !found || err != nil {
		t.Fatalf("DeleteFound of a present key = %v, %v", found, err)
	}
	if found, err := c.DeleteFound(ctx, "counter"); found || err != nil {
		t.Fatalf("DeleteFound of an absent key = %v, %v", found, err)
	}
	got, err := c.GetAndTouch(ctx, "f", time.Hour)
	if err != nil || string(got.Value) != "<w>" || got.Flags != 42 {
		t.Fatalf("GetAndTouch = %+v, %v", got, err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustMiss(t, c, "f")
}

// TestItemsDuringMigration checks that, in the window of an 8→6 resharding,
// each item operation on a key only its old owner holds behaves as on one
// server, and leaves the new owner holding the result.
func TestItemsDuringMigration(t *testing.T) {
	ctx := context.Background()
	cl := newCluster(t, "memcached", 8)
	_, from, to, c := eightToSix(t, cl)
	newRing := mustRing(t, to)
	keys := dualKeys(t, "items", from, to, 11)
	for i, k := range keys {
		v := "1"
		if i > 0 && i != 10 {
			v = "v" + k
		}
		if err := c.Store(ctx, StoreSet, Item{Key: k, Value: []byte(v), Flags: uint32(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	casItem, err := c.GetItem(ctx, keys[3]) // its CasID is the old owner's
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Reshard(to, time.Hour); err != nil {
		t.Fatal(err)
	}
	onNew := func(k string) []byte {
		t.Helper()
		v, err := cl.raw(newRing.Locate(k).Addr).get(k)
		if err != nil {
			t.Fatalf("%q not on its new owner: %v", k, err)
		}
		return v
	}

	if v, err := c.Increment(ctx, keys[0], 2); err != nil || v != 3 {
		t.Fatalf("Increment of a counter on its old owner = %d, %v; want 3", v, err)
	}
	if err := c.Store(ctx, StoreReplace, Item{Key: keys[1], Value: []byte("r"), Flags: 7}); err != nil {
		t.Fatalf("Replace of a key on its old owner: %v", err)
	}
	if err := c.Store(ctx, StoreAppend, Item{Key: keys[2], Value: []byte("+")}); err != nil {
		t.Fatalf("Append to a key on its old owner: %v", err)
	}
	if got := string(onNew(keys[2])); got != "v"+keys[2]+"+" {
		t.Fatalf("after Append the new owner holds %q", got)
	}
	if h := cl.holders(t, keys[2]); len(h) != 1 {
		t.Fatalf("after Append %q is held by %v, want its new owner alone", keys[2], h)
	}
	casItem.Value = []byte("swapped")
	if err := c.Store(ctx, StoreCAS, casItem); err != nil {
		t.Fatalf("CAS with the old owner's id: %v", err)
	}
	if got := string(onNew(keys[3])); got != "swapped" {
		t.Fatalf("after CAS the new owner holds %q", got)
	}
	if err := c.Store(ctx, StoreCAS, casItem); !errors.Is(err, ErrCASConflict) {
		t.Fatalf("second CAS with the same id = %v, want ErrCASConflict", err)
	}
	it, err := c.GetItem(ctx, keys[4])
	if err != nil || it.Flags != 5 || string(it.Value) != "v"+keys[4] {
		t.Fatalf("GetItem of a key on its old owner = %+v, %v", it, err)
	}
	it.Value = []byte("cas-after-get")
	if err := c.Store(ctx, StoreCAS, it); err != nil {
		t.Fatalf("CAS with the id GetItem returned during the window: %v", err)
	}
	if err := c.Store(ctx, StoreAdd, Item{Key: keys[5], Value: []byte("x")}); !errors.Is(err, ErrNotStored) {
		t.Fatalf("Add of a key on its old owner = %v, want ErrNotStored", err)
	}
	if got, err := c.GetAndTouch(ctx, keys[6], time.Hour); err != nil || got.Flags != 7 {
		t.Fatalf("GetAndTouch of a key on its old owner = %+v, %v", got, err)
	}
	if found, err := c.DeleteFound(ctx, keys[7]); !found || err != nil {
		t.Fatalf("DeleteFound of a key on its old owner = %v, %v", found, err)
	}
	if h := cl.holders(t, keys[7]); len(h) != 0 {
		t.Fatalf("deleted key still held by %v", h)
	}
	hits, err := c.GetItems(ctx, []string{keys[8], keys[1]})
	if err != nil || hits[keys[8]].Flags != 9 || hits[keys[1]].Flags != 7 || string(hits[keys[1]].Value) != "r" {
		t.Fatalf("GetItems = %v, %v", hits, err)
	}
	hits[keys[8]].Value = []byte("cas-after-getitems")
	if err := c.Store(ctx, StoreCAS, *hits[keys[8]]); err != nil {
		t.Fatalf("CAS with the id GetItems returned during the window: %v", err)
	}
	if got := string(onNew(keys[8])); got != "cas-after-getitems" {
		t.Fatalf("after CAS the new owner holds %q", got)
	}
	if err := c.Store(ctx, StorePrepend, Item{Key: keys[9], Value: []byte("<")}); err != nil {
		t.Fatalf("Prepend to a key on its old owner: %v", err)
	}
	if got := string(onNew(keys[9])); got != "<v"+keys[9] {
		t.Fatalf("after Prepend the new owner holds %q", got)
	}
	if v, err := c.Decrement(ctx, keys[10], 1); err != nil || v != 0 {
		t.Fatalf("Decrement of a counter on its old owner = %d, %v; want 0", v, err)
	}
	if h := cl.holders(t, keys[10]); len(h) != 1 {
		t.Fatalf("after Decrement %q is held by %v, want its new owner alone", keys[10], h)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	st := c.Migration()
	if st.FallbackHits == 0 || st.Backfills == 0 || st.DualWrites == 0 {
		t.Fatalf("the operations did not go through the migration: %+v", st)
	}
}

// TestItemsRedis checks what Redis can do of the item operations, and the
// typed error for what it cannot.
func TestItemsRedis(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{"miniredis", "redis-server"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 2)
			c := cl.client(t, Options{})
			if err := c.Store(ctx, StoreReplace, Item{Key: "k", Value: []byte("x")}); !errors.Is(err, ErrNotStored) {
				t.Fatalf("Replace of an absent key = %v, want ErrNotStored", err)
			}
			if err := c.Store(ctx, StoreSet, Item{Key: "k", Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
			if err := c.Store(ctx, StoreReplace, Item{Key: "k", Value: []byte("r")}); err != nil {
				t.Fatal(err)
			}
			if got, err := c.GetAndTouch(ctx, "k", time.Hour); err != nil || string(got.Value) != "r" {
				t.Fatalf("GetAndTouch = %+v, %v", got, err)
			}
			for _, op := range []StoreOp{StoreAppend, StorePrepend, StoreCAS} {
				if err := c.Store(ctx, op, Item{Key: "k", Value: []byte("x")}); !errors.Is(err, ErrUnsupported) {
					t.Errorf("%v on Redis = %v, want ErrUnsupported", op, err)
				}
			}
			if err := c.Store(ctx, StoreSet, Item{Key: "k", Value: []byte("x"), Flags: 1}); !errors.Is(err, ErrUnsupported) {
				t.Errorf("flags on Redis = %v, want ErrUnsupported", err)
			}
			if _, err := c.Increment(ctx, "k", 1); !errors.Is(err, ErrUnsupported) {
				t.Errorf("Increment on Redis = %v, want ErrUnsupported", err)
			}
			if found, err := c.DeleteFound(ctx, "k"); !found || err != nil {
				t.Fatalf("DeleteFound = %v, %v", found, err)
			}
			c.Set(ctx, "k2", []byte("v"), 0)
			if err := c.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			mustMiss(t, c, "k2")
		})
	}
}

// TestPingNamesStoppedNode checks that Ping reports the node that does not
// answer, and only that one.
func TestPingNamesStoppedNode(t *testing.T) {
	cl := newCluster(t, "memcached", 3)
	c := cl.client(t, Options{})
	cl.stop(1)
	errs := nodeErrors(c.Ping(context.Background()))
	if len(errs) != 1 || errs[0].Node.Addr != cl.addrs[1] || errs[0].Op != "ping" {
		t.Fatalf("Ping with node 1 stopped = %v", errs)
	}
	if !slices.Contains(c.Nodes(), errs[0].Node) {
		t.Fatalf("Ping names %v, not a node of the client", errs[0].Node)
	}
}
