package promstats

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcache/shardcache/metrics"
)

// What the servers hold, from client.NodeStats, exported by a
// NodeCollector (label node, the ring name):
//
//	shardcache_node_items{node}                  keys the server holds
//	shardcache_node_memory_bytes{node}           memory the data takes (Redis used_memory,
//	                                             Memcached bytes)
//	shardcache_node_memory_limit_bytes{node}     the limit it evicts at; absent for a Redis
//	                                             without maxmemory, so that a ratio over it
//	                                             has no series rather than an infinite one
//	shardcache_node_evictions_total{node}        keys evicted since the server started
//	shardcache_node_server_hits_total{node}      reads the server answered with a value, every
//	shardcache_node_server_misses_total{node}    client's (keyspace_hits, get_hits), and not
//	shardcache_node_poll_errors_total{node}      polls of the node that failed
//	shardcache_node_poll_timestamp_seconds{node} when the values above were read
//
// A node whose latest poll failed exports only its poll errors until a
// poll succeeds: no value is older than one interval, and a node the
// client holds down is not read at all (client.ErrNodeDown). The server's
// counters restart with the server; rate() reads that as a reset.
const (
	NodeItems            = metrics.NodeItems
	NodeMemoryBytes      = metrics.NodeMemoryBytes
	NodeMemoryLimitBytes = metrics.NodeMemoryLimitBytes
	NodeEvictionsTotal   = metrics.NodeEvictionsTotal
	NodeServerHitsTotal  = metrics.NodeServerHitsTotal
	NodeServerMisses     = metrics.NodeServerMisses
	NodePollErrorsTotal  = metrics.NodePollErrorsTotal
	NodePollTimestamp    = metrics.NodePollTimestamp
)

// DefaultNodeInterval is how often a NodeCollector polls, by default.
const DefaultNodeInterval = metrics.DefaultNodeInterval

// NodeSource is what a NodeCollector polls: a *client.Client.
type NodeSource = metrics.NodeSource

// NodeOptions configures a NodeCollector. The zero value is usable.
type NodeOptions struct {
	// Interval is the time between polls; default DefaultNodeInterval.
	// Keep it under twice the scrape interval, so that rate() over
	// Grafana's $__rate_interval sees the counters move.
	Interval time.Duration
	// ConstLabels are put on every metric, as New's.
	ConstLabels prometheus.Labels
}

// NodeCollector is a prometheus.Collector of what each node's server holds
// (client.NodeStats), polled in a goroutine of its own every interval: a
// scrape reads the latest poll and never waits for a server. Close stops
// the poll. Register it beside New's collector of the same client.
type NodeCollector struct {
	poll  *metrics.NodePoll
	descs descs // of metrics.NodeMetrics
}

// NewNodeCollector returns a collector of src's node usage, and starts its
// poll: the first at once, then every interval.
func NewNodeCollector(src NodeSource, opts NodeOptions) *NodeCollector {
	return &NodeCollector{
		descs: newDescs(metrics.NodeMetrics(), opts.ConstLabels),
		poll:  metrics.NewNodePoll(src, opts.Interval),
	}
}

// Poll polls the nodes now, on the caller's goroutine, as the background
// poll does: for a test, or an application that wants values before its
// first scrape. Polls run one at a time.
func (c *NodeCollector) Poll(ctx context.Context) { c.poll.Poll(ctx) }

// Close stops the poll and waits for it to end. The collector then exports
// the latest poll's values.
func (c *NodeCollector) Close() { c.poll.Close() }

// Describe sends the descriptors of every metric.
func (c *NodeCollector) Describe(ch chan<- *prometheus.Desc) { c.descs.describe(ch) }

// Collect sends the latest poll's metrics; it reads no server.
func (c *NodeCollector) Collect(ch chan<- prometheus.Metric) {
	c.poll.Collect(func(s metrics.Sample) { ch <- c.descs.metric(s) })
}
