package redisnode

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// Auto-pipelining (Config.AutoPipeline): the node's single-key commands go
// through go-redis's auto-pipeliner (EXPERIMENTAL in go-redis) on the
// node's own client, which batches the commands of concurrent callers into
// one pipeline per round trip, in the node's pool and under its hooks.
// Each batched command is told to the observer here, once its batch is
// done (see hook.go).

// autoPipe is a node's auto-pipeliner.
type autoPipe struct {
	ap  *redis.AutoPipeliner
	obs node.Observer
	// calls is the number of this node's calls under way here. A call that
	// finds none goes straight to the client, as without AutoPipeline: the
	// auto-pipeliner's hand-offs between goroutines would cost a lone
	// caller about twice the latency, with nobody to share the trip with.
	calls atomic.Int64
}

// process queues cmd in the next batch and waits for it, or for ctx to
// end, unless no other call is under way: then it sends cmd on rdb. cmd's
// value may be read only when the error returned is nil or redis.Nil:
// after ctx ended the batch may still be writing it.
func (a *autoPipe) process(ctx context.Context, rdb *redis.Client, cmd redis.Cmder) error {
	var err error
	if a.calls.Add(1) == 1 {
		_ = rdb.Process(live(ctx), cmd) // the hook tells the observer
		err = cmd.Err()
	} else {
		start := a.obs.Begin()
		f := a.ap.Submit(ctx, cmd)
		if ctx.Done() == nil {
			err = f.Wait() // a context that never ends: a receive, not a select
		} else {
			err = f.WaitContext(ctx)
		}
		a.obs.Done(ctx, opOf(cmd), start, observed(err))
	}
	a.calls.Add(-1)
	return err
}

// ms is a TTL as the milliseconds of PX and PEXPIRE.
func ms(d time.Duration) int64 { return int64(ttl(d) / time.Millisecond) }

func (a *autoPipe) get(ctx context.Context, rdb *redis.Client, key string) ([]byte, error) {
	cmd := redis.NewStringCmd(ctx, "get", key)
	if err := a.process(ctx, rdb, cmd); err != nil {
		return nil, mapErr(ctx, err)
	}
	return cmd.Bytes()
}

func setArgs(key string, value []byte, d time.Duration, more int) []any {
	args := make([]any, 3, 5+more)
	args[0], args[1], args[2] = "set", key, value
	if d > 0 {
		args = append(args, "px", ms(d))
	}
	return args
}

func (a *autoPipe) set(ctx context.Context, rdb *redis.Client, key string, value []byte, d time.Duration) error {
	return mapErr(ctx, a.process(ctx, rdb, redis.NewStatusCmd(ctx, setArgs(key, value, d, 0)...)))
}

func (a *autoPipe) add(ctx context.Context, rdb *redis.Client, key string, value []byte, d time.Duration) error {
	cmd := redis.NewBoolCmd(ctx, append(setArgs(key, value, d, 1), "nx")...)
	if err := a.process(ctx, rdb, cmd); err != nil {
		return mapErr(ctx, err)
	}
	if !cmd.Val() {
		return node.ErrNotStored
	}
	return nil
}

func (a *autoPipe) delete(ctx context.Context, rdb *redis.Client, key string) error {
	return mapErr(ctx, a.process(ctx, rdb, redis.NewIntCmd(ctx, "del", key)))
}

func (a *autoPipe) incr(ctx context.Context, rdb *redis.Client, key string, delta int64) (int64, error) {
	cmd := redis.NewIntCmd(ctx, "incrby", key, delta)
	if err := a.process(ctx, rdb, cmd); err != nil {
		return 0, mapErr(ctx, err)
	}
	return cmd.Val(), nil
}

// expire is Touch with a TTL; Touch without one keeps its pipeline.
func (a *autoPipe) expire(ctx context.Context, rdb *redis.Client, key string, d time.Duration) error {
	cmd := redis.NewBoolCmd(ctx, "pexpire", key, ms(d))
	if err := a.process(ctx, rdb, cmd); err != nil {
		return mapErr(ctx, err)
	}
	if !cmd.Val() {
		return node.ErrCacheMiss
	}
	return nil
}

// Close stops the auto-pipeliner.
func (a *autoPipe) Close() error {
	if err := a.ap.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return err
	}
	return nil
}

// CallsUnderWay is the number of the node's calls under way through the
// auto-pipeliner's path (0 without AutoPipeline): a call that finds none
// goes straight out, the others join the next batch. For tests.
func (n *Node) CallsUnderWay() int64 {
	if n.ap == nil {
		return 0
	}
	return n.ap.calls.Load()
}
