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
// store, and every write through it drops the key's copy once the write has
// run (whatever its outcome: a timed-out write may have been applied), so
// that a Get in flight keeps nothing it read before. Memcached tells no
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

// dropItems drops the copies of the items' keys.
func (n *Near) dropItems(items []node.Item) {
	for _, it := range items {
		n.near.Delete(it.Key)
	}
}

// dropKeys drops the copies of keys.
func (n *Near) dropKeys(keys []string) {
	for _, k := range keys {
		n.near.Delete(k)
	}
}

// Set stores key on the node, then drops its copy.
func (n *Near) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	defer n.near.Delete(key)
	return n.Node.Set(ctx, key, value, ttl)
}

// SetMulti stores the items on the node, then drops their copies.
func (n *Near) SetMulti(ctx context.Context, items []node.Item) error {
	defer n.dropItems(items)
	return n.Node.SetMulti(ctx, items)
}

// Add adds key on the node, then drops its copy.
func (n *Near) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	defer n.near.Delete(key)
	return n.Node.Add(ctx, key, value, ttl)
}

// AddMulti adds the items on the node, then drops their copies.
func (n *Near) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	defer n.dropItems(items)
	return n.Node.AddMulti(ctx, items)
}

// Delete deletes key on the node, then drops its copy.
func (n *Near) Delete(ctx context.Context, key string) error {
	defer n.near.Delete(key)
	return n.Node.Delete(ctx, key)
}

// DeleteMulti deletes keys on the node, then drops their copies.
func (n *Near) DeleteMulti(ctx context.Context, keys []string) error {
	defer n.dropKeys(keys)
	return n.Node.DeleteMulti(ctx, keys)
}

// Incr runs on the node, then drops key's copy.
func (n *Near) Incr(ctx context.Context, key string, delta int64) (int64, error) {
	defer n.near.Delete(key)
	return n.Node.Incr(ctx, key, delta)
}

// Touch runs on the node, then drops key's copy: it may have expired it.
func (n *Near) Touch(ctx context.Context, key string, ttl time.Duration) error {
	defer n.near.Delete(key)
	return n.Node.Touch(ctx, key, ttl)
}

// The item operations (node.Items) that write.

// Store runs op on the node, then drops the key's copy.
func (n *Near) Store(ctx context.Context, op node.StoreOp, it node.Item) error {
	defer n.near.Delete(it.Key)
	return n.Node.Store(ctx, op, it)
}

// GetAndTouch runs on the node, then drops key's copy.
func (n *Near) GetAndTouch(ctx context.Context, key string, ttl time.Duration) (node.Item, error) {
	defer n.near.Delete(key)
	return n.Node.GetAndTouch(ctx, key, ttl)
}

// IncrDecr runs on the node, then drops key's copy.
func (n *Near) IncrDecr(ctx context.Context, key string, delta uint64, decr bool) (uint64, error) {
	defer n.near.Delete(key)
	return n.Node.IncrDecr(ctx, key, delta, decr)
}

// DeleteFound deletes key on the node, then drops its copy.
func (n *Near) DeleteFound(ctx context.Context, key string) (bool, error) {
	defer n.near.Delete(key)
	return n.Node.DeleteFound(ctx, key)
}

// Flush flushes the node, then drops every copy.
func (n *Near) Flush(ctx context.Context) error {
	defer n.near.Flush()
	return n.Node.Flush(ctx)
}

// The sweep's and the leases' writes (node.Sweeper, node.Leaser).

// Restore copies the dumped items to the node, then drops their copies.
func (n *Near) Restore(ctx context.Context, items []node.Item) ([]bool, error) {
	defer n.dropItems(items)
	return n.Node.Restore(ctx, items)
}

// StoreLeased stores the leased items on the node, then drops the copies
// of their keys and lease keys.
func (n *Near) StoreLeased(ctx context.Context, items []node.Item, lkeys []string, token string) ([]bool, error) {
	defer n.dropKeys(lkeys)
	defer n.dropItems(items)
	return n.Node.StoreLeased(ctx, items, lkeys, token)
}

// ReleaseLeases releases the leases on the node, then drops the lease
// keys' copies.
func (n *Near) ReleaseLeases(ctx context.Context, lkeys []string, token string) error {
	defer n.dropKeys(lkeys)
	return n.Node.ReleaseLeases(ctx, lkeys, token)
}

var (
	_ node.Items      = (*Near)(nil)
	_ node.Sweeper    = (*Near)(nil)
	_ node.Leaser     = (*Near)(nil)
	_ node.IdleCloser = (*Near)(nil)
	_ node.Sender     = (*Near)(nil)
)
