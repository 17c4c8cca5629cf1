// Package health is the observer the client hands each node: it is told the
// outcome of every call the node makes (node.Observer), counts them for the
// client's statistics, and feeds the node's breaker, which holds a node down
// after a run of connection-level failures and probes it until it answers.
//
// The policy, what counts against a node and when it is down, is Classify,
// Breaker and Backoff: no I/O, no clock, tested without servers. Observer
// applies it: one per node, made with the node's client, closed with it.
//
//	h := health.New(health.Config{Name: "a", Addr: "10.0.0.1:6379", Threshold: 3,
//		ProbeInterval: 500 * time.Millisecond, ProbeCap: 10 * time.Second, Stats: true})
//	h.Ping = n.Ping // the node's cheapest command
//	defer h.Close()
package health

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/node"
)

// Breaker holds one node's run of failures and whether it is down. Its hot
// path, a success while up with no failure pending, only reads.
type Breaker struct {
	threshold int32
	fails     atomic.Int32 // connection-level failures since the last success
	down      atomic.Bool
}

// NewBreaker returns a breaker that marks its node down after threshold
// connection-level failures in a row (at least 1).
func NewBreaker(threshold int) *Breaker {
	b := &Breaker{}
	b.threshold = int32(min(max(threshold, 1), 1<<30))
	return b
}

// Failure counts a connection-level failure and reports whether it is the
// one that marks the node down.
func (b *Breaker) Failure() bool {
	if b.fails.Add(1) < b.threshold {
		return false
	}
	return b.down.CompareAndSwap(false, true)
}

// Success records an answer from the node and reports whether it marks the
// node up again.
func (b *Breaker) Success() bool {
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
	return b.down.Load() && b.down.CompareAndSwap(true, false)
}

// Down reports whether calls to the node should fail at once.
func (b *Breaker) Down() bool { return b.down.Load() }

// Backoff is the wait before each probe of a down node: Interval, doubled
// after each failed probe, at most Max.
type Backoff struct {
	Interval, Max time.Duration
}

// Delay returns the wait before probe number attempt (0 for the first).
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Interval
	for range attempt {
		if d >= b.Max/2 {
			return b.Max
		}
		d *= 2
	}
	return min(d, b.Max)
}

// Outcome is what one call says about its node's health.
type Outcome int

// Outcomes of a call.
const (
	Answered    Outcome = iota // the node answered, even with a miss or an error reply
	Unreachable                // a connection-level failure: the node did not answer
	Unknown                    // says nothing: the caller gave up, or it never left the client
)

// Classify says what err, the result of one call to a node made under ctx
// (nil when the call had no context), tells about the node. Only
// connection-level failures count against it: a refused or timed-out dial,
// an i/o timeout, a reset, a connection closed mid-reply. A miss,
// NOT_STORED, an error reply (a wrong type, a bad password, a value too
// large) mean it answered; the caller's own context ending says nothing,
// nor does a failure the client made itself (a closed client, a node held
// down, an unknown node, a pool whose connections were all busy).
func Classify(ctx context.Context, err error) Outcome {
	if err == nil || err == node.ErrCacheMiss || err == node.ErrNotStored {
		return Answered
	}
	if ctx != nil {
		if ctx.Err() != nil {
			return Unknown
		}
		// A connection's deadline is the context's, and may fire a moment
		// before the context's own timer does.
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			return Unknown
		}
	}
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, node.ErrNodeDown) || errors.Is(err, node.ErrUnknownNode) || node.Local(err):
		return Unknown
	case node.Unreachable(err):
		return Unreachable
	}
	return Answered
}

// SetDown marks the node down or up at once, counting nothing and starting
// no probe: for tests that hold a node down by hand.
func (b *Breaker) SetDown(down bool) { b.down.Store(down) }
