package client

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/ring"
)

// Node health, the mechanism: each node's client carries a *nodeHealth. Every
// call's outcome reaches it from one place per backend, whatever method made
// the call: a go-redis hook on the node's client for Redis, and call (or the
// fast paths beside it) in memcached.go for Memcached. The same observe feeds
// the breaker and the node's statistics (stats.go). state.conn hands out a
// downNode instead of the client while the node is down, so no call site
// checks anything; and one probe goroutine per down node marks it up again.

// nodeHealth is the health of one node: its breaker, the counters Health
// reports, and the probe that runs while it is down. It is made with the
// node's client in dial and stopped by the client's Close.
type nodeHealth struct {
	breaker
	backoff
	node    ring.Node
	enabled bool                            // false: FailureThreshold < 0, never down
	ping    func(ctx context.Context) error // the backend's cheapest command
	// flush drops the node's idle connections when it goes down: after a
	// restart they are all dead, and each would fail one call. nil when the
	// client checks them itself (go-redis does, on taking one from its pool).
	flush   func()
	timeout time.Duration // bounds one probe

	failures, downs, dropped, missed atomic.Int64
	since                            atomic.Int64 // Unix ns when marked down; 0 while up

	stats *nodeStats   // nil: Options.DisableStats
	log   *slog.Logger // Options.Logger: down and up

	ctx    context.Context // cancelled by close, which ends a probe in flight
	cancel context.CancelFunc
	mu     sync.Mutex
	probe  bool // a probe goroutine runs
	wg     sync.WaitGroup
}

func newNodeHealth(n ring.Node, o *Options) *nodeHealth {
	h := &nodeHealth{
		node:    n,
		enabled: o.FailureThreshold > 0,
		backoff: backoff{interval: o.ProbeInterval, max: ProbeBackoffCap * o.ProbeInterval},
		timeout: o.DialTimeout + max(o.ReadTimeout, o.WriteTimeout),
	}
	h.threshold = int32(min(o.FailureThreshold, 1<<30))
	if !o.DisableStats {
		h.stats = &nodeStats{}
	}
	h.log = o.Logger
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// begin returns the start of a call, to give observe; zero when its time is
// not counted.
func (h *nodeHealth) begin() time.Time {
	if h == nil {
		return time.Time{}
	}
	return h.stats.begin()
}

// observe records the outcome of one call of kind o made under ctx (nil: no
// context), which began at start: in the node's statistics, and in its
// breaker. A nil h, a node client made outside dial, records nothing.
func (h *nodeHealth) observe(ctx context.Context, o op, start time.Time, err error) {
	if h == nil {
		return
	}
	h.stats.record(o, start, err)
	if !h.enabled {
		return
	}
	switch classify(ctx, err) {
	case answered:
		if h.success() {
			h.markedUp()
		}
	case unreachable:
		h.failures.Add(1)
		if h.failure() {
			h.since.Store(time.Now().UnixNano())
			h.downs.Add(1)
			h.log.Warn("shardcache: node down", h.attrs(slog.Int("threshold", int(h.threshold)), slog.Any("cause", err))...)
			if h.flush != nil {
				h.flush()
			}
			h.startProbe()
		}
	}
}

// markedUp records that the breaker has just marked the node up again.
func (h *nodeHealth) markedUp() {
	down := time.Duration(0)
	if ns := h.since.Swap(0); ns != 0 {
		down = time.Since(time.Unix(0, ns))
	}
	h.log.Info("shardcache: node up", h.attrs(slog.Duration("down_for", down))...)
}

// attrs are the node's attributes for a log line, then more.
func (h *nodeHealth) attrs(more ...any) []any {
	return append([]any{slog.String("node", h.node.Name), slog.String("addr", h.node.Addr)}, more...)
}

// startProbe starts the probe goroutine unless one runs or h is closed.
func (h *nodeHealth) startProbe() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probe || h.ctx.Err() != nil {
		return
	}
	h.probe = true
	h.wg.Add(1)
	go h.probeLoop()
}

