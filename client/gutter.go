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
// for the probe if it cannot.
//
// Those hints are this process's; the other processes of a fleet hold the
// node down and up at their own times, and one may die holding hints. So
// each write through the gutter also appends its keys to the node's log
// on the gutter node first (gutter.Log: a write whose keys cannot be
// logged is not sent), and every process deletes at home the logged keys
// it has not applied: before it marks the node up, and at each tick
// (ProbeInterval) while it holds the node up, one multi-get a gutter node
// finding whether there are any. At each tick too, a process probes the
// nodes it holds down, whatever their backoff: another process may hold
// one up and write there, which this one's reads of the gutter would not
// see. So a read is at most about two ProbeIntervals plus a probe's and a
// replay's round trips (ReadTimeout + WriteTimeout) behind the writes of
// any process, whichever way its breaker went, the writer gone included:
// the bound the chaos harness's gutter runs check (internal/chaos). A key
// deleted at home from the log may have been written there since by a
// process that held the node up: a miss, never an old value; so may a key
// a process that starts finds logged. What the log cannot vouch for
// flushes the node instead: a gutter that restarted or evicted the log, an
// entry absent past its writer's bound or older than gutter.LogLife (an
// outage that long), more than DefaultGutterHints entries behind. A gutter
// node this process holds down when the node comes back leaves it its own
// hints alone. A copy on the gutter lives until GutterTTL.

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
	if c.opts.FailureThreshold > 0 { // else no node is ever held down
		var ctx context.Context
		ctx, c.gutterStop = context.WithCancel(context.Background())
		c.gutterWG.Add(1)
		go c.gutterLoop(ctx)
	}
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
// no gutter pool, or n is one of its nodes. It records the gutter node in
// m.gutterTo, for gutterTick.
func (c *Client) gutterOf(n ring.Node, m *member) *gutter.Node {
	if c.gutterRing == nil {
		return nil
	}
	if _, ok := c.gutterConns[n.Addr]; ok {
		return nil
	}
	g := c.gutterConns[c.gutterRing.Locate(n.Name).Addr]
	m.gutterTo = g
	ttl := c.opts.GutterTTL
	if ttl == 0 {
		ttl = DefaultGutterTTL
	}
	o := &c.opts
	return gutter.New(m, g, ttl, gutter.NewLog(n.Name, 2*(o.DialTimeout+o.ReadTimeout+o.WriteTimeout)))
}

// gutterLoop runs gutterTick every ProbeInterval until ctx ends.
func (c *Client) gutterLoop(ctx context.Context) {
	defer c.gutterWG.Done()
	t := time.NewTicker(c.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.gutterTick(ctx)
		}
	}
}

// gutterTick reads, on each gutter node, the logs' heads of the nodes it
// stands in for (one multi-get a gutter node): a node this process
// holds up has the keys other processes wrote through the gutter deleted
// (their writes replaced what it holds), or is held down if that fails. A
// node it holds down is probed now, whatever its backoff: another process
// may hold it up and write there, which this one's reads of the gutter
// would not see; so is a gutter node it holds down, whose logs it cannot
// read meanwhile. Each call is bounded by the node's own timeouts; ctx
// ends with the client.
func (c *Client) gutterTick(ctx context.Context) {
	st := c.state.Load()
	if st == nil {
		return
	}
	byTarget := map[*member][]*member{}
	for _, m := range st.conns {
		if m.gutter == nil || m.gutter.Log() == nil {
			continue
		}
		if m.h.Down() {
			m.h.ProbeNow()
			continue
		}
		switch t := m.gutterTo; {
		case t == nil:
		case t.Down():
			t.h.ProbeNow() // its log unread: this process sees only its own hints
		default:
			byTarget[t] = append(byTarget[t], m)
		}
	}
	for t, homes := range byTarget {
		keys := make([]string, 0, 2*len(homes))
		for _, m := range homes {
			keys = append(keys, m.gutter.Log().EpochKey(), m.gutter.Log().SeqKey())
		}
		its, err := t.Node.GetMulti(ctx, keys, false)
		if err != nil {
			continue
		}
		val := make(map[string][]byte, len(its))
		for _, it := range its {
			if it.Found {
				val[it.Key] = it.Value
			}
		}
		for _, m := range homes {
			l := m.gutter.Log()
			if !l.Pending(val[l.SeqKey()], val[l.EpochKey()]) {
				continue
			}
			if err := m.gutter.ApplyLog(ctx, m.Node); err != nil && ctx.Err() == nil {
				m.h.HoldDown("the gutter's log of the writes it missed not applied", err)
			}
		}
	}
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

// stopGutter ends gutterLoop and waits for it; without one it does
// nothing.
func (c *Client) stopGutter() {
	if c.gutterStop != nil {
		c.gutterStop()
		c.gutterWG.Wait()
	}
}
