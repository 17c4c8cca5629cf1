package mcnode

import (
	"bytes"
	"context"
	"time"

	"github.com/shardcache/shardcache/internal/near"
	"github.com/shardcache/shardcache/internal/node"
)

// Near is a Memcached node behind a near cache (the client's
// Options.NearCache; the store is package near's): its Gets fill the
// store, and every write through it drops the key's copy before it is sent
// and once it has run (whatever its outcome: a timed-out write may have
// been applied), so that no Get answers an older value than one a read
// has seen, and a Get in flight keeps nothing it read before. Memcached tells no
// client of another's writes: MaxAge alone bounds a copy's life. A miss is
// not kept: a key another process is about to fill (GetOrLoad's pattern)
// would read as absent for MaxAge, and be loaded again here.
//
// It embeds the node, so that every capability of the node's is the
// wrapper's: those that write are overridden below.
type Near struct {
	*Node
	near *near.Cache
}

// WithNear returns n behind store; n itself without one.
func WithNear(n *Node, store *near.Cache) node.Node {
	if store == nil {
		return n
	}
	return &Near{Node: n, near: store}
}

// Get reads key from the node, and keeps a copy of its value: the node's
// is the caller's to change.
func (n *Near) Get(ctx context.Context, key string) ([]byte, error) {
	tok := n.near.Reserve(key)
	v, err := n.Node.Get(ctx, key)
	if err != nil {
		n.near.Cancel(key, tok)
		return v, err
	}
	n.near.Fulfill(key, tok, bytes.Clone(v), true, 0)
	return v, nil
}

// A write drops the copies of its keys twice: before it is sent, so that
// no read of this process answers the old value from memory once the
// server may hold the new one (a read that began after another read
// returned the new value would go back to the old); and once it has run,
// whatever its outcome, so that a read in flight keeps nothing it read
// before. Each write below defers what drop, dropItems or dropKeys
// returns.

// drop drops key's copy and returns the drop to defer.
func (n *Near) drop(key string) func() {
	n.near.Delete(key)
	return func() { n.near.Delete(key) }
}

// dropItems drops the copies of the items' keys, and returns the drop to
// defer.
func (n *Near) dropItems(items []node.Item) func() {
	each := func() {
		for _, it := range items {
			n.near.Delete(it.Key)
		}
	}
	each()
	return each
}

// dropKeys drops the copies of keys, and returns the drop to defer.
func (n *Near) dropKeys(keys []string) func() {
	each := func() {
		for _, k := range keys {
			n.near.Delete(k)
		}
	}
	each()
	return each
}

// Set stores key on the node, then drops its copy.
func (n *Near) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	defer n.drop(key)()
	return n.Node.Set(ctx, key, value, ttl)
}

// SetMulti stores the items on the node, then drops their copies.
func (n *Near) SetMulti(ctx context.Context, items []node.Item) error {
	defer n.dropItems(items)()
	return n.Node.SetMulti(ctx, items)
}

// Add adds key on the node, then drops its copy.
func (n *Near) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	defer n.drop(key)()
	return n.Node.Add(ctx, key, value, ttl)
}

// AddMulti adds the items on the node, then drops their copies.
func (n *Near) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	defer n.dropItems(items)()
	return n.Node.AddMulti(ctx, items)
}

// Delete deletes key on the node, then drops its copy.
func (n *Near) Delete(ctx context.Context, key string) error {
	defer n.drop(key)()
	return n.Node.Delete(ctx, key)
}

// DeleteMulti deletes keys on the node, then drops their copies.
func (n *Near) DeleteMulti(ctx context.Context, keys []string) error {
	defer n.dropKeys(keys)()
	return n.Node.DeleteMulti(ctx, keys)
}

// Incr runs on the node, then drops key's copy.
func (n *Near) Incr(ctx context.Context, key string, delta int64) (int64, error) {
	defer n.drop(key)()
	return n.Node.Incr(ctx, key, delta)
}

