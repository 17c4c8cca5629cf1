package client

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
)

// The gutter pool (Options.Gutter), after "Scaling Memcache at Facebook"
// (NSDI 2013): while the breaker holds a node down, state.conn hands out,
// instead of the failing stand-in, the node's gutter: one node of the pool,
// chosen by the down node's name, that takes its reads and writes, every
// TTL capped at Options.GutterTTL, so that a dead node's keys are cached
// for a while instead of all falling on the database. Its keys are never
// sent to another regular node, and go home again once the node is back.
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
const DefaultGutterHints = 1 << 16

// hintChunk is how many hinted keys one round trip deletes.
const hintChunk = 1000

// hints are the keys written through the gutter while their node was down.
// mu also orders a write's hint against the probe's flip of the breaker
// (member.comeUp, gutterNode.wrote).
type hints struct {
	mu       sync.Mutex
	keys     map[string]struct{}
	overflow bool
}

// add records keys, or the overflow past DefaultGutterHints.
func (h *hints) add(keys ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addLocked(keys...)
}

// addLocked is add with mu held.
func (h *hints) addLocked(keys ...string) {
	if h.overflow {
		return
	}
	if h.keys == nil {
		h.keys = make(map[string]struct{}, len(keys))
	}
	for _, k := range keys {
		h.keys[k] = struct{}{}
	}
	if len(h.keys) > DefaultGutterHints {
		h.keys, h.overflow = nil, true
	}
}

// take empties the hints and returns them.
func (h *hints) take() (keys []string, overflow bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.takeLocked()
}

// takeLocked is take with mu held.
func (h *hints) takeLocked() (keys []string, overflow bool) {
	for k := range h.keys {
		keys = append(keys, k)
	}
	keys, overflow = slices.Sorted(slices.Values(keys)), h.overflow
	h.keys, h.overflow = nil, false
	return keys, overflow
}

// putBack records again hints that could not be replayed.
func (h *hints) putBack(keys []string, overflow bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.putBackLocked(keys, overflow)
}

// putBackLocked is putBack with mu held.
func (h *hints) putBackLocked(keys []string, overflow bool) {
	if overflow {
		h.keys, h.overflow = nil, true
		return
	}
	h.addLocked(keys...)
}

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
func (c *Client) gutterOf(n ring.Node, m *member) *gutterNode {
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
	return &gutterNode{home: m, g: g, ttl: ttl}
}

// comePasses bounds comeUp's replays without the lock: writes may keep
// landing on the gutter while it replays.
const comePasses = 8

// comeUp is the probe's last step once m answers again (nodeHealth.comeUp):
// it replays the hints without their lock while there are many, then the
// last of them under it and marks m up with it: a write through the gutter
// that lands meanwhile waits for that one round trip, then finds m up and
// deletes its key at home itself (wrote). A replay that fails leaves m
// down for the next probe.
func (m *member) comeUp(ctx context.Context) {
	if m.gutter == nil { // a replica: let the server run what it had read before its pause
		if sleep(ctx, replaySettle) != nil || m.Node.Ping(ctx) != nil {
			return
		}
	}
	for range comePasses {
		keys, overflow := m.hints.take()
		if len(keys) == 0 && !overflow {
			break
		}
		if err := m.replay(ctx, keys, overflow); err != nil {
			m.hints.putBack(keys, overflow)
			m.notReplayed(len(keys), overflow, err)
			return
		}
	}
	m.hints.mu.Lock()
	keys, overflow := m.hints.takeLocked()
	err := m.replay(ctx, keys, overflow)
	up := false
	if err != nil {
		m.hints.putBackLocked(keys, overflow)
	} else {
		up = m.h.success()
	}
	m.hints.mu.Unlock()
	switch {
	case err != nil:
		m.notReplayed(len(keys), overflow, err)
	case up:
		m.h.markedUp()
	}
}

// notReplayed logs a probe's replay that failed: m answers, and is held
// down.
func (m *member) notReplayed(keys int, flush bool, err error) {
	m.h.log.Warn("shardcache: node answers, held down: the writes it missed not replayed",
		m.h.attrs(slog.Int("keys", keys), slog.Bool("flush", flush), slog.Any("cause", err))...)
}

