package client

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis's item operations, where Redis has an equivalent: no flags, no CAS
// ids, no append-only-if-present, no unsigned counters.

func unsupported(what string) error {
	return fmt.Errorf("%w: %s on Redis", ErrUnsupported, what)
}

func (n redisNode) getItem(ctx context.Context, key string) (item, error) {
	v, err := n.get(ctx, key)
	if err != nil {
		return item{}, err
	}
	return item{key: key, value: v, found: true}, nil
}

func (n redisNode) store(ctx context.Context, op StoreOp, in item) error {
	if in.flags != 0 {
		return unsupported("item flags")
	}
	switch op {
	case StoreSet:
		return n.set(ctx, in.key, in.value, in.ttl)
	case StoreAdd:
		return n.add(ctx, in.key, in.value, in.ttl)
	case StoreReplace:
		err := n.rdb.SetArgs(ctx, in.key, in.value, redis.SetArgs{Mode: "XX", TTL: redisTTL(in.ttl)}).Err()
		if err == redis.Nil {
			return ErrNotStored
		}
		return redisErr(ctx, err)
	}
	return unsupported(op.String())
}

func (n redisNode) getAndTouch(ctx context.Context, key string, ttl time.Duration) (item, error) {
	v, err := n.rdb.GetEx(ctx, key, redisTTL(ttl)).Bytes()
	if err != nil {
		return item{}, redisErr(ctx, err)
	}
	if ttl == 0 { // GETEX without an expiry keeps the old one: drop it
		if err := n.rdb.Persist(ctx, key).Err(); err != nil {
			return item{}, redisErr(ctx, err)
		}
	}
	return item{key: key, value: v, found: true}, nil
}

func (n redisNode) incrDecr(context.Context, string, uint64, bool) (uint64, error) {
	return 0, unsupported("unsigned incr/decr")
}

func (n redisNode) deleteFound(ctx context.Context, key string) (bool, error) {
	deleted, err := n.rdb.Del(ctx, key).Result()
	return deleted > 0, redisErr(ctx, err)
}

func (n redisNode) flush(ctx context.Context) error {
	return redisErr(ctx, n.rdb.FlushDB(ctx).Err())
}

func (n redisNode) ping(ctx context.Context) error {
	return redisErr(ctx, n.rdb.Ping(ctx).Err())
}
