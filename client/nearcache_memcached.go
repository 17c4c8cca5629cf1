package client

import (
	"bytes"
	"context"
	"time"

	"github.com/shardcache/shardcache/internal/near"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/mcnode"
)

// nearMemcached is a Memcached node behind a near cache: its Gets fill the
// store, and every write through it drops the key's copy once the write has
// run (whatever its outcome: a timed-out write may have been applied), so
// that a Get in flight keeps nothing it read before. Memcached tells no
// client of another's writes: MaxAge alone bounds a copy's life. A miss is
// not kept: a key another process is about to fill (GetOrLoad's pattern)
// would read as absent for MaxAge, and be loaded again here.
//
// It embeds the node, so that every capability of the node's is the
// wrapper's: those that write are overridden below.
type nearMemcached struct {
	*mcnode.Node
	near *near.Cache
}

// withNear returns n behind store; n itself without one.
func withNear(n *mcnode.Node, store *near.Cache) node.Node {
	if store == nil {
		return n
	}
	return &nearMemcached{Node: n, near: store}
}

// Get reads key from the node, and keeps a copy of its value: the node's
// is the caller's to change.
func (n *nearMemcached) Get(ctx context.Context, key string) ([]byte, error) {
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
func (n *nearMemcached) dropItems(items []node.Item) {
	for _, it := range items {
		n.near.Delete(it.Key)
	}
}

// dropKeys drops the copies of keys.
func (n *nearMemcached) dropKeys(keys []string) {
	for _, k := range keys {
		n.near.Delete(k)
	}
}

func (n *nearMemcached) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	defer n.near.Delete(key)
	return n.Node.Set(ctx, key, value, ttl)
}

func (n *nearMemcached) SetMulti(ctx context.Context, items []node.Item) error {
	defer n.dropItems(items)
	return n.Node.SetMulti(ctx, items)
}

func (n *nearMemcached) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	defer n.near.Delete(key)
	return n.Node.Add(ctx, key, value, ttl)
}

func (n *nearMemcached) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	defer n.dropItems(items)
	return n.Node.AddMulti(ctx, items)
}

func (n *nearMemcached) Delete(ctx context.Context, key string) error {
	defer n.near.Delete(key)
	return n.Node.Delete(ctx, key)
}

func (n *nearMemcached) DeleteMulti(ctx context.Context, keys []string) error {
	defer n.dropKeys(keys)
	return n.Node.DeleteMulti(ctx, keys)
}

func (n *nearMemcached) Incr(ctx context.Context, key string, delta int64) (int64, error) {
	defer n.near.Delete(key)
	return n.Node.Incr(ctx, key, delta)
}

func (n *nearMemcached) Touch(ctx context.Context, key string, ttl time.Duration) error {
	defer n.near.Delete(key)
	return n.Node.Touch(ctx, key, ttl)
}

// The item operations (node.Items) that write.

func (n *nearMemcached) Store(ctx context.Context, op node.StoreOp, it node.Item) error {
	defer n.near.Delete(it.Key)
	return n.Node.Store(ctx, op, it)
}

func (n *nearMemcached) GetAndTouch(ctx context.Context, key string, ttl time.Duration) (node.Item, error) {
	defer n.near.Delete(key)
	return n.Node.GetAndTouch(ctx, key, ttl)
}

func (n *nearMemcached) IncrDecr(ctx context.Context, key string, delta uint64, decr bool) (uint64, error) {
	defer n.near.Delete(key)
	return n.Node.IncrDecr(ctx, key, delta, decr)
}

func (n *nearMemcached) DeleteFound(ctx context.Context, key string) (bool, error) {
	defer n.near.Delete(key)
	return n.Node.DeleteFound(ctx, key)
}

func (n *nearMemcached) Flush(ctx context.Context) error {
	defer n.near.Flush()
	return n.Node.Flush(ctx)
}

// The sweep's and the leases' writes (node.Sweeper, node.Leaser).

func (n *nearMemcached) Restore(ctx context.Context, items []node.Item) ([]bool, error) {
	defer n.dropItems(items)
	return n.Node.Restore(ctx, items)
}

func (n *nearMemcached) StoreLeased(ctx context.Context, items []node.Item, lkeys []string, token string) ([]bool, error) {
	defer n.dropKeys(lkeys)
	defer n.dropItems(items)
	return n.Node.StoreLeased(ctx, items, lkeys, token)
}

func (n *nearMemcached) ReleaseLeases(ctx context.Context, lkeys []string, token string) error {
	defer n.dropKeys(lkeys)
	return n.Node.ReleaseLeases(ctx, lkeys, token)
}

var (
	_ node.Items      = (*nearMemcached)(nil)
	_ node.Sweeper    = (*nearMemcached)(nil)
	_ node.Leaser     = (*nearMemcached)(nil)
	_ node.IdleCloser = (*nearMemcached)(nil)
	_ node.Sender     = (*nearMemcached)(nil)
)