// probeLoop pings the node, waiting backoff.delay(attempt) before each try,
// until it answers (then the node is up) or h is closed.
func (h *nodeHealth) probeLoop() {
	defer h.wg.Done()
	for attempt := 0; ; attempt++ {
		t := time.NewTimer(h.delay(attempt))
		select {
		case <-h.ctx.Done():
			t.Stop()
			h.stopProbe()
			return
		case <-t.C:
		}
		if h.isDown() {
			ctx, cancel := context.WithTimeout(h.ctx, h.timeout)
			err := h.ping(ctx)
			cancel()
			if classify(nil, err) == answered && h.success() {
				h.markedUp()
			}
		}
		if !h.isDown() && h.stopProbe() {
			return
		}
	}
}

// stopProbe ends the probe goroutine's turn, unless the node went down again
// meanwhile and h is not closed: then the same goroutine goes on probing.
func (h *nodeHealth) stopProbe() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.isDown() && h.ctx.Err() == nil {
		return false
	}
	h.probe = false
	return true
}

// close stops the probe and waits for it.
func (h *nodeHealth) close() {
	if h == nil {
		return
	}
	h.cancel()
	h.wg.Wait()
}

// healthHook reports the outcome of every command of a go-redis client to
// the node's health, including those made through Client.Redis.
type healthHook struct{ h *nodeHealth }

func (healthHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (k healthHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := k.h.begin()
		err := next(ctx, cmd)
		k.report(ctx, cmd, start, err)
		return err
	}
}

// report records the outcome of cmd, which began at start.
func (k healthHook) report(ctx context.Context, cmd redis.Cmder, start time.Time, err error) {
	o := redisOp(cmd)
	k.h.observe(ctx, o, start, err)
	if err == nil {
		redisKeys(k.h.stats, o, cmd)
	}
}

func (k healthHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := k.h.begin()
		err := next(ctx, cmds)
		o := redisPipelineOp(cmds)
		k.h.observe(ctx, o, start, err)
		if err == nil || err == redis.Nil {
			redisKeys(k.h.stats, o, cmds...)
		}
		return err
	}
}

// withHealth gives the client of node n, fresh from dial, its health.
func withHealth(n ring.Node, nd node, o *Options) node {
	h := newNodeHealth(n, o)
	switch nd := nd.(type) {
	case redisNode:
		nd.h = h
		nd.rdb.AddHook(redisHook(h, nd.near))
		h.ping = func(ctx context.Context) error { return nd.rdb.Ping(ctx).Err() }
		if nd.raw != nil {
			nd.raw.h = h
			h.flush = nd.raw.closeIdle // go-redis's pool drops its broken connections itself
		}
		return nd
	case mcNode:
		nd.h = h
		nd.raw.h = h
		h.ping = nd.ping
		h.flush = func() { // both pools stay usable
			nd.mc.Close()
			nd.raw.closeIdle()
		}
		return nd
	}
	return nd
}

// healthOf returns the health of a node's client, nil for a stand-in.
func healthOf(nd node) *nodeHealth {
	switch nd := nd.(type) {
	case redisNode:
		return nd.h
	case mcNode:
		return nd.h
	}
	return nil
}

// downNode stands for a node held down: every call fails at once with
// ErrNodeDown, which callers wrap in a *NodeError as any node failure, and
// is counted in the node's statistics (without a latency: it never reached
// the network).
type downNode struct{ h *nodeHealth }

// fail counts a call of kind o and returns ErrNodeDown.
func (d downNode) fail(o op) error {
	d.h.stats.record(o, time.Time{}, ErrNodeDown)
	return ErrNodeDown
}

