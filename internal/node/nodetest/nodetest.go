// Package nodetest holds conformance tests that every node.Node
// implementation runs against its real server: what the client relies on
// whatever the backend; and Map, a node over a map, and Conns, a routing
// of such nodes by address, for the examples and tests of the packages
// that wrap nodes.
package nodetest

import (
	"errors"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
)

// Tombstones checks node.Bury's contract (node/tomb.go) on n, a node of a
// real, empty server: a buried key reads as a miss on every read path, no
// copy (AddMulti, Restore) stores over it, and every write of a value
// replaces it, the conditional ones acting as on a missing key. It uses
// keys that start with prefix.
func Tombstones(t *testing.T, n node.Node, prefix string) {
	t.Helper()
	ctx := t.Context()
	k := func(s string) string { return prefix + s }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if tw, ok := n.(node.TombstoneWatcher); ok {
		tw.ExpectTombstones(time.Now().Add(time.Hour))
	}
	bury := func(keys ...string) []bool {
		t.Helper()
		found, err := n.Bury(ctx, keys, time.Hour, node.TombDeleted)
		must(err)
		if len(found) != len(keys) {
			t.Fatalf("Bury of %d keys reported %d", len(keys), len(found))
		}
		return found
	}
	isMiss := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, node.ErrCacheMiss) {
			t.Errorf("%s of a buried key = %v, want ErrCacheMiss", what, err)
		}
	}

	// Found: a value, yes; nothing, or a tombstone already, no.
	must(n.Set(ctx, k("a"), []byte("va"), time.Hour))
	if found := bury(k("a"), k("none")); !found[0] || found[1] {
		t.Errorf("Bury found %v; want [true false]", found)
	}
	if found := bury(k("a")); found[0] {
		t.Error("Bury of a buried key found it")
	}

	// Every read misses.
	_, err := n.Get(ctx, k("a"))
	isMiss("Get", err)
	items, err := n.GetMulti(ctx, []string{k("a")}, false)
	must(err)
	if items[0].Found {
		t.Errorf("GetMulti found a buried key: %+v", items[0])
	}
	items, err = n.GetMulti(ctx, []string{k("a")}, true)
	must(err)
	if items[0].Found {
		t.Errorf("GetMulti with TTLs found a buried key: %+v", items[0])
	}
	out := make([]node.Answer, 1)
	must(n.Send(ctx, []string{k("a")}).Recv(out))
	if out[0].Found {
		t.Errorf("Send found a buried key: %+v", out[0])
	}

	// No copy stores over it; a key beside it is copied.
	stored, err := n.AddMulti(ctx, []node.Item{{Key: k("a"), Value: []byte("copy"), TTL: time.Hour}, {Key: k("b"), Value: []byte("vb")}})
	must(err)
	if stored[0] || !stored[1] {
		t.Errorf("AddMulti over a tombstone and beside it stored %v; want [false true]", stored)
	}
	_, err = n.Get(ctx, k("a"))
	isMiss("Get after a refused copy", err)

	// A copy marked OverWritten replaces a write's tombstone, not a
	// Delete's, and not a value.
	_, err = n.Bury(ctx, []string{k("w")}, time.Hour, node.TombWritten)
	must(err)
	_, err = n.Get(ctx, k("w"))
	isMiss("Get of a write's tombstone", err)
	stored, err = n.AddMulti(ctx, []node.Item{{Key: k("w"), Value: []byte("plain")}})
	must(err)
	if stored[0] {
		t.Error("AddMulti without OverWritten stored over a write's tombstone")
	}
	must(n.Set(ctx, k("v"), []byte("value"), time.Hour))
	stored, err = n.AddMulti(ctx, []node.Item{
		{Key: k("w"), Value: []byte("moved"), TTL: time.Hour, OverWritten: true},
		{Key: k("a"), Value: []byte("deleted"), TTL: time.Hour, OverWritten: true},
		{Key: k("v"), Value: []byte("older"), TTL: time.Hour, OverWritten: true},
	})
	must(err)
	if !stored[0] || stored[1] || stored[2] {
		t.Errorf("AddMulti OverWritten over a write's tombstone, a Delete's and a value stored %v; want [true false false]", stored)
	}
	if v, err := n.Get(ctx, k("w")); err != nil || string(v) != "moved" {
		t.Errorf("Get after a copy over a write's tombstone = %q, %v", v, err)
	}
	if v, err := n.Get(ctx, k("v")); err != nil || string(v) != "value" {
		t.Errorf("Get of a value a copy did not replace = %q, %v", v, err)
	}
	_, err = n.Get(ctx, k("a"))
	isMiss("Get of a Delete's tombstone after an OverWritten copy", err)

	if sw, ok := n.(node.Sweeper); ok {
		must(n.Set(ctx, k("src"), []byte("vs"), time.Hour))
		dump, err := sw.Dump(ctx, []node.Item{{Key: k("src")}, {Key: k("a")}})
		must(err)
		if !dump[0].Found || dump[1].Found {
			t.Fatalf("Dump of a value and a buried key: %+v", dump)
		}
		dump[0].Key = k("a")
		stored, err := sw.Restore(ctx, dump[:1])
		must(err)
		if stored[0] {
			t.Error("Restore stored over a tombstone")
		}
		_, err = n.Bury(ctx, []string{k("rw")}, time.Hour, node.TombWritten)
		must(err)
		over := dump[0]
		over.Key, over.OverWritten = k("rw"), true
		del := over
		del.Key = k("a")
		got, err := sw.Restore(ctx, []node.Item{over, del})
		must(err)
		if !got[0] || got[1] {
			t.Errorf("Restore OverWritten over a write's tombstone and a Delete's stored %v; want [true false]", got)
		}
		ex, err := sw.Exists(ctx, []string{k("a"), k("src")})
		must(err)
		if ex[0] || !ex[1] {
			t.Errorf("Exists of a buried key and a value = %v", ex)
		}
		// A listing may name a tombstone (memcached's metadump does), but
		// its dump finds none.
		must(sw.Scan(ctx, node.ScanOptions{Prefix: prefix, Page: 100}, func(page []node.Item) error {
			got, err := sw.Dump(ctx, page)
			if err != nil {
				return err
			}
			for _, it := range got {
				if it.Found && (it.Key == k("a") || it.Key == k("none")) {
					t.Errorf("a sweep's dump found the buried key %q: %+v", it.Key, it)
				}
			}
			return nil
		}))
	}

	// A write of a value replaces it.
	must(n.Set(ctx, k("a"), []byte("new"), time.Hour))
	if v, err := n.Get(ctx, k("a")); err != nil || string(v) != "new" {
		t.Errorf("Get after Set over a tombstone = %q, %v", v, err)
	}
	bury(k("a"))
	must(n.SetMulti(ctx, []node.Item{{Key: k("a"), Value: []byte("multi"), TTL: time.Hour}}))
	if v, err := n.Get(ctx, k("a")); err != nil || string(v) != "multi" {
		t.Errorf("Get after SetMulti over a tombstone = %q, %v", v, err)
	}
	bury(k("a"))
	if err := n.Add(ctx, k("a"), []byte("added"), time.Hour); err != nil {
		t.Errorf("Add over a tombstone = %v, want stored", err)
	} else if v, err := n.Get(ctx, k("a")); err != nil || string(v) != "added" {
		t.Errorf("Get after Add over a tombstone = %q, %v", v, err)
	}
	if err := n.Add(ctx, k("a"), []byte("again"), time.Hour); !errors.Is(err, node.ErrNotStored) {
		t.Errorf("Add over the value it stored = %v, want ErrNotStored", err)
	}
	bury(k("c"))
	if v, err := n.Incr(ctx, k("c"), 5); err != nil || v != 5 {
		t.Errorf("Incr of a buried key = %d, %v; want a new counter at 5", v, err)
	}
	bury(k("a"))
	isMiss("Touch", n.Touch(ctx, k("a"), time.Minute))

	it, ok := n.(node.Items)
	if !ok {
		return
	}
	bury(k("a"))
	_, err = it.GetItem(ctx, k("a"))
	isMiss("GetItem", err)
	_, err = it.GetAndTouch(ctx, k("a"), time.Minute)
	isMiss("GetAndTouch", err)
	if _, err := it.IncrDecr(ctx, k("a"), 1, false); err != nil && !errors.Is(err, node.ErrCacheMiss) && !errors.Is(err, node.ErrUnsupported) {
		t.Errorf("IncrDecr of a buried key = %v, want ErrCacheMiss", err)
	}
	for _, op := range []node.StoreOp{node.StoreReplace, node.StoreAppend, node.StorePrepend} {
		err := it.Store(ctx, op, node.Item{Key: k("a"), Value: []byte("x")})
		if errors.Is(err, node.ErrUnsupported) {
			continue
		}
		if !errors.Is(err, node.ErrNotStored) {
			t.Errorf("Store %v over a tombstone = %v, want ErrNotStored", op, err)
		}
	}
	if found, err := it.DeleteFound(ctx, k("a")); err != nil || found {
		t.Errorf("DeleteFound of a buried key = %v, %v; want not found", found, err)
	}
}
