package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Auto-pipelining (Options.AutoPipeline): a Redis node's single-key
// commands go through go-redis's auto-pipeliner (EXPERIMENTAL in go-redis
// v9.23), which batches the commands of concurrent callers into one
// pipeline per round trip. It rides a second go-redis client of the node,
// without the health hook: that hook would see each batch as one pipelined
// call, so the node's health and statistics are told of each command here
// instead, as the hook does for the node's own client.

// autoPipe is a node's auto-pipeliner and the go-redis client it rides.
type autoPipe struct {
	rdb *redis.Client
	ap  *redis.AutoPipeliner
	// calls is the number of this node's calls under way here. A call that
	// finds none goes straight to rdb, as without AutoPipeline: the
	// auto-pipeliner's hand-offs between goroutines would cost a lone
	// caller about twice the latency, with nobody to share the trip with.
	calls atomic.Int64
}

// withAutoPipeline gives nd an auto-pipeliner on a client made by newClient,
// with the password redacted from its errors as on nd's own client.
func withAutoPipeline(nd redisNode, newClient func() *redis.Client, password string) (node, error) {
	rdb := newClient()
	if password != "" {
		rdb.AddHook(redactHook{password})
	}
	if nd.near != nil { // its writes drop near copies, as the node's own client's do
		rdb.AddHook(evictHook{nd.near})
	}
	// The deferred face: its Submit hands back a future that a caller can
	// stop waiting for when its context ends; the blocking face cannot.
	ap, err := rdb.AsyncAutoPipeline()
	if err != nil {
		addr := rdb.Options().Addr
		_ = rdb.Close()
		_ = nd.rdb.Close()
		return nil, fmt.Errorf("%w: auto-pipeline of %s: %w", ErrBadOptions, addr, err)
	}
	nd.ap = &autoPipe{rdb: rdb, ap: ap}
	return nd, nil
}

// process queues cmd in the next batch and waits for it, or for ctx to end,
// unless no other call is under way; it reports the call to h (nil:
// nothing). cmd's value may be read only when
// the error returned is nil or redis.Nil: after ctx ended the batch may
// still be writing it.
func (a *autoPipe) process(ctx context.Context, h *nodeHealth, cmd redis.Cmder) error {
	start := h.begin()
	var err error
	if a.calls.Add(1) == 1 {
		_ = a.rdb.Process(ctx, cmd)
		err = cmd.Err()
	} else {
		err = a.ap.Submit(ctx, cmd).WaitContext(ctx)
	}
	a.calls.Add(-1)
	h.observe(ctx, redisOp(cmd), start, err)
	return err
}

// ms is a TTL as the milliseconds of PX and PEXPIRE.
func ms(ttl time.Duration) int64 { return int64(redisTTL(ttl) / time.Millisecond) }

func (a *autoPipe) get(ctx context.Context, h *nodeHealth, key string) ([]byte, error) {
	cmd := redis.NewStringCmd(ctx, "get", key)
	if err := a.process(ctx, h, cmd); err != nil {
		return nil, redisErr(ctx, err)
	}
	return cmd.Bytes()
}

func (a *autoPipe) set(ctx context.Context, h *nodeHealth, key string, value []byte, ttl time.Duration) error {
	args := []any{"set", key, value}
	if ttl > 0 {
		args = append(args, "px", ms(ttl))
	}
	return redisErr(ctx, a.process(ctx, h, redis.NewStatusCmd(ctx, args...)))
}

func (a *autoPipe) add(ctx context.Context, h *nodeHealth, key string, value []byte, ttl time.Duration) error {
	args := []any{"set", key, value}
	if ttl > 0 {
		args = append(args, "px", ms(ttl))
	}
	cmd := redis.NewBoolCmd(ctx, append(args, "nx")...)
	if err := a.process(ctx, h, cmd); err != nil {
		return redisErr(ctx, err)
	}
	if !cmd.Val() {
		return ErrNotStored
	}
	return nil
}

func (a *autoPipe) delete(ctx context.Context, h *nodeHealth, key string) error {
	return redisErr(ctx, a.process(ctx, h, redis.NewIntCmd(ctx, "del", key)))
}

func (a *autoPipe) incr(ctx context.Context, h *nodeHealth, key string, delta int64) (int64, error) {
	cmd := redis.NewIntCmd(ctx, "incrby", key, delta)
	if err := a.process(ctx, h, cmd); err != nil {
		return 0, redisErr(ctx, err)
	}
	return cmd.Val(), nil
}

// expire is Touch with a TTL; Touch without one keeps its pipeline.
func (a *autoPipe) expire(ctx context.Context, h *nodeHealth, key string, ttl time.Duration) error {
	cmd := redis.NewBoolCmd(ctx, "pexpire", key, ms(ttl))
	if err := a.process(ctx, h, cmd); err != nil {
		return redisErr(ctx, err)
	}
	if !cmd.Val() {
		return ErrCacheMiss
	}
	return nil
}

// Close closes the auto-pipeliner's client, which stops the auto-pipeliner.
func (a *autoPipe) Close() error {
	if err := a.rdb.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return err
	}
	return nil
}

// queuedMget is an MGET queued on a node's auto-pipeliner, its answer not
// yet read.
type queuedMget struct {
	a     *autoPipe
	h     *nodeHealth
	cmd   *redis.SliceCmd
	fut   redis.AutoFuture
	start time.Time
}

// mgetQueued queues an MGET of keys on the auto-pipeliner when other calls
// to the node are under way, so that it shares their round trip, and
// returns at once; nil when the node is idle: the caller sends the MGET
// itself (redisNode.mget), as a lone single-key call goes straight out.
func (a *autoPipe) mgetQueued(ctx context.Context, h *nodeHealth, keys []string) *queuedMget {
	if a.calls.Load() == 0 {
		return nil
	}
	a.calls.Add(1)
	args := make([]any, 1+len(keys))
	args[0] = "mget"
	for i, k := range keys {
		args[1+i] = k
	}
	q := &queuedMget{a: a, h: h, cmd: redis.NewSliceCmd(ctx, args...), start: h.begin()}
	q.fut = a.ap.Submit(ctx, q.cmd)
	return q
}

// wait returns the queued MGET's answer, one value per key, once it has
// come; its outcome goes to the node's health and statistics as the hook
// reports the node's own commands.
func (q *queuedMget) wait(ctx context.Context) ([]any, error) {
	err := q.fut.WaitContext(ctx)
	q.a.calls.Add(-1)
	q.h.observe(ctx, opGetMulti, q.start, err)
	if err != nil {
		return nil, redisErr(ctx, err)
	}
	if q.h != nil {
		redisKeys(q.h.stats, opGetMulti, q.cmd)
	}
	return mgetVals(q.cmd)
}
