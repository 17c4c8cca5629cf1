package promstats_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/promstats"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// topoSource is a topology.Source whose updates a test sends: each send
// returns once the client's follower has received it.
type topoSource chan topology.Update

func (s topoSource) Watch(ctx context.Context) <-chan topology.Update {
	out := make(chan topology.Update)
	go func() {
		defer close(out)
		for {
			select {
			case u := <-s:
				select {
				case out <- u:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// following returns a client of nodes following a source that starts on
// version, with the write log given (0 for the default), and the source.
func following(t *testing.T, nodes []ring.Node, version int64, writeLog int) (*client.Client, topoSource) {
	t.Helper()
	src := make(topoSource, 1)
	src <- topology.Update{Topology: &topology.Topology{Version: version, Nodes: nodes}}
	return newClient(t, client.Options{Topology: &client.TopologyOptions{
		Source: src, Wait: 5 * time.Second, Skew: 50 * time.Millisecond, WriteLog: writeLog}}), src
}

// awaitSeries waits until metric name of c's collector has the value want
// (a single series without labels), and fails the test after 10 s.
func awaitSeries(t *testing.T, col *promstats.Collector, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok := series(t, col, name)[""]
		if ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (exported %v), want %v", name, got, ok, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTopologyMetrics: a client following a topology over real Redis
// servers exports the version it runs and counts, as its TopologyInfo
// does, the topologies it refused, its source's errors, a topology
// received late and the repair that failed for a write log too short; a
// client that follows none exports none of them.
func TestTopologyMetrics(t *testing.T) {
	ss := testserver.Redis(t, 3)
	var nodes []ring.Node
	for i, s := range ss {
		nodes = append(nodes, ring.Node{Name: fmt.Sprint("n", i), Addr: s.Addr})
	}
	topologyMetrics := []string{promstats.TopologyVersion, promstats.TopologyRefusedTotal,
		promstats.TopologySourceErrorsTotal, promstats.TopologyLateTotal, promstats.TopologyRepairFailuresTotal}

	plain := newClient(t, client.Options{Nodes: nodes})
	for _, name := range topologyMetrics {
		if s := series(t, promstats.New(plain, nil), name); len(s) != 0 {
			t.Errorf("%s without a topology: %v; want no series", name, s)
		}
	}

	c, src := following(t, nodes[:2], 7, 1)
	col := promstats.New(c, nil)
	if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	want := map[string]float64{promstats.TopologyVersion: 7}
	check := func(what string) {
		t.Helper()
		for _, name := range topologyMetrics {
			awaitSeries(t, col, name, want[name])
		}
		s := c.TopologyInfo()
		if got := []int64{s.Version, s.Refused, s.SourceErrors, s.Late, s.RepairFailures}; got[0] != int64(want[promstats.TopologyVersion]) ||
			got[1] != int64(want[promstats.TopologyRefusedTotal]) || got[2] != int64(want[promstats.TopologySourceErrorsTotal]) ||
			got[3] != int64(want[promstats.TopologyLateTotal]) || got[4] != int64(want[promstats.TopologyRepairFailuresTotal]) {
			t.Fatalf("after %s: TopologyInfo %+v; the metrics say %v", what, s, want)
		}
	}
	check("New")

	src <- topology.Update{Topology: &topology.Topology{Version: 8, Nodes: nodes[:0:0]}}
	want[promstats.TopologyRefusedTotal] = 1
	check("a topology without nodes")

	src <- topology.Update{Err: errors.New("NXDOMAIN")}
	want[promstats.TopologySourceErrorsTotal] = 1
	check("a source error")

	// A migration received after its start, by a process whose log of 16
	// writes does not reach back to it: late, and its repair fails.
	ctx := context.Background()
	for i := range 100 {
		if err := c.Set(ctx, fmt.Sprint("k", i), []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	src <- topology.Update{Topology: &topology.Topology{Version: 9, Nodes: nodes,
		Migration: &topology.Migration{From: nodes[:2], Start: time.Now().Add(-time.Second), Window: time.Minute}}}
	want[promstats.TopologyVersion], want[promstats.TopologyLateTotal], want[promstats.TopologyRepairFailuresTotal] = 9, 1, 1
	check("a late topology")
}
