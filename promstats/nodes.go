package promstats

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcache/shardcache/client"
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
	NodeItems            = "shardcache_node_items"
	NodeMemoryBytes      = "shardcache_node_memory_bytes"
	NodeMemoryLimitBytes = "shardcache_node_memory_limit_bytes"
	NodeEvictionsTotal   = "shardcache_node_evictions_total"
	NodeServerHitsTotal  = "shardcache_node_server_hits_total"
	NodeServerMisses     = "shardcache_node_server_misses_total"
	NodePollErrorsTotal  = "shardcache_node_poll_errors_total"
	NodePollTimestamp    = "shardcache_node_poll_timestamp_seconds"
)

// DefaultNodeInterval is how often a NodeCollector polls, by default.
const DefaultNodeInterval = 30 * time.Second

// NodeSource is what a NodeCollector polls: a *client.Client.
type NodeSource interface {
	NodeStats(ctx context.Context) ([]client.NodeUsage, error)
}

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
	src      NodeSource
	interval time.Duration

	items, bytes, limit, evictions, hits, misses, errors, stamp *prometheus.Desc

	polled sync.Mutex             // one poll at a time
	mu     sync.Mutex             // guards last and fails: held by a poll only once it has read the servers
	last   map[string]nodeReading // by node name; the latest successful reading
	fails  map[string]int64       // poll errors by node name, 0 for every node polled

	stop context.CancelFunc
	done chan struct{}
}

// nodeReading is one node's latest successful poll.
type nodeReading struct {
	u  client.NodeUsage
	at time.Time
}

// NewNodeCollector returns a collector of src's node usage, and starts its
// poll: the first at once, then every interval.
func NewNodeCollector(src NodeSource, opts NodeOptions) *NodeCollector {
	if opts.Interval <= 0 {
		opts.Interval = DefaultNodeInterval
	}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"node"}, opts.ConstLabels)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &NodeCollector{
		src: src, interval: opts.Interval,
		items:     d(NodeItems, "Keys the node's server holds (Redis: those of the client's database), at the latest poll."),
		bytes:     d(NodeMemoryBytes, "Memory the node's data takes: Redis used_memory, Memcached bytes, at the latest poll."),
		limit:     d(NodeMemoryLimitBytes, "The memory limit the node's server evicts at: Redis maxmemory (absent without one), Memcached limit_maxbytes."),
		evictions: d(NodeEvictionsTotal, "Keys the node's server evicted for room since it started."),
		hits:      d(NodeServerHitsTotal, "Reads the node's server answered with a value since it started, every client's (Redis keyspace_hits, Memcached get_hits)."),
		misses:    d(NodeServerMisses, "Reads the node's server found no value for since it started, every client's (Redis keyspace_misses, Memcached get_misses)."),
		errors:    d(NodePollErrorsTotal, "Polls of the node's server usage that failed (down, timed out, refused)."),
		stamp:     d(NodePollTimestamp, "When the node's usage exported was read."),
		last:      map[string]nodeReading{}, fails: map[string]int64{},
		stop: cancel, done: make(chan struct{}),
	}
	go c.run(ctx)
	return c
}

// run polls until ctx ends.
func (c *NodeCollector) run(ctx context.Context) {
	defer close(c.done)
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		c.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Poll polls the nodes now, on the caller's goroutine, as the background
// poll does: for a test, or an application that wants values before its
// first scrape. Polls run one at a time.
func (c *NodeCollector) Poll(ctx context.Context) {
	c.polled.Lock()
	defer c.polled.Unlock()
	usage, err := c.src.NodeStats(ctx) // each node's error is in its NodeUsage
	if usage == nil && err != nil && ctx.Err() != nil {
		return // stopped by Close: the latest values stay
	}
	// A client closed has no nodes (ErrClosed): nothing left to export.
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[string]bool, len(usage))
	for _, u := range usage {
		name := u.Node.Name
		seen[name] = true
		c.fails[name] += 0 // exported from the first poll, so that increase() sees the first failure
		if u.Err != nil {
			c.fails[name]++
			delete(c.last, name)
			continue
		}
		c.last[name] = nodeReading{u: u, at: now}
	}
	for name := range c.last { // nodes that left the placements
		if !seen[name] {
			delete(c.last, name)
		}
	}
	for name := range c.fails {
		if !seen[name] {
			delete(c.fails, name)
		}
	}
}

// Close stops the poll and waits for it to end. The collector then exports
// the latest poll's values.
func (c *NodeCollector) Close() {
	c.stop()
	<-c.done
}

// Describe sends the descriptors of every metric.
func (c *NodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.items, c.bytes, c.limit, c.evictions, c.hits, c.misses, c.errors, c.stamp} {
		ch <- d
	}
}

// Collect sends the latest poll's metrics; it reads no server.
func (c *NodeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64, name string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, name)
	}
	for name, r := range c.last {
		u := r.u
		metric(c.items, prometheus.GaugeValue, float64(u.Items), name)
		metric(c.bytes, prometheus.GaugeValue, float64(u.Bytes), name)
		if u.MemoryLimit > 0 {
			metric(c.limit, prometheus.GaugeValue, float64(u.MemoryLimit), name)
		}
		metric(c.evictions, prometheus.CounterValue, float64(u.Evictions), name)
		metric(c.hits, prometheus.CounterValue, float64(u.Hits), name)
		metric(c.misses, prometheus.CounterValue, float64(u.Misses), name)
		metric(c.stamp, prometheus.GaugeValue, float64(r.at.UnixNano())/1e9, name)
	}
	for name, n := range c.fails {
		metric(c.errors, prometheus.CounterValue, float64(n), name)
	}
}
