package backfill_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/backfill"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// recorder is a Map that keeps the items of every AddMulti, and fails
// them with addErr when it is set.
type recorder struct {
	*nodetest.Map
	addErr error
	mu     sync.Mutex
	added  []node.Item
}

func (r *recorder) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	r.mu.Lock()
	r.added = append(r.added, items...)
	r.mu.Unlock()
	if r.addErr != nil {
		return nil, r.addErr
	}
	return r.Map.AddMulti(ctx, items)
}

// dumper is a Map with node.Sweeper's Dump, Restore and Exists (its other
// calls panic): a dump is the value itself.
type dumper struct {
	*nodetest.Map
	node.Sweeper
}

func (d dumper) Dump(ctx context.Context, keys []node.Item) ([]node.Item, error) {
	return d.GetMulti(ctx, node.ItemKeys(keys), true)
}

func (d dumper) Restore(ctx context.Context, items []node.Item) ([]bool, error) {
	return d.AddMulti(ctx, items)
}

func (d dumper) Exists(ctx context.Context, keys []string) ([]bool, error) {
	return backfill.Holds(ctx, d.Map, keys)
}

// copyFixture is a migration from node a to node b, in its window, and the
// routes of keys at its instant now.
type copyFixture struct {
	a, b ring.Node
	mig  *migration.Migration
	now  time.Time
}

func newCopyFixture(t *testing.T, skew time.Duration) copyFixture {
	t.Helper()
	f := copyFixture{a: ring.Node{Name: "a", Addr: "a:1"}, b: ring.Node{Name: "b", Addr: "b:1"}}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var err error
	if f.mig, err = migration.New(placement{f.a}, placement{f.b}, start, time.Hour, migration.WithSkew(skew)); err != nil {
		t.Fatal(err)
	}
	f.now = start.Add(time.Second)
	return f
}

func (f copyFixture) routes(keys ...string) []migration.Route {
	rs := make([]migration.Route, len(keys))
	for i, k := range keys {
		rs[i] = f.mig.Route(k, f.now)
	}
	return rs
}

// wrapped is a Copier.Wrap that names the step.
func wrapped(op string, n ring.Node, keys []string, err error) error {
	return fmt.Errorf("%s %s %v: %w", op, n.Name, keys, err)
}

