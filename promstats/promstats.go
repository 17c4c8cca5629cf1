// Package promstats exports a shardcache client's statistics to Prometheus:
// a prometheus.Collector that reads client.Stats at each scrape.
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(promstats.New(c, nil))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// It exports, per node (label node, the ring name):
//
//	shardcache_requests_total{node,op,result}        calls; result is hit or miss for get,
//	                                                 ok for other answered calls, or the
//	                                                 error: timeout, refused, down, error
//	shardcache_keys_read_total{node,op,result}       keys found (hit) or not (miss) by get
//	                                                 and get_multi (the application's
//	                                                 reads: a sweep's are op sweep, and
//	                                                 count no keys)
//	shardcache_request_duration_seconds{node,op}     histogram of the calls that reached
//	                                                 the network
//	shardcache_node_up{node,addr}                    0 while the client holds the node down
//	shardcache_node_weight{node}                     its weight in the current placement
//	                                                 (or the old one)
//	shardcache_node_in_placement{node,placement}     1 if placement (current, old) lists it
//
// and for the client's migrations:
//
//	shardcache_migration_active                      1 while a migration's window is open
//	shardcache_migration_window_end_timestamp_seconds  end of the latest window
//	shardcache_migration_moved_ratio                 share of keys the latest one moves
//	shardcache_migrations_total                      migrations started
//	shardcache_migration_<counter>_total             each counter of migration.Snapshot,
//	                                                 summed over every migration: new_hits,
//	                                                 fallback_hits, fallback_misses,
//	                                                 fallback_errors, backfills, ...
//
// and for GetOrLoad and GetMultiOrLoad:
//
//	shardcache_getorload_<counter>_total             each counter of client.LoadStats: hits,
//	                                                 negative_hits, misses, loads, throttled, ...
//
// and, for a client that follows a topology (client.Options.Topology),
// from its TopologyInfo:
//
//	shardcache_topology_version                      the version it runs: the processes of
//	                                                 a fleet differ while a rollout is
//	                                                 under way
//	shardcache_topology_refused_total                topologies refused, the last one kept
//	shardcache_topology_source_errors_total          errors of the source (NXDOMAIN, ...)
//	shardcache_topology_late_total                   topologies received after their start
//	shardcache_topology_repair_failures_total        repairs after a late one that failed
//
// Nodes that leave the client's placements are no longer reported. The op
// values are those of client.OpStats.Op.
//
// NewNodeCollector exports what each node's server holds (items, memory
// and its limit, evictions, the server's own hits and misses:
// client.NodeStats), from a poll in a goroutine of its own, every 30
// seconds by default, never at scrape time (nodes.go lists its metrics):
//
//	nodes := promstats.NewNodeCollector(c, promstats.NodeOptions{})
//	defer nodes.Close()
//	reg.MustRegister(nodes)
//
// This package is the only one of shardcache that imports the Prometheus
// client library: the client package does not.
package promstats

import (
	"math"
	"reflect"
	"strings"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/migration"
)

// Source is what the collector reads: a *client.Client, or anything that
// reports the same statistics.
type Source interface {
	Stats() client.Stats
}

// Metric names, exported for dashboards and alerts.
const (
	RequestsTotal          = "shardcache_requests_total"
	KeysReadTotal          = "shardcache_keys_read_total"
	RequestDurationSeconds = "shardcache_request_duration_seconds"
	NodeUp                 = "shardcache_node_up"
	NodeWeight             = "shardcache_node_weight"
	NodeInPlacement        = "shardcache_node_in_placement"
	MigrationActive        = "shardcache_migration_active"
	MigrationWindowEnd     = "shardcache_migration_window_end_timestamp_seconds"
	MigrationMovedRatio    = "shardcache_migration_moved_ratio"
	MigrationsTotal        = "shardcache_migrations_total"
)

// MigrationCounterName returns the metric of a migration.Snapshot field:
// "FallbackHits" is "shardcache_migration_fallback_hits_total".
func MigrationCounterName(field string) string { return counterName("shardcache_migration_", field) }

// LoadCounterName returns the metric of a client.LoadStats field: "Hits" is
// "shardcache_getorload_hits_total".
func LoadCounterName(field string) string { return counterName("shardcache_getorload_", field) }

