package promstats

import "github.com/shardcache/shardcache/metrics"

// Topology metric names (client.Options.Topology), exported for dashboards
// and alerts. A client that follows no topology reports none of them.
const (
	TopologyVersion             = metrics.TopologyVersion
	TopologyRefusedTotal        = metrics.TopologyRefusedTotal
	TopologySourceErrorsTotal   = metrics.TopologySourceErrorsTotal
	TopologyLateTotal           = metrics.TopologyLateTotal
	TopologyRepairFailuresTotal = metrics.TopologyRepairFailuresTotal
)

// TopologySource is a Source whose topology the collector exports too, as
// *client.Client's (nothing unless it follows a topology).
type TopologySource = metrics.TopologySource
