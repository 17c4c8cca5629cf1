package client

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
)

// Node health, the mechanism: each node's client carries a *nodeHealth, the
// node.Observer the node tells the outcome of every call, whatever method
// made it (each node package reports from one place: redisnode from its
// go-redis hook, mcnode from the end of each call on the wire). The same
// Done feeds the breaker and the node's statistics (stats.go). state.conn
// hands out the node's failing stand-in (nodes.go) while the node is down,
// so no call site checks anything; and one probe goroutine per down node
// marks it up again.

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
	// node checks them itself (node.IdleCloser).
	flush   func()
	timeout time.Duration // bounds one probe

	// comeUp, when set, runs once a probe finds the node, and marks it up
	// itself, or leaves it down (a gutter's hints, gutter.go): then only
	// the probe marks the node up, never another call's answer.
	comeUp func(ctx context.Context)

	failures, downs, dropped, missed, guttered, replicaMissed atomic.Int64
	since                                                     atomic.Int64 // Unix ns when marked down; 0 while up

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

var _ node.Observer = (*nodeHealth)(nil)

// Begin returns the start of a call, to give Done; zero when its time is
// not counted.
func (h *nodeHealth) Begin() time.Time { return h.stats.begin() }

// Keys counts the keys a multi-key read found and missed.
func (h *nodeHealth) Keys(o node.Op, hits, misses int) { h.stats.keys(o, hits, misses) }

// Done records the outcome of one call of kind o made under ctx (nil: no
// context), which began at start: in the node's statistics, and in its
// breaker.
func (h *nodeHealth) Done(ctx context.Context, o node.Op, start time.Time, err error) {
	h.stats.record(o, start, err)
	if !h.enabled {
		return
	}
	switch classify(ctx, err) {
	case answered:
		if h.comeUp != nil {
			h.fails.Store(0) // only the probe marks it up
		} else if h.success() {
			h.markedUp()
		}
	case unreachable:
		h.failures.Add(1)
		if h.failure() {
			h.wentDown(slog.Int("threshold", int(h.threshold)), slog.Any("cause", err))
		}
	}
}

// holdDown marks the node down now, whatever its breaker counted, and
// starts its probe: a gutter's hint that could not be replayed at home
// (gutter.go) must be before the node serves again.
func (h *nodeHealth) holdDown(cause error) {
	if h.enabled && h.down.CompareAndSwap(false, true) {
		h.wentDown(slog.String("why", "a hint not replayed"), slog.Any("cause", cause))
	}
}

// wentDown records that the breaker has just marked the node down, and
// starts the probe.
func (h *nodeHealth) wentDown(attrs ...any) {
	h.since.Store(time.Now().UnixNano())
	h.downs.Add(1)
	h.log.Warn("shardcache: node down", h.attrs(attrs...)...)
	if h.flush != nil {
		h.flush()
	}
	h.startProbe()
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
			switch {
			case classify(nil, err) != answered:
			case h.comeUp != nil:
				h.comeUp(h.ctx)
			case h.success():
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
	// Guttered counts the calls sent to the gutter pool while it was down
	// (Options.Gutter).
	Guttered int64
	// ReplicaMissed counts the writes it missed as a replica
	// (Options.Replicas), replayed as deletes before it served again.
	ReplicaMissed int64
	// Gutter marks a node of the gutter pool, listed after the others.
	Gutter bool
}

// Health returns the health of every node the client routes to (during a
// migration, those of both placements), sorted by name, then the gutter
// pool's (Options.Gutter), marked Gutter.
func (c *Client) Health() []NodeHealth {
	st := c.state.Load()
	if st == nil {
		return nil
	}
	var out []NodeHealth
	for _, m := range st.conns {
		out = append(out, m.h.health())
	}
	slices.SortFunc(out, func(a, b NodeHealth) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	n := len(out)
	for _, m := range c.gutterConns {
		nh := m.h.health()
		nh.Gutter = true
		out = append(out, nh)
	}
	slices.SortFunc(out[n:], func(a, b NodeHealth) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	return out
}

// health is the node's NodeHealth.
func (h *nodeHealth) health() NodeHealth {
	nh := NodeHealth{Node: h.node, Down: h.isDown(), Failures: h.failures.Load(), Downs: h.downs.Load(),
		Dropped: h.dropped.Load(), Missed: h.missed.Load(), Guttered: h.guttered.Load(), ReplicaMissed: h.replicaMissed.Load()}
	if ns := h.since.Load(); ns != 0 && nh.Down {
		nh.Since = time.Unix(0, ns)
	}
	return nh
}