// counterName is prefix, field in snake case, and "_total".
func counterName(prefix, field string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for i, r := range field {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	b.WriteString("_total")
	return b.String()
}

// Collector is a prometheus.Collector over one client's Stats. Register it
// once per client; give each client its own constant labels (such as
// {"cache": "sessions"}) when a process has several.
type Collector struct {
	src Source

	requests, keys, duration, up, weight, placement *prometheus.Desc
	active, windowEnd, moved, migrations            *prometheus.Desc
	counters, loads                                 []counterDesc
	near                                            nearDescs     // nearcache.go
	topology                                        topologyDescs // topology.go
}

// counterDesc is one int64 field of a struct of counters (migration.Snapshot,
// client.LoadStats) and its metric.
type counterDesc struct {
	field int // index in the struct
	desc  *prometheus.Desc
}

// counterDescs describes every int64 field of T, named by name.
func counterDescs[T any](d func(name, help string, labels ...string) *prometheus.Desc, name func(string) string, help string) []counterDesc {
	var out []counterDesc
	t := reflect.TypeFor[T]()
	for i := range t.NumField() {
		if f := t.Field(i); f.Type.Kind() == reflect.Int64 {
			out = append(out, counterDesc{field: i, desc: d(name(f.Name), t.String()+"."+f.Name+help)})
		}
	}
	return out
}

// New returns a collector of src's statistics, with constLabels (nil for
// none) on every metric.
func New(src Source, constLabels prometheus.Labels) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, constLabels)
	}
	c := &Collector{
		src:        src,
		requests:   d(RequestsTotal, "Calls to a cache node, by kind of call and result: hit or miss (get), ok (other answered calls), or timeout, refused, down, error.", "node", "op", "result"),
		keys:       d(KeysReadTotal, "Keys read from a cache node, found (hit) or not (miss).", "node", "op", "result"),
		duration:   d(RequestDurationSeconds, "Time of the calls to a cache node that reached the network.", "node", "op"),
		up:         d(NodeUp, "1 while the client sends calls to the node, 0 while it holds it down after connection failures.", "node", "addr"),
		weight:     d(NodeWeight, "The node's weight in the placement.", "node"),
		placement:  d(NodeInPlacement, "1 if the placement (current, or old during a migration) lists the node.", "node", "placement"),
		active:     d(MigrationActive, "1 while a migration's window is open: reads fall back to old owners, writes reach both."),
		windowEnd:  d(MigrationWindowEnd, "When the latest migration's window ends (0: no migration yet)."),
		moved:      d(MigrationMovedRatio, "Share of keys whose owner the latest migration changes."),
		migrations: d(MigrationsTotal, "Migrations the client started."),
	}
	c.counters = counterDescs[migration.Snapshot](d, MigrationCounterName, ", summed over every migration of the client.")
	c.loads = counterDescs[client.LoadStats](d, LoadCounterName, ": what GetOrLoad and GetMultiOrLoad did.")
	c.near = newNearDescs(d)
	c.topology = newTopologyDescs(d)
	return c
}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.keys, c.duration, c.up, c.weight, c.placement,
		c.active, c.windowEnd, c.moved, c.migrations} {
		ch <- d
	}
	for _, cd := range append(c.counters, c.loads...) {
		ch <- cd.desc
	}
	c.near.describe(ch)
	c.topology.describe(ch)
}

// Collect reads the client's Stats and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, n := range s.Nodes {
		name := n.Node.Name
		gauge(c.up, b2f(n.Up), name, n.Node.Addr)
		gauge(c.weight, float64(n.Node.Weight), name)
		gauge(c.placement, b2f(n.Current), name, "current")
		gauge(c.placement, b2f(n.Old), name, "old")
		for _, o := range n.Ops {
			if o.Op == "get" {
				counter(c.requests, o.Hits, name, o.Op, "hit")
				counter(c.requests, o.Misses, name, o.Op, "miss")
			} else {
				counter(c.requests, o.OK, name, o.Op, "ok")
			}
			counter(c.requests, o.Errors.Timeout, name, o.Op, "timeout")
			counter(c.requests, o.Errors.Refused, name, o.Op, "refused")
			counter(c.requests, o.Errors.Down, name, o.Op, "down")
			counter(c.requests, o.Errors.Other, name, o.Op, "error")
			if o.Op == "get" || o.Op == "get_multi" {
				counter(c.keys, o.Hits, name, o.Op, "hit")
				counter(c.keys, o.Misses, name, o.Op, "miss")
			}
			ch <- histogram(c.duration, o.Latency, name, o.Op)
		}
	}
	gauge(c.active, b2f(s.Migration.Active))
	end := 0.0
	if !s.Migration.End.IsZero() {
		end = float64(s.Migration.End.UnixNano()) / 1e9
	}
	gauge(c.windowEnd, end)
	if m := s.Migration.Moved; !math.IsNaN(m) {
		gauge(c.moved, m)
	}
	counter(c.migrations, s.Migrations)
	totals := reflect.ValueOf(s.MigrationTotals)
	for _, cd := range c.counters {
		counter(cd.desc, totals.Field(cd.field).Int())
	}
	loads := reflect.ValueOf(s.Loads)
	for _, cd := range c.loads {
		counter(cd.desc, loads.Field(cd.field).Int())
	}
	c.near.collect(c.src, ch)
	c.topology.collect(c.src, ch)
}

// histogram converts a latency histogram to Prometheus's cumulative buckets,
// in seconds.
func histogram(d *prometheus.Desc, h client.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		cum += uint64(h.Counts[i])
		buckets[b.Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(d, uint64(h.Count()), h.Sum.Seconds(), buckets, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
