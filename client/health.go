package client

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/node"
)

// The health policy of a node: what counts as the node failing, when it is
// down, how often a down node is probed. It does no I/O and reads no clock,
// so it is tested without servers; probe.go applies it.

// ErrNodeDown is the cause of a *NodeError from a node the client holds down:
// Options.FailureThreshold calls in a row failed at the connection level, and
// no probe has succeeded since. Such calls fail at once, without touching the
// network.
var ErrNodeDown = node.ErrNodeDown

// Defaults of the health options.
const (
	// DefaultFailureThreshold is how many connection-level failures in a row
	// mark a node down.
	DefaultFailureThreshold = 3
	// DefaultProbeInterval is the wait before the first probe of a down
	// node; each failed probe doubles it.
	DefaultProbeInterval = 500 * time.Millisecond
	// ProbeBackoffCap caps the doubling at this many times the interval
	// (10s by default): a node back after a long outage is noticed within
	// that, and a dead one costs one probe per 10s.
	ProbeBackoffCap = 20
)

// breaker holds one node's run of failures and whether it is down. Its hot
// path, a success while up with no failure pending, only reads.
type breaker struct {
	threshold int32
	fails     atomic.Int32 // connection-level failures since the last success
	down      atomic.Bool
}

// failure counts a connection-level failure and reports whether it is the
// one that marks the node down.
func (b *breaker) failure() bool {
	if b.fails.Add(1) < b.threshold {
		return false
	}
	return b.down.CompareAndSwap(false, true)
}

// success records an answer from the node and reports whether it marks the
// node up again.
func (b *breaker) success() bool {
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
	return b.down.Load() && b.down.CompareAndSwap(true, false)
}

// isDown reports whether calls to the node should fail at once.
func (b *breaker) isDown() bool { return b.down.Load() }

// backoff is the wait before each probe of a down node: interval, doubled
// after each failed probe, at most max.
type backoff struct {
	interval, max time.Duration
}

// delay returns the wait before probe number attempt (0 for the first).
func (b backoff) delay(attempt int) time.Duration {
	d := b.interval
	for range attempt {
		if d >= b.max/2 {
			return b.max
		}
		d *= 2
	}
	return min(d, b.max)
}

// outcome is what one call says about its node's health.
type outcome int

const (
	answered    outcome = iota // the node answered, even with a miss or an error reply
	unreachable                // a connection-level failure: the node did not answer
	unknown                    // says nothing: the caller gave up, or it never left the client
)

// classify says what err, the result of one call to a node made under ctx
// (nil when the call had no context), tells about the node. Only
// connection-level failures count against it: a refused or timed-out dial,
// an i/o timeout, a reset, a connection closed mid-reply. A miss, NOT_STORED,
// an error reply (a wrong type, a bad password, a value too large) mean it
// answered; the caller's own context ending says nothing, nor does a failure
// the client made itself (a closed client, a node held down, a pool whose
// connections were all busy).
func classify(ctx context.Context, err error) outcome {
	if err == nil || err == ErrCacheMiss || err == ErrNotStored {
		return answered
	}
	if ctx != nil {
		if ctx.Err() != nil {
			return unknown
		}
		// A connection's deadline is the context's, and may fire a moment
		// before the context's own timer does.
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			return unknown
		}
	}
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrNodeDown) || errors.Is(err, ErrUnknownNode) || node.Local(err):
		return unknown
	case node.Unreachable(err):
		return unreachable
	}
	return answered
}
