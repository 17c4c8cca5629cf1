package follow_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/follow"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// script is a topology.Source that streams its updates in order, then
// nothing until the watch ends.
type script []topology.Update

func (s script) Watch(ctx context.Context) <-chan topology.Update {
	out := make(chan topology.Update)
	go func() {
		defer close(out)
		for _, u := range s {
			select {
			case out <- u:
			case <-ctx.Done():
				return
			}
		}
		<-ctx.Done()
	}()
	return out
}

// fake is a follow.Client that finishes each migration at once, but for a
// held one, which it keeps until the follower releases it.
type fake struct {
	mu sync.Mutex
	r  follow.Routing
}

func (c *fake) Routing() (follow.Routing, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.r, nil
}

func (c *fake) Run(m follow.Move) (follow.Hold, error) {
	fmt.Printf("move %d → %d nodes, start %s, window %v, held %v\n",
		len(m.Old.Nodes()), len(m.New.Nodes()), m.Start.Format(time.Kitchen), m.Window, m.Held)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.r = follow.Routing{Placement: m.New}
	if !m.Held {
		return nil, nil
	}
	mig, err := migration.New(m.Old, m.New, m.Start, m.Window, migration.WithSkew(m.Skew))
	if err != nil {
		return nil, err
	}
	c.r.Migration, c.r.Held = mig, true
	return &hold{c: c, m: mig}, nil
}

// hold is the fake's held migration: its repair's tombstones are counted.
type hold struct {
	c      *fake
	m      *migration.Migration
	buried int
}

func (h *hold) Migration() *migration.Migration { return h.m }

func (h *hold) Bury(_ context.Context, _ ring.Node, keys []string) error {
	h.buried += len(keys)
	return nil
}

func (h *hold) Release() {
	fmt.Println("released after burying", h.buried, "keys")
	h.c.mu.Lock()
	h.c.r.Held = false
	h.c.mu.Unlock()
}

// A follower over a fake client: the first topology; a change without a
// migration, which starts Lead after it was received; a change that
// removes too much, refused; and a migration received after its start,
// held until the keys written since are buried on their new owners.
func Example() {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	nodes := func(names ...string) []ring.Node {
		var out []ring.Node
		for _, n := range names {
			out = append(out, ring.Node{Name: n, Addr: n + ":11211"})
		}
		return out
	}
	up := func(t *topology.Topology) topology.Update { return topology.Update{Topology: t} }
	src := script{
		up(&topology.Topology{Version: 1, Nodes: nodes("a", "b", "c")}),
		up(&topology.Topology{Version: 2, Nodes: nodes("a", "b", "c", "d")}),
		up(&topology.Topology{Version: 3, Nodes: nodes("d")}),
		up(&topology.Topology{Version: 4, Nodes: nodes("a", "b", "c", "d", "e"),
			Migration: &topology.Migration{From: nodes("a", "b", "c", "d"), Start: now.Add(-time.Minute), Window: time.Hour}}),
	}
	// OnApply runs on the follower's goroutine, in order with Run and
	// Release; the last version ends the example.
	last := make(chan struct{})
	opts := &follow.Options{Source: src, Skew: time.Second, Lead: time.Minute, Window: time.Hour,
		OnApply: func(t *topology.Topology) {
			fmt.Println("applied", t.Version)
			if t.Version == 4 {
				close(last)
			}
		}}
	cfg := follow.Config{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }}

	c := &fake{}
	f, first, err := follow.New(c, opts, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	c.r.Placement = first.New // what the client starts on
	for i := range 100 {
		f.Wrote(fmt.Sprint("user:", i)) // the client's writes, as they happen
	}
	f.Start()
	<-last // version 3 is refused

	s := f.Status()
	fmt.Printf("version %d: applied %d, refused %d, late %d, repaired %d, repairing %v\n",
		s.Version, s.Applied, s.Refused, s.Late, s.Repaired, s.Repairing)
	// Output:
	// applied 1
	// move 3 → 4 nodes, start 10:01AM, window 1h0m0s, held false
	// applied 2
	// move 4 → 5 nodes, start 9:59AM, window 1h0m0s, held true
	// released after burying 18 keys
	// applied 4
	// version 4: applied 3, refused 1, late 1, repaired 18, repairing false
}
