package health

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/node"
)

// Config configures one node's Observer.
type Config struct {
	// Name and Addr name the node in log lines.
	Name, Addr string
	// Threshold is how many connection-level failures in a row mark the
	// node down; 0 or less: never.
	Threshold int
	// ProbeInterval is the wait before the first probe of a down node,
	// doubled after each failed probe up to ProbeCap.
	ProbeInterval, ProbeCap time.Duration
	// ProbeTimeout bounds one probe, and the calls a comeUp makes.
	ProbeTimeout time.Duration
	// Stats turns the counters on.
	Stats bool
	// Logger logs the node going down and coming up; nil: slog's default.
	Logger *slog.Logger
}

// Observer is the health of one node: its breaker, its counters, and the
// probe that runs while it is down. The node tells it the outcome of every
// call (node.Observer); the client reads it. Set Ping, and Flush and
// ComeUp if wanted, before the node makes its first call.
type Observer struct {
	Breaker
	backoff Backoff
	name    string
	addr    string
	enabled bool // false: Threshold <= 0, never down
	timeout time.Duration

	// Ping is the node's cheapest command, which a probe sends.
	Ping func(ctx context.Context) error
	// Flush, when set, drops the node's idle connections when it goes
	// down: after a restart they are all dead, and each would fail one call.
	Flush func()
	// ComeUp, when set, runs once a probe finds the node and decides
	// whether it is up: it marks it up itself (Success, then MarkedUp), or
	// leaves it down for the next probe (a write it missed not replayed).
	ComeUp func(ctx context.Context)

	// Failures counts the connection-level failures of the node's calls;
	// Downs the times it was marked down. The client counts the rest: the
	// writes dropped and reads missed while it was down (fail-open), the
	// calls sent to its gutter, the writes it missed as a replica.
	Failures, Downs, Dropped, Missed, Guttered, ReplicaMissed atomic.Int64
	since                                                     atomic.Int64 // Unix ns when marked down; 0 while up
	// found is when the probe that last found the node began, as time
	// since epoch on the monotonic clock (a step of the wall clock moves
	// neither); 0: never. A failure of a call begun before it is the
	// outage's, not news.
	found atomic.Int64
	epoch time.Time

	stats *Counters // nil: not counted
	log   *slog.Logger

	ctx    context.Context // cancelled by Close, which ends a probe in flight
	cancel context.CancelFunc
	mu     sync.Mutex
	probe  bool // a probe goroutine runs
	wg     sync.WaitGroup
	kick   chan struct{} // ProbeNow's: cuts the backoff's wait short
}

var _ node.Observer = (*Observer)(nil)