// Touch runs on the node, then drops key's copy: it may have expired it.
func (n *Near) Touch(ctx context.Context, key string, ttl time.Duration) error {
	defer n.drop(key)()
	return n.Node.Touch(ctx, key, ttl)
}

// The item operations (node.Items) that write.

// Store runs op on the node, then drops the key's copy.
func (n *Near) Store(ctx context.Context, op node.StoreOp, it node.Item) error {
	defer n.drop(it.Key)()
	return n.Node.Store(ctx, op, it)
}

// GetAndTouch runs on the node, then drops key's copy.
func (n *Near) GetAndTouch(ctx context.Context, key string, ttl time.Duration) (node.Item, error) {
	defer n.drop(key)()
	return n.Node.GetAndTouch(ctx, key, ttl)
}

// IncrDecr runs on the node, then drops key's copy.
func (n *Near) IncrDecr(ctx context.Context, key string, delta uint64, decr bool) (uint64, error) {
	defer n.drop(key)()
	return n.Node.IncrDecr(ctx, key, delta, decr)
}

// DeleteFound deletes key on the node, then drops its copy.
func (n *Near) DeleteFound(ctx context.Context, key string) (bool, error) {
	defer n.drop(key)()
	return n.Node.DeleteFound(ctx, key)
}

// Flush flushes the node, then drops every copy.
func (n *Near) Flush(ctx context.Context) error {
	n.near.Flush()
	defer n.near.Flush()
	return n.Node.Flush(ctx)
}

// The sweep's, the tombstones' (node.Node's Bury) and the leases' writes
// (node.Sweeper, node.Leaser, node.LeaseReader).

// Restore copies the dumped items to the node, then drops their copies.
func (n *Near) Restore(ctx context.Context, items []node.Item) ([]bool, error) {
	defer n.dropItems(items)()
	return n.Node.Restore(ctx, items)
}

// StoreLeased stores the leased items on the node, then drops the copies
// of their keys and lease keys.
func (n *Near) StoreLeased(ctx context.Context, items []node.Item, lkeys []string, token string) ([]bool, error) {
	defer n.dropKeys(lkeys)()
	defer n.dropItems(items)()
	return n.Node.StoreLeased(ctx, items, lkeys, token)
}

// ReleaseLeases releases the leases on the node, then drops the lease
// keys' copies.
func (n *Near) ReleaseLeases(ctx context.Context, lkeys []string, token string) error {
	defer n.dropKeys(lkeys)()
	return n.Node.ReleaseLeases(ctx, lkeys, token)
}

// Bury buries keys on the node, then drops their copies: a tombstone is
// a migration's Delete, and a copy kept past it would be read back.
func (n *Near) Bury(ctx context.Context, keys []string, ttl time.Duration, kind node.TombKind) ([]bool, error) {
	if !bugNearBuryKeeps { // a seeded bug (seeded.go)
		defer n.dropKeys(keys)()
	}
	return n.Node.Bury(ctx, keys, ttl, kind)
}

// LeaseStore stores the leased items on the node (a load's, or
// stale-while-revalidate's refresh), then drops their copies.
func (n *Near) LeaseStore(ctx context.Context, items []node.Item, leases []node.LeaseAnswer, rd node.LeaseRead) ([]bool, error) {
	defer n.dropItems(items)()
	return n.Node.LeaseStore(ctx, items, leases, rd)
}

// LeaseRelease deletes the leases' placeholders on the node, then drops
// the keys' copies.
func (n *Near) LeaseRelease(ctx context.Context, keys []string, leases []node.LeaseAnswer, rd node.LeaseRead) error {
	defer n.dropKeys(keys)()
	return n.Node.LeaseRelease(ctx, keys, leases, rd)
}

var (
	_ node.Items       = (*Near)(nil)
	_ node.Sweeper     = (*Near)(nil)
	_ node.Leaser      = (*Near)(nil)
	_ node.LeaseReader = (*Near)(nil)
	_ node.IdleCloser  = (*Near)(nil)
	_ node.Sender      = (*Near)(nil)
)
