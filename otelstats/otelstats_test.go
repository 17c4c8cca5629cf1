package otelstats_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/metrics"
	"github.com/shardcache/shardcache/otelstats"
	"github.com/shardcache/shardcache/ring"
)

// fakeClock is the clients' clock, moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// key names a series as "name{k=v,...}", its attributes sorted.
func key(name string, set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.Emit())
	}
	return name + "{" + strings.Join(kv, ",") + "}"
}

// hist is a histogram data point's count, sum and bucket counts.
type hist struct {
	count   uint64
	sum     float64
	bounds  string
	buckets string
}

// collected is what one collection of a reader holds: the value of every
// counter and gauge series, every histogram, and each instrument's unit,
// description and kind, by name.
type collected struct {
	values map[string]float64
	hists  map[string]hist
	units  map[string]string
	descs  map[string]string
	kinds  map[string]metrics.Kind
}

func collect(t *testing.T, r sdkmetric.Reader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	c := collected{values: map[string]float64{}, hists: map[string]hist{}, units: map[string]string{},
		descs: map[string]string{}, kinds: map[string]metrics.Kind{}}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelstats.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			c.units[m.Name], c.descs[m.Name] = m.Unit, m.Description
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: a sum, monotonic %v, %v", m.Name, d.IsMonotonic, d.Temporality)
				}
				c.kinds[m.Name] = metrics.Counter
				for _, p := range d.DataPoints {
					c.values[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				c.kinds[m.Name] = metrics.Gauge
				for _, p := range d.DataPoints {
					c.values[key(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				c.kinds[m.Name] = metrics.Histogram
				for _, p := range d.DataPoints {
					c.hists[key(m.Name, p.Attributes)] = hist{p.Count, p.Sum, fmt.Sprint(p.Bounds), fmt.Sprint(p.BucketCounts)}
				}
			default:
				t.Errorf("%s: %T", m.Name, m.Data)
			}
		}
	}
	return c
}

// expect reads src as metrics.Collect does, each sample keyed as collect
// keys its data point, with base's attributes.
func expect(src metrics.Source, base ...attribute.KeyValue) (map[string]float64, map[string]hist) {
	labels := map[string][]string{}
	for _, d := range metrics.ClientMetrics() {
		labels[d.Name] = d.Labels
	}
	values, hists := map[string]float64{}, map[string]hist{}
	metrics.Collect(src, func(s metrics.Sample) {
		kv := slices.Clone(base)
		for i, l := range labels[s.Name] {
			kv = append(kv, attribute.String(l, s.Labels[i]))
		}
		k := key(s.Name, attribute.NewSet(kv...))
		if s.Name == metrics.RequestDurationSeconds {
			hists[k] = histOf(s.Histogram)
		} else {
			values[k] = s.Value
		}
	})
	return values, hists
}

// histOf is h as a data point of it.
func histOf(h client.Histogram) hist {
	bounds := make([]float64, len(h.Bounds))
	for i, b := range h.Bounds {
		bounds[i] = b.Seconds()
	}
	counts := make([]uint64, len(h.Counts))
	for i, c := range h.Counts {
		counts[i] = uint64(c)
	}
	return hist{uint64(h.Count()), h.Sum.Seconds(), fmt.Sprint(bounds), fmt.Sprint(counts)}
}

// setup returns a ManualReader with c's Producer, and c's Observer on a
// MeterProvider of it, both with attrs.
func setup(t *testing.T, c otelstats.Source, attrs ...attribute.KeyValue) (*sdkmetric.ManualReader, *otelstats.Observer) {
	t.Helper()
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(otelstats.NewProducer(c, otelstats.WithAttributes(attrs...))))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	obs, err := otelstats.New(c, otelstats.WithMeterProvider(mp), otelstats.WithAttributes(attrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { obs.Close() })
	return reader, obs
}

// TestMatchesStats sends traffic through a client over real servers (an
// 8→6 resharding, its fallbacks, GetOrLoad, the near cache on Redis),
// collects its instruments with the SDK's in-memory reader, and checks
// them against the client's Stats: every series of metrics.Collect (what
// promstats exports) has its data point with the same value and
// attributes, and no other, and the counts are those of Stats and of
// what the test did.
func TestMatchesStats(t *testing.T) {
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		t.Run(backend.String(), func(t *testing.T) { testMatchesStats(t, backend) })
	}
}

