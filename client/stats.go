package client

import (
	"slices"
	"strings"
	"time"

	"github.com/shardcache/shardcache/internal/node/health"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// Per-node statistics. Every call to a node reaches its *health.Observer
// (health.go), which feeds both the breaker and its counters: one atomic
// add per counter, no lock, no allocation. Client.Stats reads them.

// Stats is what the client has done since New: per node, and for its
// migrations.
type Stats struct {
	// Nodes are the nodes the client routes to, sorted by name: those of the
	// current placement and, during a migration, those of the old one. A
	// node that leaves both is no longer listed. A node's counts live as
	// long as its connection pool: one that comes back once its pool was
	// closed starts from zero.
	Nodes []NodeStats
	// Migration is the latest migration, as Client.Migration returns it.
	Migration migration.Status
	// Migrations counts the migrations this client started (Reshard, or
	// Options.MigrateFrom), and MigrationTotals adds up the counters of all
	// of them: unlike Migration's, they never go back to zero.
	Migrations      int64
	MigrationTotals migration.Snapshot
	// Loads is what GetOrLoad and GetMultiOrLoad did, as LoadStats returns
	// it: their hits and misses are those the application saw, where a
	// node's "get" counts include the second read a load makes.
	Loads LoadStats
	// Topology is where the client stands in the topology it follows, as
	// TopologyInfo returns it: its Version is the one this process runs.
	Topology TopologyStatus
}

// NodeStats is one node's statistics.
type NodeStats struct {
	Node ring.Node
	// Up is false while the node is held down (Options.FailureThreshold).
	Up bool
	// Current and Old say which placements list the node: the current one,
	// the one a migration moves keys from, or both.
	Current, Old bool
	// Ops has one entry per kind of call the node received, in the order of
	// the Op names below, calls that failed at once because the node was
	// down included.
	Ops []OpStats
}

// OpStats counts one kind of call to one node.
type OpStats struct {
	// Op is the call: "get", "get_multi", "set", "set_multi", "add",
	// "add_multi", "delete", "delete_multi", "incr", "touch", "lease" (a
	// GetOrLoad lease's store or release; taking one is an "add"), "exists"
	// (a copy's confirmation, a sweep's check: Redis EXISTS, a Memcached
	// multi-get), "sweep" (Client.Sweep's listing, dumps and restores, on
	// both backends: a Memcached dump is a multi-get and a restore adds,
	// but neither is the application's), "ping" (a
	// probe), or "other" (a command sent through Client.Redis that is none
	// of these; commands go-redis sends to set a connection up are not
	// counted). It names the round trip to the node: a Get that falls back
	// during a migration is a "get" on the new owner and a "get_multi" of
	// one key (with its TTL) on the old one.
	Op string
	// OK counts the calls the node answered, Errors those that failed.
	OK     int64
	Errors Errors
	// Hits and Misses count the keys that reads ("get", "get_multi") found
	// and did not find: for "get", one per answered call. A sweep's and a
	// check's reads ("sweep", "exists") count none, so that a hit rate
	// from these is the application's.
	Hits, Misses int64
	// Latency is the time of the calls that reached the network, answered or
	// not.
	Latency Histogram
}

// Calls returns every call counted: OK + Errors.Total().
func (s OpStats) Calls() int64 { return s.OK + s.Errors.Total() }

// Errors counts failed calls by cause.
type Errors struct {
	Timeout int64 // a dial, read or write timed out, or the context's deadline passed
	Refused int64 // the connection was refused
	Down    int64 // failed at once: the node was held down (ErrNodeDown)
	Other   int64 // anything else: a reset, an error reply, a cancelled context...
}

// Total returns the sum of the counts.
func (e Errors) Total() int64 { return e.Timeout + e.Refused + e.Down + e.Other }

// Histogram is a latency distribution: Counts[i] calls took at most
// Bounds[i] (and more than Bounds[i-1]), and the last count, one more than
// Bounds, those above every bound.
type Histogram struct {
	Bounds []time.Duration
	Counts []int64
	Sum    time.Duration
}

// Count returns the number of calls in h.
func (h Histogram) Count() int64 {
	var n int64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Quantile returns the upper bound of the bucket that holds quantile q (0 to
// 1) of the calls, as Prometheus would estimate it at best; 0 for an empty
// histogram, and the largest bound when q falls above it.
func (h Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := int64(q * float64(n))
	var seen int64
	for i, c := range h.Counts {
		seen += c
		if seen > rank || seen == n {
			return h.Bounds[min(i, len(h.Bounds)-1)]
		}
	}
	return h.Bounds[len(h.Bounds)-1]
}

// Hits returns the keys found on the node by every kind of read.
func (s NodeStats) Hits() int64 {
	var n int64
	for _, o := range s.Ops {
		n += o.Hits
	}
	return n
}

// Misses returns the keys not found on the node by every kind of read.
func (s NodeStats) Misses() int64 {
	var n int64
	for _, o := range s.Ops {
		n += o.Misses
	}
	return n
}

// Calls returns every call to the node.
func (s NodeStats) Calls() int64 {
	var n int64
	for _, o := range s.Ops {
		n += o.Calls()
	}
	return n
}

// Errors returns the node's failed calls of every kind, by cause.
func (s NodeStats) Errors() Errors {
	var e Errors
	for _, o := range s.Ops {
		e.Timeout += o.Errors.Timeout
		e.Refused += o.Errors.Refused
		e.Down += o.Errors.Down
		e.Other += o.Errors.Other
	}
	return e
}

// Op returns the counts of calls named op, zero if there were none.
func (s NodeStats) Op(op string) OpStats {
	for _, o := range s.Ops {
		if o.Op == op {
			return o
		}
	}
	return OpStats{Op: op}
}

// LatencyBounds returns the bucket bounds of every latency Histogram.
func LatencyBounds() []time.Duration { return slices.Clone(health.Bounds[:]) }

// opStats converts a node's counts of one kind of call.
func opStats(c health.Counts) OpStats {
	return OpStats{
		Op: c.Op.String(), OK: c.OK, Hits: c.Hits, Misses: c.Misses,
		Errors: Errors{Timeout: c.Errors[health.Timeout], Refused: c.Errors[health.Refused],
			Down: c.Errors[health.Down], Other: c.Errors[health.Other]},
		Latency: Histogram{Bounds: LatencyBounds(), Counts: slices.Clone(c.Latency[:]), Sum: c.LatencySum},
	}
}

// Stats returns the statistics of every node the client routes to, and of
// its migrations. Counting costs one atomic add per counter on each call;
// Options.DisableStats turns it off.
func (c *Client) Stats() Stats {
	var s Stats
	c.mu.Lock()
	s.Migrations, s.MigrationTotals = c.migrations, c.pastCounts
	if m := c.last.Load(); m != nil {
		s.MigrationTotals = s.MigrationTotals.Add(m.Counters.Snapshot())
	}
	c.mu.Unlock()
	s.Migration = c.Migration()
	s.Loads = c.LoadStats()
	s.Topology = c.TopologyInfo()
	st := c.state.Load()
	if st == nil {
		return s
	}
	for _, p := range st.listed() {
		ns := NodeStats{Node: p.Node, Up: true, Current: p.current, Old: p.old}
		if m := st.conns[ns.Node.Addr]; m != nil {
			ns.Up = !m.h.Down()
			for _, c := range m.h.Ops() {
				ns.Ops = append(ns.Ops, opStats(c))
			}
		}
		s.Nodes = append(s.Nodes, ns)
	}
	slices.SortFunc(s.Nodes, func(a, b NodeStats) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	return s
}
