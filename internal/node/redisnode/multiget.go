package redisnode

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/wire"
	"github.com/shardcache/shardcache/internal/wire/resp"
)

// A multi-get's MGET goes, in this order of preference:
//
//   - with AutoPipeline and other calls to the node under way, into the
//     auto-pipeliner's next batch, which it shares;
//   - while the go-redis client has not been handed out, over the node's
//     own connections in two halves (package doc), when the budget has a
//     place or a connection is idle: no goroutine;
//   - otherwise through go-redis, from a goroutine of its own, so that the
//     caller can send the other nodes' meanwhile, and never waits itself.

// Send sends the MGET of keys (see above).
func (n *Node) Send(ctx context.Context, keys []string) node.Pending {
	if n.ap != nil && n.ap.calls.Load() > 0 {
		return n.queued(ctx, keys)
	}
	if n.raw != nil && !n.exposed.Load() {
		start := n.obs.Begin()
		if g, ok := n.raw.TrySend(ctx, resp.Mget{}, keys); ok {
			return n.rawPending(ctx, g, start)
		}
	}
	// go-redis waits for a connection of its pool, which it dials in a
	// place of the node's budget: one freed, or one of the node's own idle
	// connections handed over (wire.Budget.Dial). The node's own
	// connections never wait: places held idle by go-redis would never
	// come back to them.
	return n.goPending(ctx, keys)
}

// TrySend is Send: it never waits for another call's connection.
func (n *Node) TrySend(ctx context.Context, keys []string) (node.Pending, bool) {
	return n.Send(ctx, keys), true
}

// SendIdle sends the MGET of keys without dialing or waiting: over an
// idle connection of the node's own, or, where those are not used,
// through go-redis or the auto-pipeliner (neither keeps the caller). False
// when the node's own connections are used and none is idle.
func (n *Node) SendIdle(ctx context.Context, keys []string) (node.Pending, bool) {
	if n.ap != nil && n.ap.calls.Load() > 0 {
		return n.queued(ctx, keys), true
	}
	if n.raw == nil || n.exposed.Load() {
		return n.goPending(ctx, keys), true
	}
	start := n.obs.Begin()
	g, ok := n.raw.SendIdle(ctx, resp.Mget{}, keys)
	if !ok {
		return nil, false
	}
	return n.rawPending(ctx, g, start), true
}

func (n *Node) rawPending(ctx context.Context, g *wire.Pending, start time.Time) node.Pending {
	if n.ap != nil { // the node is busy until the answer is read: later MGETs share the auto-pipeliner's trips
		n.ap.calls.Add(1)
	}
	return &rawPending{n: n, g: g, ctx: ctx, start: start}
}

// rawPending is an MGET sent on the node's own connections.
type rawPending struct {
	n     *Node
	g     *wire.Pending
	ctx   context.Context
	start time.Time
}

func (p *rawPending) Recv(out []node.Answer) error {
	found, err := p.g.Recv(out)
	if p.n.ap != nil {
		p.n.ap.calls.Add(-1)
	}
	if err != nil {
		err = mapErr(p.ctx, err)
	}
	p.n.obs.Done(p.ctx, node.OpGetMulti, p.start, err)
	if err != nil {
		return err
	}
	p.n.obs.Keys(node.OpGetMulti, found, len(out)-found)
	return nil
}

// mgetCmd is the go-redis command MGET of keys.
func mgetCmd(ctx context.Context, keys []string) *redis.SliceCmd {
	args := make([]any, 1+len(keys))
	args[0] = "mget"
	for i, k := range keys {
		args[1+i] = k
	}
	return redis.NewSliceCmd(ctx, args...)
}

// goPending is an MGET sent through go-redis from a goroutine.
type goPending struct {
	cmd  *redis.SliceCmd
	done chan struct{}
	ctx  context.Context
}

func (n *Node) goPending(ctx context.Context, keys []string) node.Pending {
	p := &goPending{cmd: mgetCmd(ctx, keys), done: make(chan struct{}), ctx: ctx}
	if n.ap != nil { // the node is busy while it runs: later MGETs share the auto-pipeliner's trips
		n.ap.calls.Add(1)
	}
	go func() {
		defer close(p.done)
		if n.ap != nil {
			defer n.ap.calls.Add(-1)
		}
		if n.near != nil {
			// In a pipeline of its own: go-redis never answers a pipeline
			// from its cache nor fills it with one. Kept, an MGET's reply
			// would be one entry per distinct key list, holding every value
			// of the list, that its next identical list alone could use.
			pctx := withOp(ctx, node.OpGetMulti)
			_, _ = n.rdb.Pipelined(pctx, func(pl redis.Pipeliner) error { return pl.Process(pctx, p.cmd) })
			return
		}
		_ = n.rdb.Process(live(ctx), p.cmd)
	}()
	return p
}

func (p *goPending) Recv(out []node.Answer) error {
	<-p.done
	return fill(p.ctx, p.cmd, out)
}

// queuedPending is an MGET in the auto-pipeliner's next batch.
type queuedPending struct {
	a     *autoPipe
	cmd   *redis.SliceCmd
	fut   redis.AutoFuture
	ctx   context.Context
	start time.Time
}

func (n *Node) queued(ctx context.Context, keys []string) node.Pending {
	n.ap.calls.Add(1)
	q := &queuedPending{a: n.ap, cmd: mgetCmd(ctx, keys), ctx: ctx, start: n.obs.Begin()}
	q.fut = n.ap.ap.Submit(ctx, q.cmd)
	return q
}

func (q *queuedPending) Recv(out []node.Answer) error {
	err := q.fut.WaitContext(q.ctx)
	q.a.calls.Add(-1)
	q.a.obs.Done(q.ctx, node.OpGetMulti, q.start, observed(err))
	if err != nil {
		return mapErr(q.ctx, err)
	}
	countKeys(q.a.obs, node.OpGetMulti, q.cmd)
	return fill(q.ctx, q.cmd, out)
}

// fill reads a go-redis MGET's answer into out.
func fill(ctx context.Context, cmd *redis.SliceCmd, out []node.Answer) error {
	if err := cmd.Err(); err != nil {
		return mapErr(ctx, err)
	}
	vals := cmd.Val()
	if len(vals) != len(out) {
		return fmt.Errorf("%w: MGET of %d keys answered %d values", wire.ErrProtocol, len(out), len(vals))
	}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[i] = node.Answer{Value: bytesOf(s), Found: true}
		}
	}
	return nil
}