func testMatchesStats(t *testing.T, backend client.Backend) {
	var servers []*testserver.Server
	var near *client.NearCache
	if backend == client.Redis {
		servers = testserver.Redis(t, 8)
		near = &client.NearCache{MaxAge: -1}
	} else {
		servers = testserver.Memcached(t, 8)
	}
	var from []ring.Node
	for i, s := range servers {
		from = append(from, ring.Node{Name: "n" + strconv.Itoa(i), Addr: s.Addr})
	}
	clock := &fakeClock{now: time.Date(2026, 12, 8, 9, 0, 0, 0, time.UTC)}
	c, err := client.New(client.Options{Backend: backend, Nodes: from, Now: clock.Now, ProbeInterval: time.Hour,
		ReadTimeout: testserver.ClientTimeout, WriteTimeout: testserver.ClientTimeout, NearCache: near})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cache := attribute.String("cache", "sessions")
	reader, _ := setup(t, c, cache)
	ctx := context.Background()

	// 50 keys written, read back twice (the second from the near cache on
	// Redis), 20 absent ones read; then 8→6, and every key read again: the
	// moved ones fall back to their old owners.
	var hits, misses int
	for i := range 50 {
		if err := c.Set(ctx, "k"+strconv.Itoa(i), []byte("v"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	get := func(k string) {
		switch _, err := c.Get(ctx, k); err {
		case nil:
			hits++
		case client.ErrCacheMiss:
			misses++
		default:
			t.Fatal(err)
		}
	}
	for range 2 {
		for i := range 70 {
			get("k" + strconv.Itoa(i))
		}
	}
	if _, err := c.GetMulti(ctx, []string{"k1", "k2", "absent"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Reshard(from[:6], time.Hour); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		get("k" + strconv.Itoa(i))
	}
	loader := func(context.Context) ([]byte, error) { return []byte("loaded"), nil }
	for _, k := range []string{"k3", "loaded"} {
		if _, err := c.GetOrLoad(ctx, k, time.Hour, loader); err != nil {
			t.Fatal(err)
		}
	}
	if hits != 150 || misses != 40 {
		t.Fatalf("the test read %d hits, %d misses; want 150 and 40", hits, misses)
	}

	got := collect(t, reader)
	values, hists := expect(c, cache)
	if !maps.Equal(got.values, values) {
		for _, k := range slices.Sorted(maps.Keys(values)) {
			if got.values[k] != values[k] {
				t.Errorf("%s = %v, want %v", k, got.values[k], values[k])
			}
		}
		for k := range got.values {
			if _, ok := values[k]; !ok {
				t.Errorf("%s = %v, not a series of metrics.Collect", k, got.values[k])
			}
		}
	}
	if !maps.Equal(got.hists, hists) {
		t.Errorf("histograms\n%v\nwant\n%v", got.hists, hists)
	}

	// The same counts from Stats, read here without package metrics, and
	// as the test made them.
	s := c.Stats()
	var getHits, getMisses float64
	histograms := 0
	for _, n := range s.Nodes {
		for _, o := range n.Ops {
			at := func(result string) string {
				return fmt.Sprintf("%s{cache=sessions,node=%s,op=%s,result=%s}", metrics.RequestsTotal, n.Node.Name, o.Op, result)
			}
			if o.Op == "get" {
				getHits += got.values[at("hit")]
				getMisses += got.values[at("miss")]
				if got.values[at("hit")] != float64(o.Hits) || got.values[at("miss")] != float64(o.Misses) {
					t.Errorf("%s: %v hits, %v misses; Stats: %+v", at(""), got.values[at("hit")], got.values[at("miss")], o)
				}
			} else if got.values[at("ok")] != float64(o.OK) {
				t.Errorf("%s = %v; Stats: %d", at("ok"), got.values[at("ok")], o.OK)
			}
			h := got.hists[fmt.Sprintf("%s{cache=sessions,node=%s,op=%s}", metrics.RequestDurationSeconds, n.Node.Name, o.Op)]
			if h != histOf(o.Latency) {
				t.Errorf("%s %s latency %+v; Stats: %+v", n.Node.Name, o.Op, h, histOf(o.Latency))
			}
			histograms++
		}
		if up := got.values[fmt.Sprintf("%s{addr=%s,cache=sessions,node=%s}", metrics.NodeUp, n.Node.Addr, n.Node.Name)]; up != 1 {
			t.Errorf("%s up %v", n.Node.Name, up)
		}
	}
	if histograms == 0 || len(got.hists) != histograms {
		t.Errorf("%d histograms; Stats has %d", len(got.hists), histograms)
	}
	// The near cache's hits are NearCacheStats's, and not requests: on
	// Redis the second round's 50 hits at least were answered from
	// process memory; Memcached has no near cache here, nor its series.
	nearHits, wantNear := 0.0, 0.0
	for k, v := range got.values {
		if strings.HasPrefix(k, metrics.NearCacheHitsTotal+"{") {
			nearHits += v
		}
	}
	for _, n := range c.NearCacheStats() {
		wantNear += float64(n.Hits)
	}
	if nearHits != wantNear || backend == client.Redis && nearHits < 50 || backend == client.Memcached && nearHits != 0 {
		t.Errorf("near hits %v; NearCacheStats: %v", nearHits, wantNear)
	}
	// Every moved key was read once in the window: a fallback hit each.
	oldRing, _ := ring.New(from)
	newRing, _ := ring.New(from[:6])
	moved := 0.0
	for i := range 50 {
		if k := "k" + strconv.Itoa(i); oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			moved++
		}
	}
	// Each of the test's 150 hits was a get's hit on a node, a near hit, or
	// (a moved key in the window) a fallback hit on its old owner, whose
	// read is a get_multi; each of its 40 misses, on Memcached, a get's
	// miss (on Redis the near cache answers a miss it has seen).
	fallbackHits := got.values[metrics.MigrationCounterName("FallbackHits")+"{cache=sessions}"]
	if getHits+nearHits+fallbackHits < 150 || backend == client.Memcached && getMisses < 40 {
		t.Errorf("get hits %v, near hits %v, fallback hits %v, get misses %v: fewer than the test's 150 hits and 40 misses",
			getHits, nearHits, fallbackHits, getMisses)
	}
	for name, want := range map[string]float64{
		metrics.MigrationCounterName("FallbackHits"): moved,
		metrics.MigrationsTotal:                      1,
		metrics.MigrationActive:                      1,
		metrics.MigrationWindowEnd:                   float64(s.Migration.End.UnixNano()) / 1e9,
		metrics.MigrationCounterName("NewHits"):      float64(s.MigrationTotals.NewHits),
		metrics.MigrationCounterName("Backfills"):    float64(s.MigrationTotals.Backfills),
		metrics.MigrationCounterName("SweepGone"):    0,
		metrics.LoadCounterName("Hits"):              1,
		metrics.LoadCounterName("Misses"):            1,
		metrics.LoadCounterName("Loads"):             1,
	} {
		if v := got.values[name+"{cache=sessions}"]; v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if moved == 0 || s.Migration.End.IsZero() {
		t.Fatalf("%v keys moved, the window ends at %v", moved, s.Migration.End)
	}
}

// recorder is a MeterProvider that records the instruments created on it,
// and creates them on the SDK's.
type recorder struct {
	metric.MeterProvider
	mu          sync.Mutex
	instruments map[string]string // name -> kind, unit, description
}

type recordingMeter struct {
	metric.Meter
	r *recorder
}

func (r *recorder) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return recordingMeter{r.MeterProvider.Meter(name, opts...), r}
}

func (r *recorder) record(kind metrics.Kind, name, unit, desc string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.instruments[name]; dup {
		r.instruments[name] = "created twice"
		return
	}
	r.instruments[name] = fmt.Sprintf("%v %q %s", kind, unit, desc)
}

func (m recordingMeter) Int64ObservableCounter(name string, opts ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	cfg := metric.NewInt64ObservableCounterConfig(opts...)
	m.r.record(metrics.Counter, name, cfg.Unit(), cfg.Description())
	return m.Meter.Int64ObservableCounter(name, opts...)
}

func (m recordingMeter) Float64ObservableGauge(name string, opts ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	cfg := metric.NewFloat64ObservableGaugeConfig(opts...)
	m.r.record(metrics.Gauge, name, cfg.Unit(), cfg.Description())
	return m.Meter.Float64ObservableGauge(name, opts...)
}

// TestEveryMetric: every metric promstats exports, its definitions in
// package metrics (promstats's TestSameMetrics checks that it registers
// exactly those), has its counterpart here with the same name, kind, unit
// and description: an instrument of New's or NewNodeObserver's, or, for a
// histogram, the Producer's. Nothing else is created.
func TestEveryMetric(t *testing.T) {
	srv := miniredis.RunT(t)
	c, err := client.New(client.Options{Nodes: []ring.Node{{Name: "a", Addr: srv.Addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(otelstats.NewProducer(c)))
	rec := &recorder{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), instruments: map[string]string{}}
	obs, err := otelstats.New(c, otelstats.WithMeterProvider(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	nodes, err := otelstats.NewNodeObserver(c, otelstats.WithMeterProvider(rec), otelstats.WithNodeInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Close()
	if _, err := c.Get(context.Background(), "k"); err != client.ErrCacheMiss {
		t.Fatal(err)
	}
	got := collect(t, reader)

	created := maps.Clone(rec.instruments)
	for _, d := range slices.Concat(metrics.ClientMetrics(), metrics.NodeMetrics()) {
		want := fmt.Sprintf("%v %q %s", d.Kind, d.Unit, d.Help)
		if d.Kind == metrics.Histogram {
			if got.kinds[d.Name] != metrics.Histogram || got.units[d.Name] != d.Unit || got.descs[d.Name] != d.Help {
				t.Errorf("%s: the Producer's is a %v of unit %q: %q", d.Name, got.kinds[d.Name], got.units[d.Name], got.descs[d.Name])
			}
			continue
		}
		if created[d.Name] != want {
			t.Errorf("%s: instrument %q, want %q", d.Name, created[d.Name], want)
		}
		delete(created, d.Name)
	}
	if len(created) > 0 {
		t.Errorf("instruments of no metric: %v", created)
	}
	// A data point's kind and unit are its instrument's.
	for name, kind := range got.kinds {
		if created, ok := rec.instruments[name]; ok && !strings.HasPrefix(created, kind.String()+" ") {
			t.Errorf("%s: data of a %v, instrument %s", name, kind, created)
		}
	}
}

// TestPrometheusNames: through OpenTelemetry's Prometheus exporter, each
// metric keeps promstats's name, and each attribute its label's, whatever
// the exporter's translation strategy, with or without units: the names
// are translated by otlptranslator, the exporter's own translator.
func TestPrometheusNames(t *testing.T) {
	types := map[metrics.Kind]otlptranslator.MetricType{
		metrics.Counter:   otlptranslator.MetricTypeMonotonicCounter,
		metrics.Gauge:     otlptranslator.MetricTypeGauge,
		metrics.Histogram: otlptranslator.MetricTypeHistogram,
	}
	strategies := []otlptranslator.TranslationStrategyOption{otlptranslator.UnderscoreEscapingWithSuffixes,
		otlptranslator.UnderscoreEscapingWithoutSuffixes, otlptranslator.NoUTF8EscapingWithSuffixes, otlptranslator.NoTranslation}
	for _, d := range slices.Concat(metrics.ClientMetrics(), metrics.NodeMetrics()) {
		for _, s := range strategies {
			namer := otlptranslator.NewMetricNamer("", s)
			for _, unit := range []string{d.Unit, ""} { // the exporter's WithoutUnits drops them
				got, err := namer.Build(otlptranslator.Metric{Name: d.Name, Unit: unit, Type: types[d.Kind]})
				if err != nil || got != d.Name {
					t.Errorf("%s (%v, unit %q) through %s: %q, %v", d.Name, d.Kind, unit, s, got, err)
				}
			}
			for _, l := range d.Labels {
				labeler := otlptranslator.LabelNamer{UTF8Allowed: !s.ShouldEscape()}
				if got, err := labeler.Build(l); err != nil || got != l {
					t.Errorf("label %s through %s: %q, %v", l, s, got, err)
				}
			}
		}
	}
	// A dotted name, OpenTelemetry's style, would not keep promstats's
	// name through every strategy: why the instruments have Prometheus
	// names.
	namer := otlptranslator.NewMetricNamer("", otlptranslator.NoUTF8EscapingWithSuffixes)
	dotted, _ := namer.Build(otlptranslator.Metric{Name: "shardcache.requests", Type: otlptranslator.MetricTypeMonotonicCounter})
	if dotted == metrics.RequestsTotal {
		t.Errorf("a dotted name translates to %q", dotted)
	}
}

// TestNodeObserver polls two real servers, one stopped, and checks the
// instruments against what the servers hold.
func TestNodeObserver(t *testing.T) {
	ss := testserver.RedisArgs(t, 2, "--maxmemory", "64mb")
	c, err := client.New(client.Options{ReadTimeout: testserver.ClientTimeout, WriteTimeout: testserver.ClientTimeout,
		Nodes: []ring.Node{{Name: "a", Addr: ss[0].Addr}, {Name: "b", Addr: ss[1].Addr}}, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	onA := 0
	for i := range 40 {
		k := "k" + strconv.Itoa(i)
		if err := c.Set(ctx, k, []byte("v"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if c.Locate(k).Name == "a" {
			onA++
		}
	}
	ss[1].Stop()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	nodes, err := otelstats.NewNodeObserver(c, otelstats.WithMeterProvider(mp), otelstats.WithNodeInterval(time.Hour),
		otelstats.WithAttributes(attribute.String("cache", "x")))
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Close()
	nodes.Poll(ctx) // the first poll, or the second, beside the background one
	var got map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		got = collect(t, reader).values // once both polls are done: b has failed twice
		if got[metrics.NodePollErrorsTotal+"{cache=x,node=b}"] == 2 || time.Now().After(deadline) {
			break
		}
	}
	for name, want := range map[string]float64{
		metrics.NodeItems + "{cache=x,node=a}":            float64(onA),
		metrics.NodeMemoryLimitBytes + "{cache=x,node=a}": 64 << 20,
		metrics.NodeEvictionsTotal + "{cache=x,node=a}":   0,
		metrics.NodePollErrorsTotal + "{cache=x,node=a}":  0,
		metrics.NodePollErrorsTotal + "{cache=x,node=b}":  2,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (reported %v), want %v", name, v, ok, want)
		}
	}
	if got[metrics.NodeMemoryBytes+"{cache=x,node=a}"] <= 0 {
		t.Errorf("memory of a: %v", got[metrics.NodeMemoryBytes+"{cache=x,node=a}"])
	}
	for k := range got {
		if strings.Contains(k, "node=b") && !strings.HasPrefix(k, metrics.NodePollErrorsTotal) {
			t.Errorf("%s reported for b, whose polls failed", k)
		}
	}
}

// TestClose collects while goroutines send traffic, closes the observer
// midway, and checks that later collections observe nothing of the
// client (make test runs it with -race).
func TestClose(t *testing.T) {
	srv := miniredis.RunT(t)
	c, err := client.New(client.Options{Nodes: []ring.Node{{Name: "a", Addr: srv.Addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	obs, err := otelstats.New(c, otelstats.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				k := fmt.Sprint("g", g, "k", i%50)
				c.Set(ctx, k, []byte("v"), time.Hour)
				c.Get(ctx, k)
			}
		})
	}
	var last float64
	for i := range 40 {
		got := collect(t, reader).values
		calls := 0.0
		for k, v := range got {
			if strings.HasPrefix(k, metrics.RequestsTotal+"{") {
				calls += v
			}
		}
		if i <= 20 && calls < last {
			t.Fatalf("collection %d: %v calls, %v before", i, calls, last)
		}
		last = calls
		if i == 20 {
			if calls == 0 {
				t.Fatal("no call observed before Close")
			}
			if err := obs.Close(); err != nil {
				t.Fatal(err)
			}
			if err := obs.Close(); err != nil {
				t.Fatal("a second Close:", err)
			}
		}
		if i > 20 && len(got) > 0 {
			t.Fatalf("collection %d after Close: %d series", i, len(got))
		}
	}
	cancel()
	wg.Wait()
	if last != 0 {
		t.Fatalf("after Close: %v calls observed", last)
	}
}
