package redisnode

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// The item operations, where Redis has an equivalent: no flags, no CAS
// ids, no append-only-if-present, no unsigned counters.

// GetItem reads key with Get: the item has its value and no flags or CAS
// id. A miss is node.ErrCacheMiss.
func (n *Node) GetItem(ctx context.Context, key string) (node.Item, error) {
	v, err := n.Get(ctx, key)
	if err != nil {
		return node.Item{}, err
	}
	return node.Item{Key: key, Value: v, Found: true}, nil
}

// Store writes it as op says: StoreSet with Set, StoreAdd with Add,
// StoreReplace with SET XX (node.ErrNotStored where key is absent). Other
// ops, and items with flags, are node.ErrUnsupported.
func (n *Node) Store(ctx context.Context, op node.StoreOp, it node.Item) error {
	if it.Flags != 0 {
		return unsupported("item flags")
	}
	switch op {
	case node.StoreSet:
		return n.Set(ctx, it.Key, it.Value, it.TTL)
	case node.StoreAdd:
		return n.Add(ctx, it.Key, it.Value, it.TTL)
	case node.StoreReplace:
		err := n.rdb.SetArgs(live(ctx), it.Key, it.Value, redis.SetArgs{Mode: "XX", TTL: ttl(it.TTL)}).Err()
		if err == redis.Nil {
			return node.ErrNotStored
		}
		return mapErr(ctx, err)
	}
	return unsupported(op.String())
}

// GetAndTouch reads key and sets its expiry to d with GETEX; for d of 0
// it then removes the expiry with PERSIST. A miss is node.ErrCacheMiss.
func (n *Node) GetAndTouch(ctx context.Context, key string, d time.Duration) (node.Item, error) {
	v, err := n.rdb.GetEx(live(ctx), key, ttl(d)).Bytes()
	if err != nil {
		return node.Item{}, mapErr(ctx, err)
	}
	if d == 0 { // GETEX without an expiry keeps the old one: drop it
		if err := n.rdb.Persist(live(ctx), key).Err(); err != nil {
			return node.Item{}, mapErr(ctx, err)
		}
	}
	return node.Item{Key: key, Value: v, Found: true}, nil
}

// IncrDecr is node.ErrUnsupported: Redis has no unsigned counters.
func (n *Node) IncrDecr(context.Context, string, uint64, bool) (uint64, error) {
	return 0, unsupported("unsigned incr/decr")
}

// DeleteFound deletes key with DEL and reports whether it was present.
func (n *Node) DeleteFound(ctx context.Context, key string) (bool, error) {
	deleted, err := n.rdb.Del(live(ctx), key).Result()
	return deleted > 0, mapErr(ctx, err)
}

// Flush empties the node's database with FLUSHDB.
func (n *Node) Flush(ctx context.Context) error {
	return mapErr(ctx, n.rdb.FlushDB(live(ctx)).Err())
}
