package promstats_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/metrics"
	"github.com/shardcache/shardcache/promstats"
	"github.com/shardcache/shardcache/ring"
)

// TestSameMetrics: the collectors describe exactly the metrics package
// metrics defines, with their help and labels: those otelstats exports too
// (its TestEveryMetric checks its side).
func TestSameMetrics(t *testing.T) {
	srv := miniredis.RunT(t)
	c, err := client.New(client.Options{Nodes: []ring.Node{{Name: "a", Addr: srv.Addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nodes := promstats.NewNodeCollector(c, promstats.NodeOptions{Interval: time.Hour})
	defer nodes.Close()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, x := range []struct {
		col  prometheus.Collector
		defs []metrics.Metric
	}{{promstats.New(c, nil), metrics.ClientMetrics()}, {nodes, metrics.NodeMetrics()}} {
		ch := make(chan *prometheus.Desc, 200)
		x.col.Describe(ch)
		close(ch)
		described := map[string]string{}
		for d := range ch {
			described[fqName.FindStringSubmatch(d.String())[1]] = d.String()
		}
		for _, m := range x.defs {
			if want := prometheus.NewDesc(m.Name, m.Help, m.Labels, nil).String(); described[m.Name] != want {
				t.Errorf("%s: described %s, want %s", m.Name, described[m.Name], want)
			}
			delete(described, m.Name)
		}
		if len(described) > 0 {
			t.Errorf("described, not in package metrics: %v", described)
		}
	}
}