// New returns the observer of one node, up, with no probe running.
func New(c Config) *Observer {
	h := &Observer{
		Breaker: *NewBreaker(c.Threshold),
		backoff: Backoff{Interval: c.ProbeInterval, Max: c.ProbeCap},
		name:    c.Name, addr: c.Addr,
		enabled: c.Threshold > 0,
		timeout: c.ProbeTimeout,
		log:     c.Logger,
		epoch:   time.Now(),
		kick:    make(chan struct{}, 1),
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if c.Stats {
		h.stats = &Counters{}
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// Begin returns the start of a call, to give Done; zero when neither its
// time is counted nor the node can go down.
func (h *Observer) Begin() time.Time {
	if h.enabled {
		return time.Now()
	}
	return h.stats.Begin()
}

// Keys counts the keys a multi-key read found and missed.
func (h *Observer) Keys(o node.Op, hits, misses int) { h.stats.Keys(o, hits, misses) }

// Done records the outcome of one call of kind o made under ctx (nil: no
// context), which began at start: in the node's counters, and in its
// breaker.
func (h *Observer) Done(ctx context.Context, o node.Op, start time.Time, err error) {
	h.stats.Record(o, start, err)
	if !h.enabled {
		return
	}
	switch Classify(ctx, err) {
	case Answered:
		// Only the probe marks the node up: an answer counted while it
		// is down is mostly one begun before it went down (the façade's
		// calls fail at once; c.Redis(key)'s own calls do not), and says
		// nothing certain of the node since.
		if h.fails.Load() != 0 {
			h.fails.Store(0)
		}
	case Unreachable:
		h.Failures.Add(1)
		if found := h.found.Load(); found != 0 && !start.IsZero() && int64(start.Sub(h.epoch)) < found {
			// Begun before the probe found the node: a failure of the
			// outage already counted, which must not mark it down again.
			return
		}
		if h.Failure() {
			h.wentDown(slog.Int("threshold", int(h.threshold)), slog.Any("cause", err))
		}
	}
}

// Ops returns the node's counts by kind of call; nil when not counted.
func (h *Observer) Ops() []Counts { return h.stats.Snapshot() }

// Since returns when the node was last marked down; zero while it is up.
func (h *Observer) Since() time.Time {
	if ns := h.since.Load(); ns != 0 && h.Down() {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Timeout is the bound of one probe, for the calls a ComeUp makes.
func (h *Observer) Timeout() time.Duration { return h.timeout }

// HoldDown marks the node down now, whatever its breaker counted, and
// starts its probe: a write it missed must be replayed before it serves
// again.
func (h *Observer) HoldDown(why string, cause error) {
	if h.enabled && h.down.CompareAndSwap(false, true) {
		h.wentDown(slog.String("why", why), slog.Any("cause", cause))
	}
}

// wentDown records that the breaker has just marked the node down, and
// starts the probe.
func (h *Observer) wentDown(attrs ...any) {
	h.since.Store(time.Now().UnixNano())
	h.Downs.Add(1)
	h.Warn("shardcache: node down", attrs...)
	if h.Flush != nil {
		h.Flush()
	}
	h.StartProbe()
}

// MarkedUp logs that the breaker has just marked the node up again.
func (h *Observer) MarkedUp() {
	down := time.Duration(0)
	if ns := h.since.Swap(0); ns != 0 {
		down = time.Since(time.Unix(0, ns))
	}
	h.log.Info("shardcache: node up", h.attrs(slog.Duration("down_for", down))...)
}

// Warn logs msg at warning level with the node's attributes, then attrs.
func (h *Observer) Warn(msg string, attrs ...any) { h.log.Warn(msg, h.attrs(attrs...)...) }

// attrs are the node's attributes for a log line, then more.
func (h *Observer) attrs(more ...any) []any {
	return append([]any{slog.String("node", h.name), slog.String("addr", h.addr)}, more...)
}

// StartProbe starts the probe goroutine unless one runs or h is closed.
func (h *Observer) StartProbe() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probe || h.ctx.Err() != nil {
		return
	}
	h.probe = true
	h.wg.Add(1)
	go h.probeLoop()
}

// probeLoop pings the node, waiting the backoff's delay before each try,
// until it answers (then the node is up) or h is closed.
func (h *Observer) probeLoop() {
	defer h.wg.Done()
	for attempt := 0; ; attempt++ {
		t := time.NewTimer(h.backoff.Delay(attempt))
		select {
		case <-h.ctx.Done():
			t.Stop()
			h.stopProbe()
			return
		case <-t.C:
		case <-h.kick:
			t.Stop()
		}
		if h.Down() {
			began := time.Now()
			ctx, cancel := context.WithTimeout(h.ctx, h.timeout)
			err := h.Ping(ctx)
			cancel()
			answered := Classify(nil, err) == Answered
			if answered {
				h.found.Store(max(int64(began.Sub(h.epoch)), 1))
			}
			switch {
			case !answered:
			case h.ComeUp != nil:
				h.ComeUp(h.ctx)
			case h.Success():
				h.MarkedUp()
			}
		}
		if !h.Down() && h.stopProbe() {
			return
		}
	}
}

// ProbeNow has the probe of a node held down try at once rather than
// after its backoff's wait: another process found the node back (the
// client's gutter), and each call this one still sends elsewhere is one
// that may miss what is now written at home. Up, it does nothing.
func (h *Observer) ProbeNow() {
	if !h.Down() {
		return
	}
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// stopProbe ends the probe goroutine's turn, unless the node went down
// again meanwhile and h is not closed: then the same goroutine goes on
// probing.
func (h *Observer) stopProbe() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Down() && h.ctx.Err() == nil {
		return false
	}
	h.probe = false
	select { // a kick left from this outage is not the next one's
	case <-h.kick:
	default:
	}
	return true
}

// Close stops the probe and waits for it. A nil *Observer is closed.
func (h *Observer) Close() {
	if h == nil {
		return
	}
	h.cancel()
	h.wg.Wait()
}
