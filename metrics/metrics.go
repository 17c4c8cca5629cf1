// Package metrics defines the metrics a shardcache client's statistics are
// exported as, each once (its name, kind, unit, labels and help), and reads
// a client's statistics as samples of them: Collect from client.Stats,
// NearCacheStats and TopologyInfo at each scrape or collection, NodePoll
// from NodeStats in the background.
//
// promstats exports them to Prometheus, otelstats (a module of its own) to
// OpenTelemetry, both from here: the two cannot name, label or count a
// metric differently. An application reads client.Stats itself, or uses
// one of those; this package is for exporters.
//
// A metric's name is its Prometheus name (shardcache_requests_total), which
// otelstats uses as the instrument's name too: through OpenTelemetry's
// Prometheus exporter, whose translation leaves such a name as it is, the
// series are promstats's.
package metrics

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/migration"
)

// Kind is what a metric's values are.
type Kind int

const (
	// Counter counts since the client's New (a node's counts, since its
	// connection pool opened: client.Stats), or since the server started
	// (NodeMetrics): it only grows, and starts again from zero.
	Counter Kind = iota + 1
	// Gauge is a value now.
	Gauge
	// Histogram is a client.Histogram: calls counted by latency bucket.
	Histogram
)

// String returns the kind's name: counter, gauge or histogram.
func (k Kind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Histogram:
		return "histogram"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Metric is the definition of one metric.
type Metric struct {
	// Name is the metric's Prometheus name: shardcache_requests_total.
	Name string
	Kind Kind
	// Unit is the unit of its values, as OpenTelemetry writes it (UCUM):
	// "s" for a name ending in _seconds, "By" in _bytes, "1" in _ratio, ""
	// (a count, or a 0-or-1 state) otherwise.
	Unit string
	// Labels are the names of its labels, in the order of a Sample's
	// values: "node", "op", "result", "addr", "placement".
	Labels []string
	// Help says what it counts.
	Help string
}

// Sample is one value of a metric: one series, at the time it was read.
type Sample struct {
	// Name is the metric's.
	Name string
	// Labels are the values of the metric's labels, in the order of its
	// Labels.
	Labels []string
	// Value is a Counter's or a Gauge's value. A counter's is an int64's
	// (exact: below 2^53).
	Value float64
	// Histogram is a Histogram metric's value.
	Histogram client.Histogram
}

// The names of the metrics Collect reports, per node (label node, the ring
// name), exported for dashboards and alerts.
const (
	// RequestsTotal{node,op,result} counts calls; result is hit or miss for
	// get, ok for other answered calls, or the error: timeout, refused,
	// down, error. The op values are those of client.OpStats.Op.
	RequestsTotal = "shardcache_requests_total"
	// KeysReadTotal{node,op,result} counts the keys found (hit) or not
	// (miss) by get and get_multi.
	KeysReadTotal = "shardcache_keys_read_total"
	// RequestDurationSeconds{node,op} is the histogram of the calls that
	// reached the network.
	RequestDurationSeconds = "shardcache_request_duration_seconds"
	// NodeUp{node,addr} is 0 while the client holds the node down.
	NodeUp = "shardcache_node_up"
	// NodeWeight{node} is the node's weight in the current placement (or
	// the old one).
	NodeWeight = "shardcache_node_weight"
	// NodeInPlacement{node,placement} is 1 if the placement (current,
	// old) lists the node.
	NodeInPlacement = "shardcache_node_in_placement"
)

// The names of the migration metrics Collect reports; MigrationCounterName
// names the others.
const (
	MigrationActive     = "shardcache_migration_active"
	MigrationWindowEnd  = "shardcache_migration_window_end_timestamp_seconds"
	MigrationMovedRatio = "shardcache_migration_moved_ratio"
	MigrationsTotal     = "shardcache_migrations_total"
)

// The names of the near cache metrics (client.Options.NearCache), per node.
// A near hit is not a request to the node: it is in NearCacheHitsTotal
// alone, not in RequestsTotal.
const (
	NearCacheHitsTotal   = "shardcache_near_cache_hits_total"
	NearCacheMissesTotal = "shardcache_near_cache_misses_total"
	NearCacheEntries     = "shardcache_near_cache_entries"
	NearCacheBytes       = "shardcache_near_cache_bytes"
)

// The names of the topology metrics (client.Options.Topology). A client
// that follows no topology reports none of them.
const (
	TopologyVersion             = "shardcache_topology_version"
	TopologyRefusedTotal        = "shardcache_topology_refused_total"
	TopologySourceErrorsTotal   = "shardcache_topology_source_errors_total"
	TopologyLateTotal           = "shardcache_topology_late_total"
	TopologyRepairFailuresTotal = "shardcache_topology_repair_failures_total"
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

// Source is what Collect reads: a *client.Client, or anything that
// reports the same statistics.
type Source interface {
	Stats() client.Stats
}

// NearSource is a Source whose near cache statistics Collect reports too,
// as *client.Client's (nothing without Options.NearCache).
type NearSource interface {
	NearCacheStats() []client.NearCacheStats
}

// TopologySource is a Source whose topology Collect reports too, as
// *client.Client's (nothing unless it follows a topology).
type TopologySource interface {
	TopologyInfo() client.TopologyStatus
}

// metric returns a definition, its unit from its name.
func metric(name string, kind Kind, help string, labels ...string) Metric {
	unit, base := "", strings.TrimSuffix(name, "_total")
	switch {
	case strings.HasSuffix(base, "_seconds"):
		unit = "s"
	case strings.HasSuffix(base, "_bytes"):
		unit = "By"
	case strings.HasSuffix(base, "_ratio"):
		unit = "1"
	}
	return Metric{Name: name, Kind: kind, Unit: unit, Labels: labels, Help: help}
}

// counterField is one int64 field of a struct of counters
// (migration.Snapshot, client.LoadStats) and its metric.
type counterField struct {
	field int // index in the struct
	name  string
}

// counterFields returns the counter of every int64 field of T, named by
// name, and appends their definitions to defs.
func counterFields[T any](defs *[]Metric, name func(string) string, help string) []counterField {
	var out []counterField
	t := reflect.TypeFor[T]()
	for i := range t.NumField() {
		if f := t.Field(i); f.Type.Kind() == reflect.Int64 {
			out = append(out, counterField{field: i, name: name(f.Name)})
			*defs = append(*defs, metric(name(f.Name), Counter, t.String()+"."+f.Name+help))
		}
	}
	return out
}

var (
	clientDefs                      []Metric // ClientMetrics
	migrationCounters, loadCounters []counterField
)

func init() {
	clientDefs = []Metric{
		metric(RequestsTotal, Counter, "Calls to a cache node, by kind of call and result: hit or miss (get), ok (other answered calls), or timeout, refused, down, error.", "node", "op", "result"),
		metric(KeysReadTotal, Counter, "Keys read from a cache node, found (hit) or not (miss).", "node", "op", "result"),
		metric(RequestDurationSeconds, Histogram, "Time of the calls to a cache node that reached the network.", "node", "op"),
		metric(NodeUp, Gauge, "1 while the client sends calls to the node, 0 while it holds it down after connection failures.", "node", "addr"),
		metric(NodeWeight, Gauge, "The node's weight in the placement.", "node"),
		metric(NodeInPlacement, Gauge, "1 if the placement (current, or old during a migration) lists the node.", "node", "placement"),
		metric(MigrationActive, Gauge, "1 while a migration's window is open: reads fall back to old owners, writes reach both."),
		metric(MigrationWindowEnd, Gauge, "When the latest migration's window ends (0: no migration yet)."),
		metric(MigrationMovedRatio, Gauge, "Share of keys whose owner the latest migration changes."),
		metric(MigrationsTotal, Counter, "Migrations the client started."),
	}
	migrationCounters = counterFields[migration.Snapshot](&clientDefs, MigrationCounterName, ", summed over every migration of the client.")
	loadCounters = counterFields[client.LoadStats](&clientDefs, LoadCounterName, ": what GetOrLoad and GetMultiOrLoad did.")
	clientDefs = append(clientDefs,
		metric(NearCacheHitsTotal, Counter, "Gets answered from the process's near cache of the node, without a request to it.", "node"),
		metric(NearCacheMissesTotal, Counter, "Gets the near cache of the node could not answer, which went to the node.", "node"),
		metric(NearCacheEntries, Gauge, "Replies the near cache of the node holds.", "node"),
		metric(NearCacheBytes, Gauge, "Estimated size of the replies the near cache of the node holds.", "node"),
		metric(TopologyVersion, Gauge, "The version of the topology the client runs (etcd's revision, the file's version, "+
			"the DNS answer's digest): processes of one fleet on different versions are mid-rollout."),
		metric(TopologyRefusedTotal, Counter, "Topologies the client refused (topology.Validate: no nodes, duplicates, too much weight removed), keeping the last one."),
		metric(TopologySourceErrorsTotal, Counter, "Errors the topology source reported (a DNS answer without nodes, a broken file, a missing key); the client keeps its topology."),
		metric(TopologyLateTotal, Counter, "Topologies the client received at or after their migration's start, held before it until their repair."),
		metric(TopologyRepairFailuresTotal, Counter, "Repairs after a late topology that could not complete (the write log did not reach back, "+
			"a new owner did not answer): the client read the old placement alone until the window's end."),
	)
}

// ClientMetrics returns the definition of every metric Collect reports,
// those of the near cache and the topology included, in a fixed order.
func ClientMetrics() []Metric { return clone(clientDefs) }

func clone(defs []Metric) []Metric {
	out := make([]Metric, len(defs))
	for i, d := range defs {
		d.Labels = append([]string(nil), d.Labels...)
		out[i] = d
	}
	return out
}

// Collect reads src's statistics and emits a sample of each series: per
// node, per kind of call, for the migrations and GetOrLoad, and, when src
// is a NearSource or a TopologySource (a *client.Client is both), for its
// near cache and its topology. Nodes that left the client's placements are
// not reported; a client that follows no topology reports no topology
// metric, one without a near cache no near cache metric, and a migration
// moved ratio is reported only once known.
func Collect(src Source, emit func(Sample)) {
	s := src.Stats()
	counter := func(name string, v int64, labels ...string) {
		emit(Sample{Name: name, Labels: labels, Value: float64(v)})
	}
	gauge := func(name string, v float64, labels ...string) {
		emit(Sample{Name: name, Labels: labels, Value: v})
	}
	for _, n := range s.Nodes {
		name := n.Node.Name
		gauge(NodeUp, b2f(n.Up), name, n.Node.Addr)
		gauge(NodeWeight, float64(n.Node.Weight), name)
		gauge(NodeInPlacement, b2f(n.Current), name, "current")
		gauge(NodeInPlacement, b2f(n.Old), name, "old")
		for _, o := range n.Ops {
			if o.Op == "get" {
				counter(RequestsTotal, o.Hits, name, o.Op, "hit")
				counter(RequestsTotal, o.Misses, name, o.Op, "miss")
			} else {
				counter(RequestsTotal, o.OK, name, o.Op, "ok")
			}
			counter(RequestsTotal, o.Errors.Timeout, name, o.Op, "timeout")
			counter(RequestsTotal, o.Errors.Refused, name, o.Op, "refused")
			counter(RequestsTotal, o.Errors.Down, name, o.Op, "down")
			counter(RequestsTotal, o.Errors.Other, name, o.Op, "error")
			if o.Op == "get" || o.Op == "get_multi" {
				counter(KeysReadTotal, o.Hits, name, o.Op, "hit")
				counter(KeysReadTotal, o.Misses, name, o.Op, "miss")
			}
			emit(Sample{Name: RequestDurationSeconds, Labels: []string{name, o.Op}, Histogram: o.Latency})
		}
	}
	gauge(MigrationActive, b2f(s.Migration.Active))
	end := 0.0
	if !s.Migration.End.IsZero() {
		end = float64(s.Migration.End.UnixNano()) / 1e9
	}
	gauge(MigrationWindowEnd, end)
	if m := s.Migration.Moved; !math.IsNaN(m) {
		gauge(MigrationMovedRatio, m)
	}
	counter(MigrationsTotal, s.Migrations)
	totals := reflect.ValueOf(s.MigrationTotals)
	for _, c := range migrationCounters {
		counter(c.name, totals.Field(c.field).Int())
	}
	loads := reflect.ValueOf(s.Loads)
	for _, c := range loadCounters {
		counter(c.name, loads.Field(c.field).Int())
	}
	if ns, ok := src.(NearSource); ok {
		for _, n := range ns.NearCacheStats() {
			name := n.Node.Name
			counter(NearCacheHitsTotal, n.Hits, name)
			counter(NearCacheMissesTotal, n.Misses, name)
			gauge(NearCacheEntries, float64(n.Entries), name)
			gauge(NearCacheBytes, float64(n.Bytes), name)
		}
	}
	if ts, ok := src.(TopologySource); ok {
		if t := ts.TopologyInfo(); t.Following {
			gauge(TopologyVersion, float64(t.Version))
			counter(TopologyRefusedTotal, t.Refused)
			counter(TopologySourceErrorsTotal, t.SourceErrors)
			counter(TopologyLateTotal, t.Late)
			counter(TopologyRepairFailuresTotal, t.RepairFailures)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
