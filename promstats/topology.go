package promstats

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcache/shardcache/client"
)

// Topology metric names (client.Options.Topology), exported for dashboards
// and alerts. A client that follows no topology reports none of them.
const (
	TopologyVersion             = "shardcache_topology_version"
	TopologyRefusedTotal        = "shardcache_topology_refused_total"
	TopologySourceErrorsTotal   = "shardcache_topology_source_errors_total"
	TopologyLateTotal           = "shardcache_topology_late_total"
	TopologyRepairFailuresTotal = "shardcache_topology_repair_failures_total"
)

// TopologySource is a Source whose topology the collector exports too, as
// *client.Client's (nothing unless it follows a topology).
type TopologySource interface {
	TopologyInfo() client.TopologyStatus
}

// topologyDescs are the topology metrics.
type topologyDescs struct{ version, refused, sourceErrors, late, repairFailures *prometheus.Desc }

func newTopologyDescs(d func(name, help string, labels ...string) *prometheus.Desc) topologyDescs {
	return topologyDescs{
		version: d(TopologyVersion, "The version of the topology the client runs (etcd's revision, the file's version, "+
			"the DNS answer's digest): processes of one fleet on different versions are mid-rollout."),
		refused:      d(TopologyRefusedTotal, "Topologies the client refused (topology.Validate: no nodes, duplicates, too much weight removed), keeping the last one."),
		sourceErrors: d(TopologySourceErrorsTotal, "Errors the topology source reported (a DNS answer without nodes, a broken file, a missing key); the client keeps its topology."),
		late:         d(TopologyLateTotal, "Topologies the client received at or after their migration's start, held before it until their repair."),
		repairFailures: d(TopologyRepairFailuresTotal, "Repairs after a late topology that could not complete (the write log did not reach back, "+
			"a new owner did not answer): the client read the old placement alone until the window's end."),
	}
}

func (t topologyDescs) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{t.version, t.refused, t.sourceErrors, t.late, t.repairFailures} {
		ch <- d
	}
}

// collect sends src's topology metrics, if it follows a topology.
func (t topologyDescs) collect(src Source, ch chan<- prometheus.Metric) {
	ts, ok := src.(TopologySource)
	if !ok {
		return
	}
	s := ts.TopologyInfo()
	if !s.Following {
		return
	}
	ch <- prometheus.MustNewConstMetric(t.version, prometheus.GaugeValue, float64(s.Version))
	for _, c := range []struct {
		d *prometheus.Desc
		v int64
	}{{t.refused, s.Refused}, {t.sourceErrors, s.SourceErrors}, {t.late, s.Late}, {t.repairFailures, s.RepairFailures}} {
		ch <- prometheus.MustNewConstMetric(c.d, prometheus.CounterValue, float64(c.v))
	}
}
