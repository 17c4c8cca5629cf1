package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/shardcache/shardcache/client"
)

// The names of the metrics of what each node's server holds (client.NodeStats),
// which a NodePoll reports, per node (label node, the ring name):
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
// A node whose latest poll failed reports only its poll errors until a
// poll succeeds: no value is older than one interval, and a node the
// client holds down is not read at all (client.ErrNodeDown). The server's
// counters restart with the server; a rate reads that as a reset.
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

var nodeDefs = []Metric{
	metric(NodeItems, Gauge, "Keys the node's server holds (Redis: those of the client's database), at the latest poll.", "node"),
	metric(NodeMemoryBytes, Gauge, "Memory the node's data takes: Redis used_memory, Memcached bytes, at the latest poll.", "node"),
	metric(NodeMemoryLimitBytes, Gauge, "The memory limit the node's server evicts at: Redis maxmemory (absent without one), Memcached limit_maxbytes.", "node"),
	metric(NodeEvictionsTotal, Counter, "Keys the node's server evicted for room since it started.", "node"),
	metric(NodeServerHitsTotal, Counter, "Reads the node's server answered with a value since it started, every client's (Redis keyspace_hits, Memcached get_hits).", "node"),
	metric(NodeServerMisses, Counter, "Reads the node's server found no value for since it started, every client's (Redis keyspace_misses, Memcached get_misses).", "node"),
	metric(NodePollErrorsTotal, Counter, "Polls of the node's server usage that failed (down, timed out, refused).", "node"),
	metric(NodePollTimestamp, Gauge, "When the node's usage exported was read.", "node"),
}

// NodeMetrics returns the definition of every metric a NodePoll reports.
func NodeMetrics() []Metric { return clone(nodeDefs) }

// DefaultNodeInterval is how often a NodePoll polls, by default.
const DefaultNodeInterval = 30 * time.Second

// NodeSource is what a NodePoll polls: a *client.Client.
type NodeSource interface {
	NodeStats(ctx context.Context) ([]client.NodeUsage, error)
}

// NodePoll polls what each node's server holds (client.NodeStats) in a
// goroutine of its own, every interval, and keeps the latest reading:
// Collect reports it and never waits for a server. Close stops the poll.
type NodePoll struct {
	src      NodeSource
	interval time.Duration

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

// NewNodePoll starts polling src: the first poll at once, then every
// interval (DefaultNodeInterval if 0 or less).
func NewNodePoll(src NodeSource, interval time.Duration) *NodePoll {
	if interval <= 0 {
		interval = DefaultNodeInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &NodePoll{
		src: src, interval: interval,
		last: map[string]nodeReading{}, fails: map[string]int64{},
		stop: cancel, done: make(chan struct{}),
	}
	go p.run(ctx)
	return p
}

// run polls until ctx ends.
func (p *NodePoll) run(ctx context.Context) {
	defer close(p.done)
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		p.Poll(ctx)
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
func (p *NodePoll) Poll(ctx context.Context) {
	p.polled.Lock()
	defer p.polled.Unlock()
	usage, err := p.src.NodeStats(ctx) // each node's error is in its NodeUsage
	if usage == nil && err != nil && ctx.Err() != nil {
		return // stopped by Close: the latest values stay
	}
	// A client closed has no nodes (ErrClosed): nothing left to report.
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := make(map[string]bool, len(usage))
	for _, u := range usage {
		name := u.Node.Name
		seen[name] = true
		p.fails[name] += 0 // reported from the first poll, so that an increase sees the first failure
		if u.Err != nil {
			p.fails[name]++
			delete(p.last, name)
			continue
		}
		p.last[name] = nodeReading{u: u, at: now}
	}
	for name := range p.last { // nodes that left the placements
		if !seen[name] {
			delete(p.last, name)
		}
	}
	for name := range p.fails {
		if !seen[name] {
			delete(p.fails, name)
		}
	}
}

// Close stops the poll and waits for it to end. Collect then reports the
// latest poll's values.
func (p *NodePoll) Close() {
	p.stop()
	<-p.done
}

// Collect emits a sample of each series of the latest poll; it reads no
// server.
func (p *NodePoll) Collect(emit func(Sample)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sample := func(name string, v float64, node string) {
		emit(Sample{Name: name, Labels: []string{node}, Value: v})
	}
	for node, r := range p.last {
		u := r.u
		sample(NodeItems, float64(u.Items), node)
		sample(NodeMemoryBytes, float64(u.Bytes), node)
		if u.MemoryLimit > 0 {
			sample(NodeMemoryLimitBytes, float64(u.MemoryLimit), node)
		}
		sample(NodeEvictionsTotal, float64(u.Evictions), node)
		sample(NodeServerHitsTotal, float64(u.Hits), node)
		sample(NodeServerMisses, float64(u.Misses), node)
		sample(NodePollTimestamp, float64(r.at.UnixNano())/1e9, node)
	}
	for node, n := range p.fails {
		sample(NodePollErrorsTotal, float64(n), node)
	}
}
