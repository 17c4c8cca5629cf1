package client

import (
	"slices"
	"strings"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/health"
	"github.com/shardcache/shardcache/ring"
)

// Node health: each node's client carries a *health.Observer, the
// node.Observer the node tells the outcome of every call, whatever method
// made it (each node package reports from one place: redisnode from its
// go-redis hook, mcnode from the end of each call on the wire). The same
// Done feeds the breaker and the node's statistics (stats.go). state.conn
// hands out the node's failing stand-in while the node is down, so no call
// site checks anything; and one probe goroutine per down node marks it up
// again. The policy (what counts against a node, when it is down) is
// health.Classify and health.Breaker.

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

// newHealth returns the observer of node n under the options o.
func newHealth(n ring.Node, o *Options) *health.Observer {
	return health.New(health.Config{
		Name: n.Name, Addr: n.Addr, Threshold: o.FailureThreshold,
		ProbeInterval: o.ProbeInterval, ProbeCap: ProbeBackoffCap * o.ProbeInterval,
		ProbeTimeout: o.DialTimeout + max(o.ReadTimeout, o.WriteTimeout),
		Stats:        !o.DisableStats, Logger: o.Logger,
	})
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
		out = append(out, m.health())
	}
	slices.SortFunc(out, func(a, b NodeHealth) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	n := len(out)
	for _, m := range c.gutterConns {
		nh := m.health()
		nh.Gutter = true
		out = append(out, nh)
	}
	slices.SortFunc(out[n:], func(a, b NodeHealth) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	return out
}

// health is the member's NodeHealth.
func (m *member) health() NodeHealth {
	h := m.h
	return NodeHealth{Node: m.rn, Down: h.Down(), Since: h.Since(), Failures: h.Failures.Load(), Downs: h.Downs.Load(),
		Dropped: h.Dropped.Load(), Missed: h.Missed.Load(), Guttered: h.Guttered.Load(), ReplicaMissed: h.ReplicaMissed.Load()}
}
