package backfill_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/backfill"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// TestWriteFails: copies a node did not take for a failure are dropped
// and counted so; a copy of any type needs node.Sweeper's Restore.
func TestWriteFails(t *testing.T) {
	cs := &migration.Counters{}
	copies := []node.Item{{Key: "a"}, {Key: "b"}}
	down := node.NewFailing(node.ErrNodeDown, nil)
	if stored, err := backfill.Write(t.Context(), cs, down, copies, false, false); !errors.Is(err, node.ErrNodeDown) || !slices.Equal(stored, []bool{false, false}) {
		t.Fatalf("Write to a node down = %v, %v", stored, err)
	}
	if stored, err := backfill.Write(t.Context(), cs, nodetest.NewMap(), copies, true, false); !errors.Is(err, node.ErrSweepUnsupported) || len(stored) != 2 {
		t.Fatalf("whole copies to a node without Restore = %v, %v", stored, err)
	}
	if s := cs.Snapshot(); s.BackfillsDropped != 4 || s.Backfills != 0 {
		t.Fatalf("counters %+v", s)
	}
}

// TestWriteOverwrite: the seeded bug sets every copy, over a newer value.
func TestWriteOverwrite(t *testing.T) {
	m := nodetest.NewMap()
	_ = m.Set(t.Context(), "a", []byte("newer"), 0)
	stored, err := backfill.Write(t.Context(), &migration.Counters{}, m, []node.Item{{Key: "a", Value: []byte("old")}}, false, true)
	if err != nil || !stored[0] || string(m.Value("a")) != "old" {
		t.Fatalf("overwrite: %v, %v, a = %q", stored, err, m.Value("a"))
	}
}

// TestHolds: a node without node.Sweeper answers by a read of the keys.
func TestHolds(t *testing.T) {
	m := nodetest.NewMap()
	_ = m.Set(t.Context(), "b", []byte("v"), 0)
	if found, err := backfill.Holds(t.Context(), m, []string{"a", "b"}); err != nil || !slices.Equal(found, []bool{false, true}) {
		t.Fatalf("Holds = %v, %v", found, err)
	}
}

// gate is a node whose AddMulti tells entered of each batch, then waits
// for release.
type gate struct {
	*nodetest.Map
	entered chan []node.Item
	release chan struct{}
}

func (g *gate) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	g.entered <- items
	<-g.release
	return g.Map.AddMulti(ctx, items)
}

// conns routes every node to one client.
type conns struct{ n node.Node }

func (c conns) Conn(ring.Node) node.Node { return c.n }

// TestQueue: the worker writes copies after Add returns; while it is busy
// and the queue full, copies are dropped and counted, and the queue logs
// once that it is full and once that it accepts again; copies past their
// window are dropped by the worker.
func TestQueue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	one := ring.Node{Name: "a", Addr: "a:1"}
	p := ring.Node{Name: "b", Addr: "b:1"}
	mig, err := migration.New(placement{one}, placement{p}, t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	over, err := migration.New(placement{one}, placement{p}, t0.Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{Map: nodetest.NewMap(), entered: make(chan []node.Item), release: make(chan struct{})}
	var logs bytes.Buffer
	q := backfill.NewQueue(backfill.QueueConfig{Size: 2, Timeout: time.Minute, Now: func() time.Time { return t0.Add(time.Second) },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	cs := conns{g}
	item := func(k string) []node.Item { return []node.Item{{Key: k, Value: []byte("v")}} }
	next := func(want string) {
		t.Helper()
		if got := <-g.entered; got[0].Key != want {
			t.Fatalf("worker wrote %v, want %s", got, want)
		}
	}

	q.Add(mig, cs, p, item("k1"))
	next("k1") // the worker writes k1, held
	q.Add(mig, cs, p, item("k2"))
	q.Add(mig, cs, p, item("k3")) // queued
	q.Add(mig, cs, p, item("k4")) // full: dropped
	q.Add(mig, cs, p, item("k5")) // dropped, not logged again
	g.release <- struct{}{}
	next("k2")
	q.Add(over, cs, p, item("late")) // accepted again: dropped by the worker, its window over
	g.release <- struct{}{}
	next("k3")
	q.Add(mig, cs, p, item("k6"))
	g.release <- struct{}{}
	next("k6") // late was dropped
	g.release <- struct{}{}
	q.Close() // waits for the worker: k6 is written
	for _, k := range []string{"k1", "k2", "k3", "k6"} {
		if string(g.Value(k)) != "v" {
			t.Fatalf("%s = %q after the worker wrote it", k, g.Value(k))
		}
	}
	if g.Value("k4") != nil || g.Value("late") != nil {
		t.Fatal("a dropped copy was written")
	}
	if s := mig.Counters.Snapshot(); s.BackfillsDropped != 2 {
		t.Fatalf("counters %+v; want 2 dropped", s)
	}
	if d := over.Counters.BackfillsDropped.Load(); d != 1 {
		t.Fatalf("a copy past its window: %d dropped", d)
	}
	if n := strings.Count(logs.String(), "backfill queue full"); n != 1 || !strings.Contains(logs.String(), "accepting copies again") {
		t.Fatalf("logs:\n%s", logs.String())
	}
}

// placement puts every key on its one node.
type placement []ring.Node

func (p placement) Locate(string) ring.Node { return p[0] }
func (p placement) Nodes() []ring.Node      { return p }
