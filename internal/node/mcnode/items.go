package mcnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/wire/memcache"
)

// The item operations, Memcached's own vocabulary: one command each.

// GetItem reads key with its flags and CAS id ("gets"), or returns
// node.ErrCacheMiss; observed as a Get.
func (n *Node) GetItem(ctx context.Context, key string) (node.Item, error) {
	if err := ctx.Err(); err != nil {
		return node.Item{}, err
	}
	start := n.obs.Begin()
	it, err := n.mc.Get(ctx, key)
	if err == nil && isHidden(it.Value, it.Flags) {
		err = memcache.ErrCacheMiss
	}
	err = nodeErr(err)
	n.obs.Done(ctx, node.OpGet, start, err)
	if err != nil {
		return node.Item{}, err
	}
	return item(it), nil
}

func item(it memcache.Item) node.Item {
	return node.Item{Key: it.Key, Value: it.Value, Found: true, Flags: it.Flags, CAS: it.CAS}
}

// storeOps maps the node's store operations to the protocol's.
var storeOps = [...]memcache.StoreOp{
	node.StoreSet: memcache.Set, node.StoreAdd: memcache.Add, node.StoreReplace: memcache.Replace,
	node.StoreAppend: memcache.Append, node.StorePrepend: memcache.Prepend, node.StoreCAS: memcache.CAS,
}

// Store runs op with it's key, value, flags, TTL and (StoreCAS) CAS id:
// observed as a Set or an Add for those two, OpOther for the others.
func (n *Node) Store(ctx context.Context, op node.StoreOp, it node.Item) error {
	if op < 0 || int(op) >= len(storeOps) {
		return fmt.Errorf("shardcache: unknown store operation %v", op)
	}
	o := node.OpOther
	switch op {
	case node.StoreSet:
		o = node.OpSet
	case node.StoreAdd:
		o = node.OpAdd
	}
	return n.store(ctx, o, storeOps[op], memcache.Item{Key: it.Key, Value: it.Value, Flags: it.Flags,
		Exptime: memcache.Expiration(it.TTL), CAS: it.CAS})
}

// GetAndTouch reads key and sets its TTL in one command ("gats");
// observed as a Get.
func (n *Node) GetAndTouch(ctx context.Context, key string, ttl time.Duration) (node.Item, error) {
	if err := ctx.Err(); err != nil {
		return node.Item{}, err
	}
	start := n.obs.Begin()
	it, err := n.mc.GetAndTouch(ctx, key, memcache.Expiration(ttl))
	if err == nil && isHidden(it.Value, it.Flags) {
		if isTomb(it.Value, it.Flags) {
			n.keepTomb(ctx, key)
		}
		err = memcache.ErrCacheMiss
	}
	err = nodeErr(err)
	n.obs.Done(ctx, node.OpGet, start, err)
	if err != nil {
		return node.Item{}, err
	}
	return item(it), nil
}

// IncrDecr adds (or with decr subtracts, stopping at 0) delta to an
// existing counter: node.ErrCacheMiss if the key is absent.
func (n *Node) IncrDecr(ctx context.Context, key string, delta uint64, decr bool) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	start := n.obs.Begin()
	v, _, err := n.incrChecked(ctx, key, delta, decr)
	err = nodeErr(err)
	n.obs.Done(ctx, node.OpIncr, start, err)
	return v, err
}

// DeleteFound deletes key and reports whether it was present.
func (n *Node) DeleteFound(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	start := n.obs.Begin()
	found, err := n.deleteFound(ctx, key)
	err = nodeErr(err)
	n.obs.Done(ctx, node.OpDelete, start, err)
	return found, err
}

// deleteFound is delete, which counts a tombstone as found; while
// tombstones may exist, mg and md in one round trip where the server has
// the meta commands, so that one is not.
func (n *Node) deleteFound(ctx context.Context, key string) (bool, error) {
	if !n.tombsLikely() {
		return n.mc.Delete(ctx, key)
	}
	reqs := []memcache.Meta{{Cmd: memcache.MetaGet, Key: key, Flags: memcache.FlagsOf("sf")}, {Cmd: memcache.MetaDelete, Key: key}}
	var out [2]memcache.MetaResult
	switch err := n.mc.Meta(ctx, reqs, out[:]); {
	case errors.Is(err, memcache.ErrNoMeta):
		return n.mc.Delete(ctx, key)
	case err != nil:
		return false, err
	case out[1].Err != nil:
		return false, out[1].Err
	}
	g := &out[0]
	return g.Status == memcache.HD && !(g.Size == 0 && hiddenFlags(g.ClientFlags)), nil
}

// Flush deletes every key (flush_all); observed as OpOther.
func (n *Node) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := n.obs.Begin()
	err := nodeErr(n.mc.FlushAll(ctx))
	n.obs.Done(ctx, node.OpOther, start, err)
	return err
}
