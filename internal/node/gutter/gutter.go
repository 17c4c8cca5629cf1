// Package gutter is the stand-in of a node held down when the client has a
// gutter pool (the client's Options.Gutter, after "Scaling Memcache at
// Facebook", NSDI 2013): a Node sends home's reads and writes to one node
// of the pool, its Target, every TTL capped, and tells home of each key it
// wrote (Home.Wrote), which the client keeps as Hints and deletes at home
// before home serves again (Return, which a replica's hints take too).
// When to route to the gutter, and when home's replay runs, are the
// client's policy (its gutter.go); this package is the wrapper, the set of
// hints and their replay.
//
// Counters do not move to the gutter: an Incr there would restart from
// nothing, so it fails with home's error (Home.Fail), as a Flush does: it
// is home's keys it would delete.
//
//	g := gutter.New(home, target, 10*time.Second, gutter.NewLog("cache-1", time.Second))
//	err := g.Set(ctx, "user:42", v, time.Hour) // on the target for 10s; home.Wrote(ctx, "user:42")
//	gutter.Return{Home: n, Gutter: g, Hints: &hints, Health: obs}.ComeUp(ctx) // hints deleted, then up
package gutter

import (
	"context"
	"slices"
	"time"

	"github.com/shardcache/shardcache/internal/node"
)

// Home is the node a Node stands in for, as the client holds it.
type Home interface {
	// Guttered counts a call sent to the gutter for home.
	Guttered()
	// Wrote records keys written through the gutter while home missed
	// them (its hints).
	Wrote(ctx context.Context, keys ...string)
	// Fail returns home's counted failure (node.ErrNodeDown) of a call of
	// kind op that the gutter does not take.
	Fail(op node.Op) error
}

// Target is the node of the gutter pool a Node sends home's calls to, as
// the client holds it.
type Target interface {
	// Conn is the node's client.
	Conn() node.Node
	// Down reports whether the client holds the node down too.
	Down() bool
	// Standin is what takes the node's calls while it is held down: each
	// fails at once.
	Standin() node.Node
}

// Node stands in for home while the client holds it down: each call goes
// to the target, TTLs capped at ttl, and each key written is told to home.
// It is a node.Node with the Items, Leaser and Sender capabilities.
type Node struct {
	home Home
	to   Target
	ttl  time.Duration
	log  *Log
}

var (
	_ node.Node   = (*Node)(nil)
	_ node.Items  = (*Node)(nil)
	_ node.Leaser = (*Node)(nil)
	_ node.Sender = (*Node)(nil)
)

// New returns the stand-in of home that sends its calls to the target,
// every TTL capped at ttl, each write's keys appended to log first (nil:
// no log, the hints are home's alone).
func New(home Home, to Target, ttl time.Duration, log *Log) *Node {
	return &Node{home: home, to: to, ttl: ttl, log: log}
}

// publish appends keys to home's log on c, the target's client that the
// write goes to, before they are written there: a write whose keys are
// not logged is not sent, since a process that marks home up could not
// find them. They are hinted at home all the same (the write may have
// been sent, or the log half written). The target's stand-in (it is held
// down) fails the write itself.
func (g *Node) publish(ctx context.Context, c node.Node, keys ...string) error {
	if g.log == nil || len(keys) == 0 || c != g.to.Conn() {
		return nil
	}
	err := g.log.Publish(ctx, c, keys)
	if err != nil {
		g.home.Wrote(ctx, keys...)
	}
	return err
}

// Forget deletes keys on the target, unless it is held down: home has
// them back, and a later outage would read the target's copies again (a
// target that cannot be reached keeps them until the TTL).
func (g *Node) Forget(ctx context.Context, keys []string) {
	if !g.to.Down() {
		_ = g.to.Conn().DeleteMulti(ctx, keys)
	}
}

// ApplyLog deletes at home the keys of home's log on the target that this
// process has not applied (Log.Apply), before home serves again and at
// each tick while it does. Without a log, or while the target is held
// down too (its log cannot be read: the process's own hints are all
// there is), it does nothing.
func (g *Node) ApplyLog(ctx context.Context, home node.Node) error {
	if g.log == nil || g.to.Down() {
		return nil
	}
	return g.log.Apply(ctx, g.to.Conn(), home)
}

