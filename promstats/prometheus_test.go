package promstats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/promstats"
	"github.com/shardcache/shardcache/ring"
)

// rateInterval is what the test puts for Grafana's $__rate_interval: what
// Grafana sends for a 1s scrape interval, four intervals.
const rateInterval = "4s"

// promTimeout bounds the wait for each query to return data.
const promTimeout = 30 * time.Second

// TestDashboardOnPrometheus runs every query of docs/grafana-dashboard.json,
// and the rules of docs/alerts.yml, on a real Prometheus scraping two
// clients over real Redis servers: one in a migration's window, reading
// keys that a process still on the old node list writes, so that fallback
// and backfill counters move; one holding a stopped server down; two
// following a topology, on different versions. Each panel's and
// annotation's query returns at least one series with a value, each rule
// evaluates without error, each recording rule returns a series, and the
// node-down alert goes pending for the stopped server, the versions alert
// for the two versions.
func TestDashboardOnPrometheus(t *testing.T) {
	servers := testserver.RedisArgs(t, 5, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru") // limits for "Data per node"
	addrs := testserver.Addrs(servers)
	oldNodes := []ring.Node{{Name: "a", Addr: addrs[0]}, {Name: "b", Addr: addrs[1]}}
	newNodes := append(slices.Clone(oldNodes), ring.Node{Name: "c", Addr: addrs[2]})

	writer := newClient(t, client.Options{Nodes: oldNodes}) // a process not yet on the new list
	migrating := newClient(t, client.Options{Nodes: oldNodes})
	if err := migrating.Reshard(newNodes, time.Hour); err != nil {
		t.Fatal(err)
	}
	held := newClient(t, client.Options{
		Nodes:            []ring.Node{{Name: "d", Addr: addrs[3]}, {Name: "e", Addr: addrs[4]}},
		FailureThreshold: 1, ProbeInterval: time.Hour,
	})
	servers[4].Stop()

	// What the application saw, counted beside the client's own metrics.
	seen := appReads{
		read:  prometheus.NewCounter(prometheus.CounterOpts{Name: "app_keys_read_total", Help: "Keys the test read."}),
		found: prometheus.NewCounter(prometheus.CounterOpts{Name: "app_keys_found_total", Help: "Keys the test read and found."}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { migrationTraffic(ctx, writer, migrating, seen) })
	wg.Go(func() { heldDownTraffic(ctx, held) })

	migratingTarget := serveMetrics(t, migrating, seen.read, seen.found)
	targets := []string{migratingTarget, serveMetrics(t, held)}
	// Two processes following a topology, on versions 7 and 8: a rollout
	// under way, or one of them left behind.
	for _, version := range []int64{7, 8} {
		f, _ := following(t, oldNodes, version, 0)
		targets = append(targets, serveMetrics(t, f))
	}
	prom := testserver.PrometheusWith(t, testserver.PrometheusConfig{Targets: targets, RuleFiles: []string{alertsFile}})
	api := promAPI{t: t, base: "http://" + prom.Addr}

	// Two scrapes of each target at least, so that rate() has two samples.
	api.await(fmt.Sprintf(`min(count_over_time(up{job=%q}[1m])) >= 2 and min(up{job=%[1]q}) == 1 and count(up{job=%[1]q}) == %d`,
		testserver.PrometheusJob, len(targets)), nil)

	dash := readDashboard(t)
	job := func(expr string) string {
		return strings.NewReplacer("$__rate_interval", rateInterval, "$job", testserver.PrometheusJob).Replace(expr)
	}
	for _, q := range dash.queries() {
		if strings.HasPrefix(q.where, "variable ") {
			continue // label_values() is Grafana's, not PromQL: below
		}
		t.Run(q.where, func(t *testing.T) {
			api := promAPI{t: t, base: api.base}
			got := api.await(job(q.expr), finite)
			t.Logf("%s: %d series, e.g. %v", job(q.expr), len(got), got[0])
		})
	}
	// The job variable, label_values(shardcache_node_up, job).
	var jobs []string
	api.get("/api/v1/label/job/values?match[]="+url.QueryEscape(promstats.NodeUp), &jobs)
	if !slices.Contains(jobs, testserver.PrometheusJob) {
		t.Errorf("label_values(%s, job) = %v, want %q in it", promstats.NodeUp, jobs, testserver.PrometheusJob)
	}

	// The hit ratio the dashboard and the rules compute is what the
	// application saw, although the migration reads twice the keys it
	// does not find on their new owner: compared per process, at one
	// instant, over the same scrapes.
	truth := `sum by (instance) (rate(app_keys_found_total[W])) / sum by (instance) (rate(app_keys_read_total[W]))`
	var ratio ruleFile
	readYAML(t, alertsFile, &ratio)
	perProcess := strings.NewReplacer("without (instance, ", "without (", "without (instance)", "without ()")
	for _, c := range []struct{ what, expr, window string }{
		{"the dashboard's hit rate", strings.ReplaceAll(job(dash.Panels[0].Targets[0].Expr), "sum(", "sum by (instance) ("), rateInterval},
		{"shardcache:hit_ratio:rate5m", perProcess.Replace(ruleExpr(t, &ratio, "shardcache:hit_ratio:rate5m")), "5m"},
	} {
		at := time.Now()
		got := api.queryAt(c.expr, at)
		want := api.queryAt(strings.ReplaceAll(truth, "W", c.window), at)
		g, w := instanceValue(got, migratingTarget), instanceValue(want, migratingTarget)
		t.Logf("%s: %.4f, the application saw %.4f", c.what, g, w)
		if !(math.Abs(g-w) < 0.005) {
			t.Errorf("%s: %v, but the application found %v of the keys it read\n%s", c.what, g, w, c.expr)
		}
	}

	// The rules: every recording rule returns a series, the hit ratio a
	// fraction; all evaluate without error; the stopped server's alert is
	// pending (it fires after its "for").
	var rules ruleFile
	readYAML(t, alertsFile, &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				got := api.await(r.Record, finite)
				if r.Record == "shardcache:hit_ratio:rate5m" && !(got[0].value >= 0 && got[0].value <= 1) {
					t.Errorf("%s = %v, want a fraction", r.Record, got[0].value)
				}
			}
		}
	}
	api.awaitRulesHealthy()
	api.await(`ALERTS{alertname="ShardcacheNodeDown",node="e",addr="`+addrs[4]+`"}`, nil)
	if got := api.await(`ALERTS{alertname="ShardcacheTopologyVersionsDiffer",job="`+testserver.PrometheusJob+`"}`, nil); len(got) != 1 {
		t.Errorf("ShardcacheTopologyVersionsDiffer: %v, want one alert for the job", got)
	}
}

