package promstats

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcache/shardcache/client"
)

// Near cache metric names (client.Options.NearCache), exported for
// dashboards and alerts. A near hit is not a request to the node: it is in
// NearCacheHitsTotal alone, not in RequestsTotal.
const (
	NearCacheHitsTotal   = "shardcache_near_cache_hits_total"
	NearCacheMissesTotal = "shardcache_near_cache_misses_total"
	NearCacheEntries     = "shardcache_near_cache_entries"
	NearCacheBytes       = "shardcache_near_cache_bytes"
)

// NearSource is a Source whose near cache statistics the collector exports
// too, as *client.Client's (nothing without Options.NearCache).
type NearSource interface {
	NearCacheStats() []client.NearCacheStats
}

// nearDescs are the near cache metrics.
type nearDescs struct{ hits, misses, entries, bytes *prometheus.Desc }

func newNearDescs(d func(name, help string, labels ...string) *prometheus.Desc) nearDescs {
	return nearDescs{
		hits:    d(NearCacheHitsTotal, "Gets answered from the process's near cache of the node, without a request to it.", "node"),
		misses:  d(NearCacheMissesTotal, "Gets the near cache of the node could not answer, which went to the node.", "node"),
		entries: d(NearCacheEntries, "Replies the near cache of the node holds.", "node"),
		bytes:   d(NearCacheBytes, "Estimated size of the replies the near cache of the node holds.", "node"),
	}
}

func (n nearDescs) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{n.hits, n.misses, n.entries, n.bytes} {
		ch <- d
	}
}

// collect sends src's near cache metrics, if it has any.
func (n nearDescs) collect(src Source, ch chan<- prometheus.Metric) {
	ns, ok := src.(NearSource)
	if !ok {
		return
	}
	for _, s := range ns.NearCacheStats() {
		name := s.Node.Name
		ch <- prometheus.MustNewConstMetric(n.hits, prometheus.CounterValue, float64(s.Hits), name)
		ch <- prometheus.MustNewConstMetric(n.misses, prometheus.CounterValue, float64(s.Misses), name)
		ch <- prometheus.MustNewConstMetric(n.entries, prometheus.GaugeValue, float64(s.Entries), name)
		ch <- prometheus.MustNewConstMetric(n.bytes, prometheus.GaugeValue, float64(s.Bytes), name)
	}
}