// Log is home's log on the target; nil without one.
func (g *Node) Log() *Log { return g.log }

// conn is the target's client, or its stand-in while it is down too; each
// call through it is counted on home's.
func (g *Node) conn() node.Node {
	g.home.Guttered()
	if g.to.Down() {
		return g.to.Standin()
	}
	return g.to.Conn()
}

// cap caps a TTL at the gutter's: no expiry is the gutter's TTL too.
func (g *Node) cap(ttl time.Duration) time.Duration {
	if ttl <= 0 || ttl > g.ttl {
		return g.ttl
	}
	return ttl
}

// capItems returns items with their TTLs capped.
func (g *Node) capItems(items []node.Item) []node.Item {
	out := slices.Clone(items)
	for i := range out {
		out[i].TTL, out[i].TTLKnown = g.cap(out[i].TTL), false
	}
	return out
}

// Get reads key from the target.
func (g *Node) Get(ctx context.Context, key string) ([]byte, error) {
	return g.conn().Get(ctx, key)
}

// GetMulti reads keys from the target.
func (g *Node) GetMulti(ctx context.Context, keys []string, withTTL bool) ([]node.Item, error) {
	return g.conn().GetMulti(ctx, keys, withTTL)
}

// Send sends a multi-get of keys to the target.
func (g *Node) Send(ctx context.Context, keys []string) node.Pending {
	return g.conn().Send(ctx, keys)
}

// SendIdle and TrySend are the target's own (node.Sender): two down nodes
// that share a gutter have two batches for it in one multi-get, which a
// blocking Send of the first would keep from the second's connection.
func (g *Node) SendIdle(ctx context.Context, keys []string) (node.Pending, bool) {
	c := g.conn()
	if s, ok := c.(node.Sender); ok {
		return s.SendIdle(ctx, keys)
	}
	return c.Send(ctx, keys), true // the failing stand-in: it never waits
}

// TrySend is the target's TrySend (see SendIdle).
func (g *Node) TrySend(ctx context.Context, keys []string) (node.Pending, bool) {
	c := g.conn()
	if s, ok := c.(node.Sender); ok {
		return s.TrySend(ctx, keys)
	}
	return c.Send(ctx, keys), true
}

// Set stores key on the target, its TTL capped, and tells home.
func (g *Node) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	c := g.conn()
	if err := g.publish(ctx, c, key); err != nil {
		return err
	}
	err := c.Set(ctx, key, value, g.cap(ttl))
	g.home.Wrote(ctx, key)
	return err
}

// SetMulti stores the items on the target, their TTLs capped, and tells
// home.
func (g *Node) SetMulti(ctx context.Context, items []node.Item) error {
	c := g.conn()
	if err := g.publish(ctx, c, node.ItemKeys(items)...); err != nil {
		return err
	}
	err := c.SetMulti(ctx, g.capItems(items))
	g.home.Wrote(ctx, node.ItemKeys(items)...)
	return err
}

// Add stores on the target if the target lacks the key, which says
// nothing of home's copy; a key stored is told to home, one not stored is
// not.
func (g *Node) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	c := g.conn()
	if err := g.publish(ctx, c, key); err != nil {
		return err
	}
	err := c.Add(ctx, key, value, g.cap(ttl))
	if err != node.ErrNotStored {
		g.home.Wrote(ctx, key)
	}
	return err
}

// AddMulti adds the items on the target; those stored, or whose outcome
// is unknown, are told to home.
func (g *Node) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	c := g.conn()
	if err := g.publish(ctx, c, node.ItemKeys(items)...); err != nil {
		return nil, err
	}
	stored, err := c.AddMulti(ctx, g.capItems(items))
	var keys []string
	for i, it := range items {
		if err != nil || i >= len(stored) || stored[i] {
			keys = append(keys, it.Key) // an outcome unknown is hinted
		}
	}
	g.home.Wrote(ctx, keys...)
	return stored, err
}

// Delete deletes key on the target and tells home.
func (g *Node) Delete(ctx context.Context, key string) error {
	c := g.conn()
	if err := g.publish(ctx, c, key); err != nil {
		return err
	}
	err := c.Delete(ctx, key)
	g.home.Wrote(ctx, key)
	return err
}

