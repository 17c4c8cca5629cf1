package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// redisNode is a node served by Redis through go-redis, whose client holds
// the node's connection pool. A hook on rdb reports every command's outcome
// to h (probe.go).
type redisNode struct {
	rdb *redis.Client
	h   *nodeHealth
	ap  *autoPipe // Options.AutoPipeline (autopipeline.go); nil without it
	// near is the node's near cache (nearcache.go), nil without it: Gets then
	// go through rdb, whose go-redis cache the auto-pipeliner would bypass.
	near *nearCache
	// raw, when rdb is the package's own (no NewRedisClient), is the
	// node's raw connections, for the MGETs of multi-gets (redis_raw.go).
	raw *rawConns
}

// redisTTL converts a TTL for go-redis: 0 stays "no expiry", and a TTL under
// a millisecond becomes one, the smallest Redis accepts.
func redisTTL(ttl time.Duration) time.Duration {
	if ttl > 0 && ttl < time.Millisecond {
		return time.Millisecond
	}
	return ttl
}

// redisErr maps go-redis errors: redis.Nil is a miss, a network timeout
// caused by the context's deadline says so (go-redis returns the bare
// timeout when it does not retry), and a refused login or command is
// ErrAuth or ErrNoPerm.
func redisErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case err == redis.Nil:
		return ErrCacheMiss
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if err, ok := pastDeadline(ctx, err); ok {
		return err
	}
	return authErr(err)
}

// pastDeadline wraps context.DeadlineExceeded around err, a network
// timeout, once ctx's deadline has passed: the connection's deadline is
// the context's, and may fire a moment before the context's own timer does.
func pastDeadline(ctx context.Context, err error) (error, bool) {
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) && errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err), true
	}
	return err, false
}

func (n redisNode) get(ctx context.Context, key string) ([]byte, error) {
	if n.ap != nil && n.near == nil {
		return n.ap.get(ctx, n.h, key)
	}
	v, err := n.rdb.Get(ctx, key).Bytes()
	return v, redisErr(ctx, err)
}

func (n redisNode) getMulti(ctx context.Context, keys []string, withTTL bool) ([]item, error) {
	items := make([]item, len(keys))
	if !withTTL {
		vals, err := n.mget(ctx, keys)
		if err != nil {
			return nil, err
		}
		for i, v := range vals {
			items[i] = mgetItem(keys[i], v)
		}
		return items, nil
	}
	// GET and PTTL of every key in one round trip.
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			gets[i], ttls[i] = p.Get(ctx, k), p.PTTL(ctx, k)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, redisErr(ctx, err)
	}
	for i, k := range keys {
		items[i].key = k
		v, err := gets[i].Bytes()
		ttl, ok := fromPTTL(ttls[i].Val())
		if err != nil || !ok {
			continue
		}
		items[i].value, items[i].found, items[i].ttl, items[i].ttlKnown = v, true, ttl, true
	}
	return items, nil
}

// mget is one MGET of keys: go-redis's answer as it is, one value per key,
// a string for a hit (see mgetItem). The first round of a multi-get keeps
// it so, and reads each hit where it is (batch.answer), rather than copying
// every key's answer into an item first.
func (n redisNode) mget(ctx context.Context, keys []string) ([]any, error) {
	if n.ap != nil { // the node is busy while this runs (see mgetQueued)
		n.ap.calls.Add(1)
	}
	var cmd *redis.SliceCmd
	if n.near == nil {
		cmd = n.rdb.MGet(ctx, keys...)
	} else {
		cmd = n.nearMGet(ctx, keys) // outside the near cache (nearcache.go)
	}
	if n.ap != nil {
		n.ap.calls.Add(-1)
	}
	if err := cmd.Err(); err != nil {
		return nil, redisErr(ctx, err)
	}
	return mgetVals(cmd)
}

// mgetVals is the answer of a successful MGET, one value per key.
func mgetVals(cmd *redis.SliceCmd) ([]any, error) {
	vals := cmd.Val()
	if len(vals) != len(cmd.Args())-1 {
		return nil, fmt.Errorf("shardcache: MGET of %d keys answered %d values", len(cmd.Args())-1, len(vals))
	}
	return vals, nil
}

