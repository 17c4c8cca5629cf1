package promstats_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/promstats"
	"github.com/shardcache/shardcache/ring"
)

// Export a client's statistics on /metrics, with a label naming the cache.
func Example() {
	srv, _ := miniredis.Run() // a Redis server, for the example
	defer srv.Close()
	c, err := client.New(client.Options{Nodes: []ring.Node{{Name: "a", Addr: srv.Addr()}}})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(promstats.New(c, prometheus.Labels{"cache": "sessions"}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	web := httptest.NewServer(mux)
	defer web.Close()

	ctx := context.Background()
	c.Set(ctx, "user:42", []byte("Ada"), time.Hour)
	c.Get(ctx, "user:42") // a hit
	c.Get(ctx, "user:43") // a miss

	resp, err := http.Get(web.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); (strings.HasPrefix(line, "shardcache_requests_total") || strings.HasPrefix(line, "shardcache_node_up")) &&
			!strings.HasSuffix(line, " 0") {
			fmt.Println(strings.Replace(line, srv.Addr(), "ADDR", 1))
		}
	}
	// Output:
	// shardcache_node_up{addr="ADDR",cache="sessions",node="a"} 1
	// shardcache_requests_total{cache="sessions",node="a",op="get",result="hit"} 1
	// shardcache_requests_total{cache="sessions",node="a",op="get",result="miss"} 1
	// shardcache_requests_total{cache="sessions",node="a",op="set",result="ok"} 1
}
