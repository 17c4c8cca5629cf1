package promstats

import "github.com/shardcache/shardcache/metrics"

// Near cache metric names (client.Options.NearCache), exported for
// dashboards and alerts. A near hit is not a request to the node: it is in
// NearCacheHitsTotal alone, not in RequestsTotal.
const (
	NearCacheHitsTotal   = metrics.NearCacheHitsTotal
	NearCacheMissesTotal = metrics.NearCacheMissesTotal
	NearCacheEntries     = metrics.NearCacheEntries
	NearCacheBytes       = metrics.NearCacheBytes
)

// NearSource is a Source whose near cache statistics the collector exports
// too, as *client.Client's (nothing without Options.NearCache).
type NearSource = metrics.NearSource