// appReads counts the keys the application read and found.
type appReads struct{ read, found prometheus.Counter }

// migrationTraffic writes keys through writer, a process on the old node
// list, and reads them through migrating, in its window: a key that moves
// misses its new owner and is found on its old one (a fallback hit and a
// backfill), others hit; absent keys miss on both. It counts what the reads
// found in seen, and stops with ctx.
func migrationTraffic(ctx context.Context, writer, migrating *client.Client, seen appReads) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	value := []byte("v")
	get := func(key string) {
		_, err := migrating.Get(ctx, key)
		seen.read.Inc()
		if err == nil {
			seen.found.Inc()
		}
	}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		key, absent := "user:"+strconv.Itoa(i), "absent:"+strconv.Itoa(i)
		_ = writer.Set(ctx, key, value, time.Hour)
		get(key)
		get(absent)
		keys := []string{key, absent, "user:" + strconv.Itoa(i/2)}
		found, _ := migrating.GetMulti(ctx, keys)
		seen.read.Add(float64(len(keys)))
		seen.found.Add(float64(len(found)))
		_ = migrating.Set(ctx, "own:"+strconv.Itoa(i), value, time.Hour) // dual writes
	}
}

// heldDownTraffic reads and writes through c, one of whose nodes is down,
// and reads through GetOrLoad.
func heldDownTraffic(ctx context.Context, c *client.Client) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		key := "k:" + strconv.Itoa(i%1000)
		_ = c.Set(ctx, key, []byte("v"), time.Hour)
		_, _ = c.Get(ctx, key)
		_, _ = c.GetMulti(ctx, []string{key, "k:" + strconv.Itoa((i+1)%1000)})
		_, _ = c.GetOrLoad(ctx, "loaded:"+strconv.Itoa(i%500), time.Hour, load)
	}
}

func newClient(t *testing.T, opts client.Options) *client.Client {
	t.Helper()
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout, opts.WriteTimeout = testserver.ClientTimeout, testserver.ClientTimeout
	}
	c, err := client.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// serveMetrics serves c's collectors (its node collector polling every
