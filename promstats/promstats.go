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
// The metrics, their labels, units and help are package metrics's, which
// reads the client's statistics as samples: otelstats exports the same to
// OpenTelemetry.
//
// This package is the only one of shardcache that imports the Prometheus
// client library: the client package does not.
package promstats

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/metrics"
)

// Source is what the collector reads: a *client.Client, or anything that
// reports the same statistics.
type Source = metrics.Source

// Metric names, exported for dashboards and alerts. They, their labels and
// their help are package metrics's, which otelstats exports too.
const (
	RequestsTotal          = metrics.RequestsTotal
	KeysReadTotal          = metrics.KeysReadTotal
	RequestDurationSeconds = metrics.RequestDurationSeconds
	NodeUp                 = metrics.NodeUp
	NodeWeight             = metrics.NodeWeight
	NodeInPlacement        = metrics.NodeInPlacement
	MigrationActive        = metrics.MigrationActive
	MigrationWindowEnd     = metrics.MigrationWindowEnd
	MigrationMovedRatio    = metrics.MigrationMovedRatio
	MigrationsTotal        = metrics.MigrationsTotal
)

// MigrationCounterName returns the metric of a migration.Snapshot field:
// "FallbackHits" is "shardcache_migration_fallback_hits_total".
func MigrationCounterName(field string) string { return metrics.MigrationCounterName(field) }

// LoadCounterName returns the metric of a client.LoadStats field: "Hits" is
// "shardcache_getorload_hits_total".
func LoadCounterName(field string) string { return metrics.LoadCounterName(field) }

// Collector is a prometheus.Collector over one client's Stats. Register it
// once per client; give each client its own constant labels (such as
// {"cache": "sessions"}) when a process has several.
type Collector struct {
	src   Source
	descs descs // of metrics.ClientMetrics
}

// descs are the descriptors of metrics' definitions, by name, and their
// order.
type descs struct {
	byName map[string]desc
	order  []*prometheus.Desc
}

type desc struct {
	*prometheus.Desc
	kind metrics.Kind
}

func newDescs(defs []metrics.Metric, constLabels prometheus.Labels) descs {
	d := descs{byName: map[string]desc{}}
	for _, m := range defs {
		x := desc{prometheus.NewDesc(m.Name, m.Help, m.Labels, constLabels), m.Kind}
		d.byName[m.Name] = x
		d.order = append(d.order, x.Desc)
	}
	return d
}

func (d descs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range d.order {
		ch <- x
	}
}

// metric converts a sample to a Prometheus metric.
func (d descs) metric(s metrics.Sample) prometheus.Metric {
	x := d.byName[s.Name]
	switch x.kind {
	case metrics.Counter:
		return prometheus.MustNewConstMetric(x.Desc, prometheus.CounterValue, s.Value, s.Labels...)
	case metrics.Histogram:
		return histogram(x.Desc, s.Histogram, s.Labels...)
	default:
		return prometheus.MustNewConstMetric(x.Desc, prometheus.GaugeValue, s.Value, s.Labels...)
	}
}

// New returns a collector of src's statistics, with constLabels (nil for
// none) on every metric.
func New(src Source, constLabels prometheus.Labels) *Collector {
	return &Collector{src: src, descs: newDescs(metrics.ClientMetrics(), constLabels)}
}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { c.descs.describe(ch) }

// Collect reads the client's Stats and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	metrics.Collect(c.src, func(s metrics.Sample) { ch <- c.descs.metric(s) })
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
