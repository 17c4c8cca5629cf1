package metrics_test

import (
	"fmt"
	"strings"

	"github.com/shardcache/shardcache/metrics"
)

// An exporter defines one series family per metric, and turns each sample
// Collect emits into a series of it.
func ExampleCollect() {
	defs := map[string]metrics.Metric{}
	for _, m := range metrics.ClientMetrics() {
		defs[m.Name] = m
	}
	metrics.Collect(busy(), func(s metrics.Sample) {
		m := defs[s.Name]
		if m.Name != metrics.RequestsTotal || s.Value == 0 {
			return
		}
		var labels []string
		for i, l := range m.Labels {
			labels = append(labels, l+"="+s.Labels[i])
		}
		fmt.Printf("%s %s{%s} %v\n", m.Kind, m.Name, strings.Join(labels, ","), s.Value)
	})
	// Output:
	// counter shardcache_requests_total{node=a,op=get,result=hit} 3
	// counter shardcache_requests_total{node=a,op=get,result=miss} 2
	// counter shardcache_requests_total{node=a,op=get,result=timeout} 1
	// counter shardcache_requests_total{node=a,op=get,result=refused} 2
	// counter shardcache_requests_total{node=a,op=get,result=down} 3
	// counter shardcache_requests_total{node=a,op=get,result=error} 4
	// counter shardcache_requests_total{node=a,op=set,result=ok} 7
}