// replay deletes hinted keys at home (flushes it on overflow), then on
// its gutter if it has one, so that a later outage does not read its
// copies again (a gutter that cannot be reached keeps them until
// GutterTTL).
func (m *member) replay(ctx context.Context, keys []string, overflow bool) error {
	if overflow {
		return items(m.Node).Flush(ctx)
	}
	for chunk := range slices.Chunk(keys, hintChunk) {
		if err := m.Node.DeleteMulti(ctx, chunk); err != nil {
			return err
		}
		if g := m.gutter; g != nil && !g.g.h.isDown() {
			_ = g.g.Node.DeleteMulti(ctx, chunk)
		}
	}
	return nil
}

// wrote records keys written while m missed them: as hints while m is
// down, under the lock the probe flips it up under, or, if it came back
// meanwhile (its probe replayed the hints before this write's), deleted
// at home now, past the caller's context; a delete that fails holds m
// down again for the probe.
func (m *member) wrote(ctx context.Context, keys ...string) {
	if len(keys) == 0 {
		return
	}
	m.hints.mu.Lock()
	m.hints.addLocked(keys...)
	down := m.h.isDown()
	var late []string
	var overflow bool
	if !down {
		late, overflow = m.hints.takeLocked()
	}
	m.hints.mu.Unlock()
	if down {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.h.timeout)
	defer cancel()
	var err error
	if m.tomb > 0 && !overflow {
		_, err = m.Node.Bury(dctx, late, m.tomb, node.TombDeleted)
	} else {
		err = m.replay(dctx, late, overflow)
	}
	if err != nil {
		m.hints.putBack(late, overflow)
		m.h.holdDown(err)
	}
}

// gutterNode is the stand-in state.conn hands out for a node held down
// when there is a gutter pool: g's node, TTLs capped at ttl, and each key
// written kept as a hint for home's return (member.wrote).
type gutterNode struct {
	home *member
	g    *member
	ttl  time.Duration
}

var (
	_ node.Node   = (*gutterNode)(nil)
	_ node.Items  = (*gutterNode)(nil)
	_ node.Leaser = (*gutterNode)(nil)
)

// conn is the gutter node's own client, or its stand-in while it is down
// too; each call through it is counted on home's health.
func (g *gutterNode) conn() node.Node {
	g.home.h.guttered.Add(1)
	if g.g.h.isDown() {
		return g.g.down
	}
	return g.g.Node
}

// cap caps a TTL at the gutter's: no expiry is the gutter's TTL too.
func (g *gutterNode) cap(ttl time.Duration) time.Duration {
	if ttl <= 0 || ttl > g.ttl {
		return g.ttl
	}
	return ttl
}

// capItems returns items with their TTLs capped.
func (g *gutterNode) capItems(items []node.Item) []node.Item {
	out := slices.Clone(items)
	for i := range out {
		out[i].TTL, out[i].TTLKnown = g.cap(out[i].TTL), false
	}
	return out
}

// wrote records keys written through the gutter as home's hints.
func (g *gutterNode) wrote(ctx context.Context, keys ...string) { g.home.wrote(ctx, keys...) }

// down is the error of what the gutter does not take: home's ErrNodeDown.
func (g *gutterNode) down(op node.Op) error { return g.home.down.fail(op) }

func (g *gutterNode) Get(ctx context.Context, key string) ([]byte, error) {
	return g.conn().Get(ctx, key)
}

func (g *gutterNode) GetMulti(ctx context.Context, keys []string, withTTL bool) ([]node.Item, error) {
	return g.conn().GetMulti(ctx, keys, withTTL)
}

func (g *gutterNode) Send(ctx context.Context, keys []string) node.Pending {
	return g.conn().Send(ctx, keys)
}

// SendIdle and TrySend are the gutter's own (node.Sender): two down nodes
// that share a gutter have two batches for it in one multi-get, which a
// blocking Send of the first would keep from the second's connection.
func (g *gutterNode) SendIdle(ctx context.Context, keys []string) (node.Pending, bool) {
	c := g.conn()
	if s, ok := c.(node.Sender); ok {
		return s.SendIdle(ctx, keys)
	}
	return c.Send(ctx, keys), true // the failing stand-in: it never waits
}