// 250 ms), and the others, on /metrics, as an application would, and
// returns the server's HOST:PORT.
func serveMetrics(t *testing.T, c *client.Client, others ...prometheus.Collector) string {
	nodes := promstats.NewNodeCollector(c, promstats.NodeOptions{Interval: 250 * time.Millisecond})
	t.Cleanup(nodes.Close)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promstats.New(c, nil), nodes)
	reg.MustRegister(others...)
	web := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(web.Close)
	return strings.TrimPrefix(web.URL, "http://")
}

// promSample is one series of an instant query's answer.
type promSample struct {
	labels map[string]string
	value  float64
}

func (s promSample) String() string { return fmt.Sprintf("%v %v", s.labels, s.value) }

// finite reports whether a series has a value: not NaN (0/0, a quantile of
// no calls), not infinite.
func finite(s promSample) bool { return !math.IsNaN(s.value) && !math.IsInf(s.value, 0) }

// promAPI queries a Prometheus's HTTP API.
type promAPI struct {
	t    *testing.T
	base string
}

// get decodes the data of a GET of path, failing the test on an error.
func (p promAPI) get(path string, data any) {
	p.t.Helper()
	if err := p.tryGet(path, data); err != nil {
		p.t.Fatal(err)
	}
}

func (p promAPI) tryGet(path string, data any) error {
	resp, err := http.Get(p.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: %s: %v", path, resp.Status, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// queryAt runs an instant query at a given time, failing the test on an
// error.
func (p promAPI) queryAt(expr string, at time.Time) []promSample {
	p.t.Helper()
	got, err := p.run("/api/v1/query?time="+strconv.FormatFloat(float64(at.UnixMilli())/1e3, 'f', 3, 64)+"&query=", expr)
	if err != nil {
		p.t.Fatal(err)
	}
	return got
}

// query runs an instant query.
func (p promAPI) query(expr string) ([]promSample, error) {
	return p.run("/api/v1/query?query=", expr)
}

// run runs the query path+expr.
func (p promAPI) run(path, expr string) ([]promSample, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.tryGet(path+url.QueryEscape(expr), &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("%s: a %s, want a vector", expr, data.ResultType)
	}
	out := make([]promSample, 0, len(data.Result))
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value %q: %v", expr, s, err)
		}
		out = append(out, promSample{labels: r.Metric, value: v})
	}
	return out, nil
}

// await polls expr until it returns a series that keep accepts (any, when
// keep is nil), for at most promTimeout, and returns those series. A query
// Prometheus refuses fails at once.
func (p promAPI) await(expr string, keep func(promSample) bool) []promSample {
	p.t.Helper()
	deadline := time.Now().Add(promTimeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := p.query(expr)
		if err != nil {
			p.t.Fatal(err)
		}
		if keep != nil {
			got = slices.DeleteFunc(got, func(s promSample) bool { return !keep(s) })
		}
		if len(got) > 0 {
			return got
		}
		if time.Now().After(deadline) {
			all, _ := p.query(expr)
			p.t.Fatalf("%s: no series with a value after %v (it returns %v)", expr, promTimeout, all)
		}
		<-tick.C
	}
}

// awaitRulesHealthy polls the rules until each has been evaluated, and
// fails the test if one's evaluation failed (a many-to-many match, say).
func (p promAPI) awaitRulesHealthy() {
	p.t.Helper()
	deadline := time.Now().Add(promTimeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		p.get("/api/v1/rules", &data)
		var pending []string
		n := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				n++
				switch r.Health {
				case "ok":
				case "err":
					p.t.Errorf("rule %s (group %s): %s", r.Name, g.Name, r.LastError)
				default:
					pending = append(pending, r.Name)
				}
			}
		}
		if n == 0 {
			p.t.Fatal("Prometheus loaded no rules")
		}
		if len(pending) == 0 || p.t.Failed() {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("rules not evaluated after %v: %v", promTimeout, pending)
		}
		<-tick.C
	}
}

// instanceValue returns the value of the series of instance, NaN when
// there is none.
func instanceValue(got []promSample, instance string) float64 {
	for _, s := range got {
		if s.labels["instance"] == instance {
			return s.value
		}
	}
	return math.NaN()
}

// ruleExpr returns the expression of the recording rule record.
func ruleExpr(t *testing.T, rules *ruleFile, record string) string {
	t.Helper()
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record == record {
				return r.Expr
			}
		}
	}
	t.Fatalf("%s: no recording rule %s", alertsFile, record)
	return ""
}
