package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/metrics"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// fake is a Source, a NearSource and a TopologySource of fixed statistics.
type fake struct {
	stats client.Stats
	near  []client.NearCacheStats
	topo  client.TopologyStatus
}

func (f fake) Stats() client.Stats                     { return f.stats }
func (f fake) NearCacheStats() []client.NearCacheStats { return f.near }
func (f fake) TopologyInfo() client.TopologyStatus     { return f.topo }

// busy is statistics in which every metric Collect reports has a series.
func busy() fake {
	h := client.Histogram{Bounds: []time.Duration{time.Millisecond, 10 * time.Millisecond}, Counts: []int64{3, 1, 1}, Sum: 40 * time.Millisecond}
	n := ring.Node{Name: "a", Addr: "10.0.0.1:6379", Weight: 2}
	return fake{
		stats: client.Stats{
			Nodes: []client.NodeStats{{Node: n, Up: true, Current: true, Ops: []client.OpStats{
				{Op: "get", OK: 5, Hits: 3, Misses: 2, Errors: client.Errors{Timeout: 1, Refused: 2, Down: 3, Other: 4}, Latency: h},
				{Op: "set", OK: 7, Latency: h},
			}}},
			Migration:       migration.Status{Active: true, End: time.Unix(1700000000, 500000000), Moved: 0.25},
			Migrations:      2,
			MigrationTotals: migration.Snapshot{FallbackHits: 9, SweepFailed: 1},
			Loads:           client.LoadStats{Hits: 11, Refreshes: 1},
		},
		near: []client.NearCacheStats{{Node: n, Hits: 4, Misses: 1, Entries: 2, Bytes: 64}},
		topo: topology.FollowStatus{Following: true, Version: 12, Refused: 1, SourceErrors: 2, Late: 3, RepairFailures: 4},
	}
}

// series collects src into "name{v1,v2} value" lines.
func series(src metrics.Source) map[string]float64 {
	out := map[string]float64{}
	metrics.Collect(src, func(s metrics.Sample) {
		v := s.Value
		if s.Name == metrics.RequestDurationSeconds {
			v = float64(s.Histogram.Count())
		}
		out[s.Name+"{"+strings.Join(s.Labels, ",")+"}"] = v
	})
	return out
}

