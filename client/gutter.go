package client

import (
	"context"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/gutter"
	"github.com/shardcache/shardcache/ring"
)

// The gutter pool (Options.Gutter), after "Scaling Memcache at Facebook"
// (NSDI 2013): while the breaker holds a node down, state.conn hands out,
// instead of the failing stand-in, the node's gutter: one node of the pool,
// chosen by the down node's name, that takes its reads and writes, every
// TTL capped at Options.GutterTTL, so that a dead node's keys are cached
// for a while instead of all falling on the database. Its keys are never
// sent to another regular node, and go home again once the node is back.
// The stand-in (gutter.Node), the hints (gutter.Hints) and their replay on
// the node's return (gutter.Return) are package internal/node/gutter's;
// this file decides when the gutter stands in, and when the replay runs.
//
// A node that was paused or cut off, not restarted, comes back with the
// values it held, which the writes sent to the gutter meanwhile replaced:
// each key written through the gutter (a set, an add that stored, a
// delete) is kept as a hint, and before the node is marked up the probe
// deletes the hinted keys there, and on the gutter (a later outage would
// read its copy again), one round trip per thousand; past
// DefaultGutterHints keys the node is flushed instead. Until that succeeds
// the node stays down (a server that refuses the flush, memcached -F,
// keeps it down: logged at each probe). The hints and the breaker's flip
// up are taken under one lock: a write that lands during the replay is
// replayed too, and one routed to the gutter an instant before the node
// came back deletes its key at home itself, or holds the node down again
// for the probe if it cannot. What is kept is this process's: another
// process that sent writes to the gutter replays its own hints when its
// own probe finds the node, so for the time between two processes' probes
// a reader of the first may see at home a value the second replaced
// meanwhile, and a copy on the gutter lives until GutterTTL.
//
// Counters do not move to the gutter: an Incr there would restart from
// nothing, so it fails with ErrNodeDown, as without a gutter. Nor does a
// running migration use it: its copies and tombstones must land on the
// owners, so a node down during a window is down, as without a gutter.

// DefaultGutterTTL caps the TTL of what is written to the gutter pool.
const DefaultGutterTTL = 10 * time.Second

// DefaultGutterHints is how many keys written through the gutter a node's
// hints hold; beyond, the node is flushed when it comes back.
const DefaultGutterHints = gutter.MaxHints

// initGutter acquires the gutter pool's nodes, once, for the client's
// life; the nodes dialed after it get their gutter (dial).
func (c *Client) initGutter() error {
	if len(c.opts.Gutter) == 0 {
		return nil
	}
	r, err := ring.New(c.opts.Gutter)
	if err != nil {
		return fmt.Errorf("%w: Gutter: %w", ErrBadOptions, err)
	}
	conns, err := c.pools.Acquire(r.Nodes())
	if err != nil {
		return err
	}
	c.gutterRing, c.gutterConns = r, conns
	return nil
}

// checkNotGutter refuses a placement with a gutter node among its own:
// its copies, TTLs capped, would be read as the owner's.
func (c *Client) checkNotGutter(p ring.Locator) error {
	for _, n := range p.Nodes() {
		if _, ok := c.gutterConns[n.Addr]; ok {
			return fmt.Errorf("%w: %s is a gutter node (Options.Gutter), not a regular one", ErrBadOptions, n.Addr)
		}
	}
	return nil
}

// gutterOf returns the gutter of the node m, dialed for address n, or nil:
// no gutter pool, or n is one of its nodes.
func (c *Client) gutterOf(n ring.Node, m *member) *gutter.Node {
	if c.gutterRing == nil {
		return nil
	}
	if _, ok := c.gutterConns[n.Addr]; ok {
		return nil
	}
	g := c.gutterConns[c.gutterRing.Locate(n.Name).Addr]
	ttl := c.opts.GutterTTL
	if ttl == 0 {
		ttl = DefaultGutterTTL
	}
	return gutter.New(m, g, ttl)
}

// back is m's way back once it was held down (gutter.Return): its hints
// replayed at home and on its gutter before it is marked up.
func (m *member) back() gutter.Return {
	return gutter.Return{Home: m.Node, Gutter: m.gutter, Hints: &m.hints, Health: m.h, Tomb: m.tomb}
}

// comeUp is the probe's last step once m answers again (health.Observer.ComeUp):
// a replica first lets the server run what it had read before its pause,
// then m's hints are replayed and m marked up (gutter.Return.ComeUp). A
// replay that fails leaves m down for the next probe.
func (m *member) comeUp(ctx context.Context) {
	if m.gutter == nil { // a replica: let the server run what it had read before its pause
		if sleep(ctx, replaySettle) != nil || m.Node.Ping(ctx) != nil {
			return
		}
	}
	m.back().ComeUp(ctx)
}

// Wrote records keys written while m missed them: as hints while m is
// down, or deleted at home now if it came back meanwhile
// (gutter.Return.Wrote).
func (m *member) Wrote(ctx context.Context, keys ...string) { m.back().Wrote(ctx, keys...) }

// A member is the home of its gutter, and a gutter node of the pool
// (gutter.Home, gutter.Target).
var (
	_ gutter.Home   = (*member)(nil)
	_ gutter.Target = (*member)(nil)
)

// Guttered counts a call sent to m's gutter.
func (m *member) Guttered() { m.h.Guttered.Add(1) }

// Standin is m's stand-in while it is held down: each call fails at once
// with ErrNodeDown.
func (m *member) Standin() node.Node { return m.down }