// TestCopyCheck: with Check, the keys a new owner holds are not read on
// their old owner (counted as new hits), and a new owner that cannot be
// asked fails the copy, its error wrapped as a "get".
func TestCopyCheck(t *testing.T) {
	f := newCopyFixture(t, 0)
	ctx := t.Context()
	old, nw := nodetest.NewMap(), nodetest.NewMap()
	_ = old.Set(ctx, "a", []byte("old a"), time.Hour)
	_ = old.Set(ctx, "b", []byte("old b"), time.Hour)
	_ = nw.Set(ctx, "a", []byte("new a"), time.Hour)
	cp := backfill.Copier{Migration: f.mig, Conns: nodetest.Conns{"a:1": old, "b:1": nw}, Now: f.now, Wrap: wrapped}
	var hits []string
	how := backfill.How{Check: true, Sync: true, Strict: true}
	if err := cp.Copy(ctx, []string{"a", "b"}, f.routes("a", "b"), how, func(it *node.Item) { hits = append(hits, it.Key) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hits, []string{"b"}) || string(nw.Value("a")) != "new a" || string(nw.Value("b")) != "old b" {
		t.Fatalf("hits %v, new owner a %q b %q", hits, nw.Value("a"), nw.Value("b"))
	}
	if s := f.mig.Counters.Snapshot(); s.NewHits != 1 || s.FallbackHits != 1 || s.Backfills != 1 {
		t.Fatalf("counters %+v", s)
	}

	cp.Conns = nodetest.Conns{"a:1": old, "b:1": node.NewFailing(node.ErrNodeDown, nil)}
	err := cp.Copy(ctx, []string{"b"}, f.routes("b"), how, nil)
	if !errors.Is(err, node.ErrNodeDown) || err.Error() != "get b [b]: shardcache: node down" {
		t.Fatalf("Copy with the new owner down = %v", err)
	}
}

// TestCopyStrict: a failure to read the old owner or to write the copy is
// returned, wrapped, when the copy is Strict; otherwise a failed read is
// returned with the rest (the key may be there: not a miss) and a failed
// copy counted; without Wrap the error is itself.
func TestCopyStrict(t *testing.T) {
	f := newCopyFixture(t, 0)
	ctx := t.Context()
	down := node.NewFailing(node.ErrNodeDown, nil)
	nw := &recorder{Map: nodetest.NewMap()}
	cp := backfill.Copier{Migration: f.mig, Conns: nodetest.Conns{"a:1": down, "b:1": nw}, Now: f.now, Wrap: wrapped}
	keys := []string{"k1", "k2"}
	if err := cp.Copy(ctx, keys, f.routes(keys...), backfill.How{Sync: true, Strict: true}, nil); err == nil ||
		err.Error() != "get a [k1 k2]: shardcache: node down" {
		t.Fatalf("strict read of an old owner down = %v", err)
	}
	found, other := false, nodetest.NewMap()
	_ = other.Set(ctx, "k3", []byte("v3"), 0)
	cp.Conns = nodetest.Conns{"a:1": down, "b:1": nw, "c:1": other}
	routes := append(f.routes(keys...), f.routes("k3")[0])
	routes[2].Old = ring.Node{Name: "c", Addr: "c:1"}
	err := cp.Copy(ctx, append(keys, "k3"), routes, backfill.How{Reread: true}, func(it *node.Item) { found = it.Key == "k3" })
	if err == nil || err.Error() != "get a [k1 k2]: shardcache: node down" || !errors.Is(err, node.ErrNodeDown) {
		t.Fatalf("a read's copy from an old owner down = %v; want its failure", err)
	}
	if !found || string(nw.Value("k3")) != "v3" {
		t.Fatalf("the other old owner's key: reported %v, copied %q", found, nw.Value("k3"))
	}
	cp.Conns = nodetest.Conns{"a:1": down, "b:1": nw}
	if s := f.mig.Counters.Snapshot(); s.FallbackErrors != 4 || s.FallbackHits != 1 {
		t.Fatalf("counters %+v", s)
	}

	old := nodetest.NewMap()
	_ = old.Set(ctx, "k1", []byte("v"), 0)
	nw.addErr = errors.New("refused")
	cp.Conns = nodetest.Conns{"a:1": old, "b:1": nw}
	if err := cp.Copy(ctx, keys, f.routes(keys...), backfill.How{Sync: true, Strict: true}, nil); err == nil ||
		err.Error() != "backfill b [k1]: refused" {
		t.Fatalf("strict copy the new owner refuses = %v", err)
	}
	if err := cp.Copy(ctx, keys, f.routes(keys...), backfill.How{Reread: true}, nil); err != nil {
		t.Fatalf("a read's copy the new owner refuses = %v", err)
	}
	cp.Wrap = nil
	if err := cp.Copy(ctx, keys, f.routes(keys...), backfill.How{Sync: true, Strict: true}, nil); err != nw.addErr {
		t.Fatalf("without Wrap = %v", err)
	}
	if d := f.mig.Counters.BackfillsDropped.Load(); d != 3 {
		t.Fatalf("%d copies dropped, want 3", d)
	}
}

// TestCopyOverWritten: each copy carries the copier's OverWritten, its TTL
// the old owner's, and a key found before copies may be made (start+skew)
// is reported and not copied.
func TestCopyOverWritten(t *testing.T) {
	ctx := t.Context()
	for _, over := range []bool{false, true} {
		f := newCopyFixture(t, 0)
		old, nw := nodetest.NewMap(), &recorder{Map: nodetest.NewMap()}
		_ = old.Set(ctx, "k", []byte("v"), time.Minute)
		cp := backfill.Copier{Migration: f.mig, Conns: nodetest.Conns{"a:1": old, "b:1": nw}, Now: f.now, OverWritten: over}
		if err := cp.Copy(ctx, []string{"k"}, f.routes("k"), backfill.How{Reread: true}, func(*node.Item) {}); err != nil {
			t.Fatal(err)
		}
		if len(nw.added) != 1 || nw.added[0].OverWritten != over || nw.added[0].TTL != time.Minute {
			t.Fatalf("OverWritten %v: copies %+v", over, nw.added)
		}
	}
	f := newCopyFixture(t, time.Minute) // now is within the skew after the start
	old, nw := nodetest.NewMap(), &recorder{Map: nodetest.NewMap()}
	_ = old.Set(ctx, "k", []byte("v"), 0)
	found := 0
	cp := backfill.Copier{Migration: f.mig, Conns: nodetest.Conns{"a:1": old, "b:1": nw}, Now: f.now}
	if err := cp.Copy(ctx, []string{"k"}, f.routes("k"), backfill.How{Reread: true}, func(*node.Item) { found++ }); err != nil {
		t.Fatal(err)
	}
	if found != 1 || len(nw.added) != 0 {
		t.Fatalf("before copies may be made: found %d, copies %+v", found, nw.added)
	}
}

// TestCopyQueue: with a Queue, copies are the worker's, after Copy returns,
// unless the copy is Sync.
func TestCopyQueue(t *testing.T) {
	f := newCopyFixture(t, 0)
	ctx := t.Context()
	old := nodetest.NewMap()
	_ = old.Set(ctx, "k1", []byte("v1"), 0)
	_ = old.Set(ctx, "k2", []byte("v2"), 0)
	g := &gate{Map: nodetest.NewMap(), entered: make(chan []node.Item), release: make(chan struct{})}
	q := backfill.NewQueue(backfill.QueueConfig{Size: 4, Timeout: time.Minute, Now: func() time.Time { return f.now },
		Logger: slog.New(slog.DiscardHandler)})
	defer q.Close()
	cp := backfill.Copier{Migration: f.mig, Conns: nodetest.Conns{"a:1": old, "b:1": g}, Now: f.now, Queue: q}
	if err := cp.Copy(ctx, []string{"k1"}, f.routes("k1"), backfill.How{Reread: true}, func(*node.Item) {}); err != nil {
		t.Fatal(err)
	}
	if g.Value("k1") != nil {
		t.Fatal("a queued copy was written before Copy returned")
	}
	if got := <-g.entered; got[0].Key != "k1" {
		t.Fatalf("the worker wrote %+v", got)
	}
	g.release <- struct{}{}

	done := make(chan error)
	go func() {
		done <- cp.Copy(ctx, []string{"k2"}, f.routes("k2"), backfill.How{Check: true, Sync: true, Strict: true}, nil)
	}()
	if got := <-g.entered; got[0].Key != "k2" {
		t.Fatalf("the synchronous copy wrote %+v", got)
	}
	g.release <- struct{}{}
	if err := <-done; err != nil || string(g.Value("k2")) != "v2" {
		t.Fatalf("synchronous copy: %v, k2 = %q", err, g.Value("k2"))
	}
}

// TestCopyWhole: a Whole copy dumps the old owner's keys and restores them
// on the new one; an old owner that cannot be swept is a failure to read.
func TestCopyWhole(t *testing.T) {
	f := newCopyFixture(t, 0)
	ctx := t.Context()
	old, nw := dumper{Map: nodetest.NewMap()}, dumper{Map: nodetest.NewMap()}
	_ = old.Set(ctx, "h", []byte("a hash"), time.Hour)
	found := false
	cp := backfill.Copier{Migration: f.mig, Conns: nodetest.Conns{"a:1": old, "b:1": nw}, Now: f.now}
	how := backfill.How{Sync: true, Whole: true}
	if err := cp.Copy(ctx, []string{"h"}, f.routes("h"), how, func(*node.Item) { found = true }); err != nil {
		t.Fatal(err)
	}
	if !found || string(nw.Value("h")) != "a hash" || nw.TTL("h") != time.Hour {
		t.Fatalf("whole copy: found %v, new owner %q for %v", found, nw.Value("h"), nw.TTL("h"))
	}
	cp.Conns = nodetest.Conns{"a:1": nodetest.NewMap(), "b:1": nw}
	if err := cp.Copy(ctx, []string{"h"}, f.routes("h"), how, nil); !errors.Is(err, node.ErrSweepUnsupported) {
		t.Fatalf("whole copy from an old owner without Dump = %v", err)
	}
	if e := f.mig.Counters.FallbackErrors.Load(); e != 1 {
		t.Fatalf("an old owner without Dump: %d errors counted", e)
	}
}

// TestReadBack: the keys of each batch are read from their node, and only
// those found there are reported, with the node's value.
func TestReadBack(t *testing.T) {
	ctx := t.Context()
	nw := nodetest.NewMap()
	_ = nw.Set(ctx, "copied", []byte("on the new owner"), 0)
	b := ring.Node{Name: "b", Addr: "b:1"}
	bs := fanout.New(nodetest.Conns{"b:1": nw})
	bs.AddKey(b, "copied", 0)
	bs.AddKey(b, "expired since", 1)
	var got []string
	backfill.ReadBack(ctx, bs, func(it *node.Item) { got = append(got, it.Key+"="+string(it.Value)) })
	if !slices.Equal(got, []string{"copied=on the new owner"}) {
		t.Fatalf("ReadBack reported %q", got)
	}
}