// DeleteMulti deletes keys on the target and tells home.
func (g *Node) DeleteMulti(ctx context.Context, keys []string) error {
	c := g.conn()
	if err := g.publish(ctx, c, keys...); err != nil {
		return err
	}
	err := c.DeleteMulti(ctx, keys)
	g.home.Wrote(ctx, keys...)
	return err
}

// Bury buries keys on the target, the tombstones' TTL capped, and tells
// home.
func (g *Node) Bury(ctx context.Context, keys []string, ttl time.Duration, kind node.TombKind) ([]bool, error) {
	c := g.conn()
	if err := g.publish(ctx, c, keys...); err != nil {
		return nil, err
	}
	found, err := c.Bury(ctx, keys, g.cap(ttl), kind)
	g.home.Wrote(ctx, keys...)
	return found, err
}

// Incr fails as on a node down: a counter in the gutter would restart from
// delta.
func (g *Node) Incr(context.Context, string, int64) (int64, error) {
	return 0, g.home.Fail(node.OpIncr)
}

// Touch touches key on the target, the TTL capped.
func (g *Node) Touch(ctx context.Context, key string, ttl time.Duration) error {
	return g.conn().Touch(ctx, key, g.cap(ttl))
}

// Ping is home's stand-in's: the gutter answering says nothing of home.
func (g *Node) Ping(context.Context) error { return node.ErrNodeDown }

// Refuse returns node.ErrNodeDown: a command beyond the node interface
// would reach the gutter, which holds only home's copies.
func (g *Node) Refuse() error { return node.ErrNodeDown }

// Close closes nothing: the target is the pool's.
func (g *Node) Close() error { return nil }

// GetItem reads key's item from the target.
func (g *Node) GetItem(ctx context.Context, key string) (node.Item, error) {
	return node.ItemsOf(g.conn()).GetItem(ctx, key)
}

// Store runs op on the target, the TTL capped, and tells home.
func (g *Node) Store(ctx context.Context, op node.StoreOp, it node.Item) error {
	c := g.conn()
	if err := g.publish(ctx, c, it.Key); err != nil {
		return err
	}
	it.TTL, it.TTLKnown = g.cap(it.TTL), false
	err := node.ItemsOf(c).Store(ctx, op, it)
	g.home.Wrote(ctx, it.Key)
	return err
}

// GetAndTouch reads and touches key on the target, the TTL capped.
func (g *Node) GetAndTouch(ctx context.Context, key string, ttl time.Duration) (node.Item, error) {
	return node.ItemsOf(g.conn()).GetAndTouch(ctx, key, g.cap(ttl))
}

// IncrDecr fails as Incr does.
func (g *Node) IncrDecr(context.Context, string, uint64, bool) (uint64, error) {
	return 0, g.home.Fail(node.OpIncr)
}

// DeleteFound deletes key on the target and tells home.
func (g *Node) DeleteFound(ctx context.Context, key string) (bool, error) {
	c := g.conn()
	if err := g.publish(ctx, c, key); err != nil {
		return false, err
	}
	found, err := node.ItemsOf(c).DeleteFound(ctx, key)
	g.home.Wrote(ctx, key)
	return found, err
}

// Flush fails as on a node down: it is home's keys it would delete.
func (g *Node) Flush(context.Context) error { return g.home.Fail(node.OpDeleteMulti) }

// StoreLeased stores the items on the target, their TTLs capped, and
// tells home.
func (g *Node) StoreLeased(ctx context.Context, items []node.Item, lkeys []string, token string) ([]bool, error) {
	c := g.conn()
	if err := g.publish(ctx, c, node.ItemKeys(items)...); err != nil {
		return nil, err
	}
	stored, err := node.LeaserOf(c).StoreLeased(ctx, g.capItems(items), lkeys, token)
	g.home.Wrote(ctx, node.ItemKeys(items)...)
	return stored, err
}

// ReleaseLeases releases the leases on the target.
func (g *Node) ReleaseLeases(ctx context.Context, lkeys []string, token string) error {
	return node.LeaserOf(g.conn()).ReleaseLeases(ctx, lkeys, token)
}