func (g *gutterNode) TrySend(ctx context.Context, keys []string) (node.Pending, bool) {
	c := g.conn()
	if s, ok := c.(node.Sender); ok {
		return s.TrySend(ctx, keys)
	}
	return c.Send(ctx, keys), true
}

func (g *gutterNode) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	err := g.conn().Set(ctx, key, value, g.cap(ttl))
	g.wrote(ctx, key)
	return err
}

func (g *gutterNode) SetMulti(ctx context.Context, items []node.Item) error {
	err := g.conn().SetMulti(ctx, g.capItems(items))
	g.wrote(ctx, itemKeys(items)...)
	return err
}

// Add stores on the gutter if the gutter lacks the key, which says
// nothing of home's copy; a key stored is hinted, one not stored is not.
func (g *gutterNode) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	err := g.conn().Add(ctx, key, value, g.cap(ttl))
	if err != ErrNotStored {
		g.wrote(ctx, key)
	}
	return err
}

func (g *gutterNode) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	stored, err := g.conn().AddMulti(ctx, g.capItems(items))
	var keys []string
	for i, it := range items {
		if err != nil || i >= len(stored) || stored[i] {
			keys = append(keys, it.Key) // an outcome unknown is hinted
		}
	}
	g.wrote(ctx, keys...)
	return stored, err
}

func (g *gutterNode) Delete(ctx context.Context, key string) error {
	err := g.conn().Delete(ctx, key)
	g.wrote(ctx, key)
	return err
}

func (g *gutterNode) DeleteMulti(ctx context.Context, keys []string) error {
	err := g.conn().DeleteMulti(ctx, keys)
	g.wrote(ctx, keys...)
	return err
}

func (g *gutterNode) Bury(ctx context.Context, keys []string, ttl time.Duration, kind node.TombKind) ([]bool, error) {
	found, err := g.conn().Bury(ctx, keys, g.cap(ttl), kind)
	g.wrote(ctx, keys...)
	return found, err
}

// Incr fails as on a node down: a counter in the gutter would restart from
// delta.
func (g *gutterNode) Incr(context.Context, string, int64) (int64, error) {
	return 0, g.down(node.OpIncr)
}

func (g *gutterNode) Touch(ctx context.Context, key string, ttl time.Duration) error {
	return g.conn().Touch(ctx, key, g.cap(ttl))
}

// Ping is home's stand-in's: the gutter answering says nothing of home.
func (g *gutterNode) Ping(context.Context) error { return ErrNodeDown }

// Close closes nothing: the gutter's node is the pool's.
func (g *gutterNode) Close() error { return nil }

func (g *gutterNode) GetItem(ctx context.Context, key string) (node.Item, error) {
	return items(g.conn()).GetItem(ctx, key)
}

func (g *gutterNode) Store(ctx context.Context, op node.StoreOp, it node.Item) error {
	it.TTL, it.TTLKnown = g.cap(it.TTL), false
	err := items(g.conn()).Store(ctx, op, it)
	g.wrote(ctx, it.Key)
	return err
}

func (g *gutterNode) GetAndTouch(ctx context.Context, key string, ttl time.Duration) (node.Item, error) {
	return items(g.conn()).GetAndTouch(ctx, key, g.cap(ttl))
}

// IncrDecr fails as Incr does.
func (g *gutterNode) IncrDecr(context.Context, string, uint64, bool) (uint64, error) {
	return 0, g.down(node.OpIncr)
}

func (g *gutterNode) DeleteFound(ctx context.Context, key string) (bool, error) {
	found, err := items(g.conn()).DeleteFound(ctx, key)
	g.wrote(ctx, key)
	return found, err
}

// Flush fails as on a node down: it is home's keys it would delete.
func (g *gutterNode) Flush(context.Context) error { return g.down(node.OpDeleteMulti) }

func (g *gutterNode) StoreLeased(ctx context.Context, items []node.Item, lkeys []string, token string) ([]bool, error) {
	stored, err := leaser(g.conn()).StoreLeased(ctx, g.capItems(items), lkeys, token)
	g.wrote(ctx, itemKeys(items)...)
	return stored, err
}

func (g *gutterNode) ReleaseLeases(ctx context.Context, lkeys []string, token string) error {
	return leaser(g.conn()).ReleaseLeases(ctx, lkeys, token)
}