func (d downNode) get(context.Context, string) ([]byte, error) { return nil, d.fail(opGet) }
func (d downNode) getMulti(context.Context, []string, bool) ([]item, error) {
	return nil, d.fail(opGetMulti)
}
func (d downNode) set(context.Context, string, []byte, time.Duration) error { return d.fail(opSet) }
func (d downNode) setMulti(context.Context, []item) error                   { return d.fail(opSetMulti) }
func (d downNode) add(context.Context, string, []byte, time.Duration) error { return d.fail(opAdd) }
func (d downNode) addMulti(context.Context, []item) ([]bool, error)         { return nil, d.fail(opAddMulti) }
func (d downNode) delete(context.Context, string) error                     { return d.fail(opDelete) }
func (d downNode) deleteMulti(context.Context, []string) error              { return d.fail(opDeleteMulti) }
func (d downNode) incr(context.Context, string, int64) (int64, error)       { return 0, d.fail(opIncr) }
func (d downNode) touch(context.Context, string, time.Duration) error       { return d.fail(opTouch) }
func (downNode) Close() error                                               { return nil }

// downNode has each capability a node client has beyond node, failing at
// once too, so that code asserting one sees a node down rather than none.
var (
	_ leaser    = downNode{}
	_ sweepNode = downNode{}
	_ itemNode  = downNode{}
)

func (downNode) getItem(context.Context, string) (item, error)     { return item{}, ErrNodeDown }
func (downNode) store(context.Context, StoreOp, item) error        { return ErrNodeDown }
func (downNode) deleteFound(context.Context, string) (bool, error) { return false, ErrNodeDown }
func (downNode) flush(context.Context) error                       { return ErrNodeDown }
func (downNode) ping(context.Context) error                        { return ErrNodeDown }
func (downNode) getAndTouch(context.Context, string, time.Duration) (item, error) {
	return item{}, ErrNodeDown
}
func (downNode) incrDecr(context.Context, string, uint64, bool) (uint64, error) {
	return 0, ErrNodeDown
}

func (downNode) scan(context.Context, string, int, func([]item) error) error { return ErrNodeDown }
func (downNode) dump(context.Context, []item) ([]item, error)                { return nil, ErrNodeDown }
func (downNode) restore(context.Context, []item) ([]bool, error)             { return nil, ErrNodeDown }
func (downNode) exists(context.Context, []string) ([]bool, error)            { return nil, ErrNodeDown }
func (downNode) size(context.Context) (int64, error)                         { return 0, ErrNodeDown }

func (d downNode) storeLeased(context.Context, []item, []string, string) ([]bool, error) {
	return nil, d.fail(opLease)
}
func (d downNode) releaseLeases(context.Context, []string, string) error { return d.fail(opLease) }

// NodeHealth is one node's health as the client sees it.
type NodeHealth struct {
	Node ring.Node
	// Down is true while the node is held down: its calls fail at once with
	// ErrNodeDown (or, with Options.FailOpen, read as misses), and a probe
	// retries it in the background.
	Down bool
	// Since is when the node was last marked down; zero while it is up.
	Since time.Time
	// Failures counts the connection-level failures of its calls; Downs the
	// times it was marked down.
	Failures, Downs int64
	// Dropped counts the writes Options.FailOpen dropped while it was down,
	// and Missed the reads it answered with a miss.
	Dropped, Missed int64
}

// Health returns the health of every node the client routes to (during a
// migration, those of both placements), sorted by name.
func (c *Client) Health() []NodeHealth {
	st := c.state.Load()
	if st == nil {
		return nil
	}
	var out []NodeHealth
	for _, nd := range st.conns {
		h := healthOf(nd)
		if h == nil {
			continue
		}
		nh := NodeHealth{Node: h.node, Down: h.isDown(), Failures: h.failures.Load(), Downs: h.downs.Load(),
			Dropped: h.dropped.Load(), Missed: h.missed.Load()}
		if ns := h.since.Load(); ns != 0 && nh.Down {
			nh.Since = time.Unix(0, ns)
		}
		out = append(out, nh)
	}
	slices.SortFunc(out, func(a, b NodeHealth) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	return out
}