// mgetQueued is autoPipe.mgetQueued on the node's auto-pipeliner; nil
// without one.
func (n redisNode) mgetQueued(ctx context.Context, keys []string) *queuedMget {
	if n.ap == nil {
		return nil
	}
	return n.ap.mgetQueued(ctx, n.h, keys)
}

// mgetItem is the item of key from its value v in an MGET answer.
func mgetItem(key string, v any) item {
	it := item{key: key}
	if s, ok := v.(string); ok {
		it.value, it.found = stringBytes(s), true
	}
	return it
}

// fromPTTL converts a PTTL reply to a TTL to copy (0: no expiry); ok is false
// when the key is missing, or expired since the read of its value.
func fromPTTL(pttl time.Duration) (ttl time.Duration, ok bool) {
	switch {
	case pttl == -2:
		return 0, false
	case pttl == -1:
		return 0, true
	case pttl <= 0:
		return time.Millisecond, true
	}
	return pttl, true
}

// stringBytes returns the bytes of a reply string without copying them, as
// go-redis's own StringCmd.Bytes does: each reply string is freshly
// allocated and referenced nowhere else, so nothing can see it change.
func stringBytes(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

func (n redisNode) set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if n.ap != nil {
		return n.ap.set(ctx, n.h, key, value, ttl)
	}
	return redisErr(ctx, n.rdb.Set(ctx, key, value, redisTTL(ttl)).Err())
}

func (n redisNode) setMulti(ctx context.Context, items []item) error {
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, it := range items {
			p.Set(ctx, it.key, it.value, redisTTL(it.ttl))
		}
		return nil
	})
	return redisErr(ctx, err)
}

func (n redisNode) add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if n.ap != nil {
		return n.ap.add(ctx, n.h, key, value, ttl)
	}
	ok, err := n.rdb.SetNX(ctx, key, value, redisTTL(ttl)).Result()
	if err == nil && !ok {
		return ErrNotStored
	}
	return redisErr(ctx, err)
}

func (n redisNode) addMulti(ctx context.Context, items []item) ([]bool, error) {
	cmds := make([]*redis.BoolCmd, len(items))
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			cmds[i] = p.SetNX(ctx, it.key, it.value, redisTTL(it.ttl))
		}
		return nil
	})
	if err != nil {
		return nil, redisErr(ctx, err)
	}
	stored := make([]bool, len(items))
	for i, c := range cmds {
		stored[i] = c.Val()
	}
	return stored, nil
}

func (n redisNode) delete(ctx context.Context, key string) error {
	if n.ap != nil {
		return n.ap.delete(ctx, n.h, key)
	}
	return redisErr(ctx, n.rdb.Del(ctx, key).Err())
}

func (n redisNode) deleteMulti(ctx context.Context, keys []string) error {
	return redisErr(ctx, n.rdb.Del(ctx, keys...).Err())
}

// incr is INCRBY: a missing key is created with the value delta and no
// expiry.
func (n redisNode) incr(ctx context.Context, key string, delta int64) (int64, error) {
	if n.ap != nil {
		return n.ap.incr(ctx, n.h, key, delta)
	}
	v, err := n.rdb.IncrBy(ctx, key, delta).Result()
	return v, redisErr(ctx, err)
}

func (n redisNode) touch(ctx context.Context, key string, ttl time.Duration) error {
	if ttl > 0 && n.ap != nil {
		return n.ap.expire(ctx, n.h, key, ttl)
	}
	if ttl > 0 {
		ok, err := n.rdb.PExpire(ctx, key, redisTTL(ttl)).Result()
		if err == nil && !ok {
			return ErrCacheMiss
		}
		return redisErr(ctx, err)
	}
	// PERSIST answers 0 both for a missing key and for one without expiry.
	var exists *redis.IntCmd
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Persist(ctx, key)
		exists = p.Exists(ctx, key)
		return nil
	})
	if err == nil && exists.Val() == 0 {
		return ErrCacheMiss
	}
	return redisErr(ctx, err)
}

// Close closes the client first, which ends a probe in flight on a node that
// does not answer, then waits for the probe.
func (n redisNode) Close() error {
	var apErr error
	if n.ap != nil {
		apErr = n.ap.Close()
	}
	err := n.rdb.Close()
	n.raw.Close()
	n.h.close()
	if err != nil && !errors.Is(err, redis.ErrClosed) {
		return err
	}
	return apErr
}