// TestCollect: the values Collect reads from each field, with their labels.
func TestCollect(t *testing.T) {
	got := series(busy())
	want := map[string]float64{
		"shardcache_node_up{a,10.0.0.1:6379}":                 1,
		"shardcache_node_weight{a}":                           2,
		"shardcache_node_in_placement{a,current}":             1,
		"shardcache_node_in_placement{a,old}":                 0,
		"shardcache_requests_total{a,get,hit}":                3,
		"shardcache_requests_total{a,get,miss}":               2,
		"shardcache_requests_total{a,get,timeout}":            1,
		"shardcache_requests_total{a,get,refused}":            2,
		"shardcache_requests_total{a,get,down}":               3,
		"shardcache_requests_total{a,get,error}":              4,
		"shardcache_requests_total{a,set,ok}":                 7,
		"shardcache_keys_read_total{a,get,hit}":               3,
		"shardcache_keys_read_total{a,get,miss}":              2,
		"shardcache_request_duration_seconds{a,get}":          5,
		"shardcache_migration_active{}":                       1,
		"shardcache_migration_window_end_timestamp_seconds{}": 1700000000.5,
		"shardcache_migration_moved_ratio{}":                  0.25,
		"shardcache_migrations_total{}":                       2,
		"shardcache_migration_fallback_hits_total{}":          9,
		"shardcache_migration_sweep_failed_total{}":           1,
		"shardcache_getorload_hits_total{}":                   11,
		"shardcache_getorload_refreshes_total{}":              1,
		"shardcache_near_cache_hits_total{a}":                 4,
		"shardcache_near_cache_misses_total{a}":               1,
		"shardcache_near_cache_entries{a}":                    2,
		"shardcache_near_cache_bytes{a}":                      64,
		"shardcache_topology_version{}":                       12,
		"shardcache_topology_refused_total{}":                 1,
		"shardcache_topology_source_errors_total{}":           2,
		"shardcache_topology_late_total{}":                    3,
		"shardcache_topology_repair_failures_total{}":         4,
		"shardcache_request_duration_seconds{a,set}":          5,
		"shardcache_requests_total{a,set,timeout}":            0,
		"shardcache_requests_total{a,set,refused}":            0,
		"shardcache_requests_total{a,set,down}":               0,
		"shardcache_requests_total{a,set,error}":              0,
		"shardcache_migration_new_hits_total{}":               0,
		"shardcache_getorload_negative_hits_total{}":          0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["shardcache_requests_total{a,get,ok}"]; ok {
		t.Error("get reports ok: its answered calls are hits and misses")
	}

	// A moved ratio not known yet, no near cache, no topology followed: none
	// of their series.
	quiet := busy()
	quiet.stats.Migration.Moved = math.NaN()
	quiet.topo.Following = false
	quiet.near = nil
	for k := range series(quiet) {
		if strings.HasPrefix(k, metrics.MigrationMovedRatio) || strings.HasPrefix(k, "shardcache_near_cache") || strings.HasPrefix(k, "shardcache_topology") {
			t.Errorf("%s reported", k)
		}
	}
	// A Source that is neither a NearSource nor a TopologySource.
	for k := range series(statsOnly{busy().stats}) {
		if strings.HasPrefix(k, "shardcache_near_cache") || strings.HasPrefix(k, "shardcache_topology") {
			t.Errorf("%s reported by a Source without NearCacheStats nor TopologyInfo", k)
		}
	}
}

type statsOnly struct{ s client.Stats }

func (s statsOnly) Stats() client.Stats { return s.s }

// TestDefinitions: every sample Collect and NodePoll emit is of a metric
// defined, with as many label values as the metric has labels, and every
// metric defined is emitted by busy statistics; every name constant of
// the package is defined, and defined once; units follow the names.
func TestDefinitions(t *testing.T) {
	defs := map[string]metrics.Metric{}
	for _, m := range slices.Concat(metrics.ClientMetrics(), metrics.NodeMetrics()) {
		if _, dup := defs[m.Name]; dup {
			t.Errorf("%s defined twice", m.Name)
		}
		defs[m.Name] = m
		if m.Help == "" || m.Kind.String() == "" || !strings.HasPrefix(m.Name, "shardcache_") {
			t.Errorf("%+v", m)
		}
		if (m.Kind == metrics.Counter) != strings.HasSuffix(m.Name, "_total") {
			t.Errorf("%s is a %v", m.Name, m.Kind)
		}
	}
	for name, unit := range map[string]string{metrics.RequestDurationSeconds: "s", metrics.MigrationWindowEnd: "s",
		metrics.MigrationMovedRatio: "1", metrics.NodeMemoryBytes: "By", metrics.NearCacheBytes: "By", metrics.RequestsTotal: "", metrics.NodeUp: ""} {
		if defs[name].Unit != unit {
			t.Errorf("%s: unit %q, want %q", name, defs[name].Unit, unit)
		}
	}

	emitted := map[string]bool{}
	check := func(s metrics.Sample) {
		m, ok := defs[s.Name]
		if !ok {
			t.Errorf("sample of %s, not defined", s.Name)
			return
		}
		if len(s.Labels) != len(m.Labels) {
			t.Errorf("%s: label values %q for labels %q", s.Name, s.Labels, m.Labels)
		}
		emitted[s.Name] = true
	}
	metrics.Collect(busy(), check)
	p := metrics.NewNodePoll(usage{}, time.Hour)
	p.Poll(context.Background())
	p.Close()
	p.Collect(check)
	for name := range defs {
		if !emitted[name] {
			t.Errorf("%s defined, never emitted", name)
		}
	}

	// The constants of the package's source.
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	consts := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, _ := strconv.Unquote(lit.Value); strings.HasPrefix(v, "shardcache_") && !strings.HasSuffix(v, "_") {
					consts++
					if _, ok := defs[v]; !ok {
						t.Errorf("%s: %s is not defined", fset.Position(lit.Pos()), v)
					}
				}
			}
			return true
		})
	}
	if consts < 20 {
		t.Fatalf("%d names found in the source", consts)
	}
}

// usage is a NodeSource of two nodes: a, with a memory limit, and b,
// whose poll fails.
type usage struct{}

func (usage) NodeStats(context.Context) ([]client.NodeUsage, error) {
	err := errors.New("b: down")
	return []client.NodeUsage{
		{Node: ring.Node{Name: "a"}, Items: 3, Bytes: 100, MemoryLimit: 1000, Evictions: 1, Hits: 5, Misses: 2},
		{Node: ring.Node{Name: "b"}, Err: err},
	}, err
}

// TestNodePoll: the latest reading of each node, and the poll errors of
// the one that failed, alone.
func TestNodePoll(t *testing.T) {
	p := metrics.NewNodePoll(usage{}, time.Hour) // its first poll
	p.Poll(context.Background())                 // the second: b has failed twice
	p.Close()
	got := map[string]float64{}
	p.Collect(func(s metrics.Sample) {
		if s.Name != metrics.NodePollTimestamp {
			got[s.Name+"{"+strings.Join(s.Labels, ",")+"}"] = s.Value
		}
	})
	want := map[string]float64{
		"shardcache_node_items{a}": 3, "shardcache_node_memory_bytes{a}": 100, "shardcache_node_memory_limit_bytes{a}": 1000,
		"shardcache_node_evictions_total{a}": 1, "shardcache_node_server_hits_total{a}": 5, "shardcache_node_server_misses_total{a}": 2,
		"shardcache_node_poll_errors_total{a}": 0, "shardcache_node_poll_errors_total{b}": 2,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("NodePoll reports\n%v\nwant\n%v", got, want)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[metrics.Kind]string{metrics.Counter: "counter", metrics.Gauge: "gauge", metrics.Histogram: "histogram", 9: "Kind(9)"} {
		if k.String() != want {
			t.Errorf("%d: %q", k, k.String())
		}
	}
}
