package promstats_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/promstats"
	"github.com/shardcache/shardcache/ring"
)

// TestDashboardQueries checks every query of docs/grafana-dashboard.json
// against what the collector exports: each metric it names, each label it
// matches or groups by, and each value of op and result it matches.
func TestDashboardQueries(t *testing.T) {
	dash := readDashboard(t)
	exprs := map[string]string{} // query -> where
	for _, q := range dash.queries() {
		exprs[q.expr] = q.where
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	for _, want := range []string{"Hit rate per node", "Fallback share during a migration", "Errors per node", "p99 latency per node",
		"Data per node: memory over limit", "Data per node: items", "Data per node: evictions",
		"Topology version per process", "Topology errors"} {
		found := false
		for _, p := range dash.Panels {
			found = found || p.Title == want
		}
		if !found {
			t.Errorf("no panel %q", want)
		}
	}

	exported := exportedMetrics(t)
	metricRE := regexp.MustCompile(`\b(shardcache_[a-z_]+)(\{[^}]*\})?`)
	matcherRE := regexp.MustCompile(`(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	byRE := regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	labelValuesRE := regexp.MustCompile(`label_values\((\w+),\s*(\w+)\)`)
	for expr, where := range exprs {
		var labels map[string]bool // the labels of the metrics the query reads
		for _, m := range metricRE.FindAllStringSubmatch(expr, -1) {
			name, extra := m[1], []string{"job", "instance"} // added by Prometheus when it scrapes
			if base, ok := strings.CutSuffix(name, "_bucket"); ok && exported[base].histogram {
				name, extra = base, append(extra, "le")
			}
			fam, ok := exported[name]
			if !ok {
				t.Errorf("%s: %q reads %s, which the collector does not export", where, expr, m[1])
				continue
			}
			if labels == nil {
				labels = map[string]bool{}
			}
			for l := range fam.labels {
				labels[l] = true
			}
			for _, l := range extra {
				labels[l] = true
			}
			for _, mm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
				label, op, value := mm[1], mm[2], mm[3]
				if _, ok := fam.labels[label]; !ok && !slices.Contains(extra, label) {
					t.Errorf("%s: %s has no label %q", where, name, label)
					continue
				}
				if label != "op" && label != "result" {
					continue
				}
				values := []string{value}
				if op == "=~" || op == "!~" {
					values = strings.Split(value, "|")
				}
				for _, v := range values {
					if !fam.labels[label][v] {
						t.Errorf("%s: %s{%s} matches %q, a value it never has (it has %v)", where, name, label, v, fam.labels[label])
					}
				}
			}
		}
		for _, m := range byRE.FindAllStringSubmatch(expr, -1) {
			for l := range strings.SplitSeq(m[1], ",") {
				if l = strings.TrimSpace(l); !labels[l] {
					t.Errorf("%s: %q groups by %q, a label of none of its metrics", where, expr, l)
				}
			}
		}
		for _, m := range labelValuesRE.FindAllStringSubmatch(expr, -1) {
			if _, ok := exported[m[1]]; !ok && m[2] != "job" {
				t.Errorf("%s: label_values of %s, not exported", where, m[1])
			}
		}
	}
}

// dashboard is the part of docs/grafana-dashboard.json the tests read.
type dashboard struct {
	Panels []struct {
		Title   string
		Targets []struct{ Expr string }
	}
	Annotations struct {
		List []struct{ Name, Expr string }
	}
	Templating struct {
		List []struct{ Name, Definition string }
	}
}

func readDashboard(t *testing.T) *dashboard {
	t.Helper()
	raw, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	return &dash
}

// dashboardQuery is one query of the dashboard and where it is: "panel
// TITLE", "annotation NAME" or "variable NAME".
type dashboardQuery struct{ where, expr string }

// queries returns every query of the dashboard, in its order.
func (d *dashboard) queries() []dashboardQuery {
	var out []dashboardQuery
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, dashboardQuery{"panel " + p.Title, tg.Expr})
		}
	}
	for _, a := range d.Annotations.List {
		out = append(out, dashboardQuery{"annotation " + a.Name, a.Expr})
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			out = append(out, dashboardQuery{"variable " + v.Name, v.Definition})
		}
	}
	return out
}

// family is what the collector exports under one name.
type family struct {
	histogram bool
	labels    map[string]map[string]bool // label -> values seen
}

// exportedMetrics gathers the collector of a client following a topology
// that read, missed and wrote on an embedded server, and the node collector of a client of a real
// Redis with a memory limit (the embedded one has no INFO memory).
func exportedMetrics(t *testing.T) map[string]family {
	srv := miniredis.RunT(t)
	c, _ := following(t, []ring.Node{{Name: "a", Addr: srv.Addr()}}, 1, 0)
	ctx := context.Background()
	c.Set(ctx, "k", []byte("v"), time.Hour)
	c.Get(ctx, "k")
	c.Get(ctx, "missing")
	c.GetMulti(ctx, []string{"k", "missing"})
	c.GetOrLoad(ctx, "k", time.Hour, func(context.Context) ([]byte, error) { return []byte("v"), nil })
	real := testserver.RedisArgs(t, 1, "--maxmemory", "64mb")[0]
	rc, err := client.New(client.Options{ReadTimeout: testserver.ClientTimeout, WriteTimeout: testserver.ClientTimeout, Nodes: []ring.Node{{Name: "b", Addr: real.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	nodes := promstats.NewNodeCollector(rc, promstats.NodeOptions{})
	defer nodes.Close()
	nodes.Poll(ctx)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promstats.New(c, nil), nodes)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		f := family{histogram: mf.GetType().String() == "HISTOGRAM", labels: map[string]map[string]bool{}}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if f.labels[lp.GetName()] == nil {
					f.labels[lp.GetName()] = map[string]bool{}
				}
				f.labels[lp.GetName()][lp.GetValue()] = true
			}
		}
		out[mf.GetName()] = f
	}
	return out
}
