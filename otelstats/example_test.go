package otelstats_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/metrics"
	"github.com/shardcache/shardcache/otelstats"
	"github.com/shardcache/shardcache/ring"
)

// Export a client's statistics to OpenTelemetry, with an attribute naming
// the cache.
func Example() {
	srv, _ := miniredis.Run() // a Redis server, for the example
	defer srv.Close()
	c, err := client.New(client.Options{Nodes: []ring.Node{{Name: "a", Addr: srv.Addr()}}})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	cache := otelstats.WithAttributes(attribute.String("cache", "sessions"))

	// The application's SDK: a reader (in memory here; a PeriodicReader
	// over an exporter in production) with the Producer of the latency
	// histograms, and its MeterProvider, on which New creates the
	// instruments.
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(otelstats.NewProducer(c, cache)))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	obs, err := otelstats.New(c, otelstats.WithMeterProvider(mp), cache)
	if err != nil {
		panic(err)
	}
	defer obs.Close()

	c.Set(ctx, "user:42", []byte("Ada"), time.Hour)
	c.Get(ctx, "user:42") // a hit
	c.Get(ctx, "user:43") // a miss

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if m.Name == metrics.RequestsTotal && p.Value > 0 {
						lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Count))
				}
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// shardcache_request_duration_seconds{cache=sessions,node=a,op=get} count 2
	// shardcache_request_duration_seconds{cache=sessions,node=a,op=set} count 1
	// shardcache_requests_total{cache=sessions,node=a,op=get,result=hit} 1
	// shardcache_requests_total{cache=sessions,node=a,op=get,result=miss} 1
	// shardcache_requests_total{cache=sessions,node=a,op=set,result=ok} 1
}
