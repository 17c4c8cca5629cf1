// Package otelstats exports a shardcache client's statistics to
// OpenTelemetry: observable instruments on a metric.MeterProvider (the
// global one unless WithMeterProvider says otherwise), whose callback reads
// client.Stats at each collection, as redisotel and rueidisotel report
// their pools' statistics. It is promstats's twin, in a module of its own
// so that neither it nor the Prometheus client reaches an application
// that does not import it.
//
//	obs, err := otelstats.New(c, otelstats.WithMeterProvider(mp),
//		otelstats.WithAttributes(attribute.String("cache", "sessions")))
//	...
//	defer obs.Close()
//
// # The same metrics as promstats
//
// The metrics are package metrics's, as promstats's are: the same names,
// kinds, units, attributes (promstats's labels: node, op, result, addr,
// placement) and meanings, read from the client by the same code
// (metrics.Collect), so that the two cannot drift apart. A counter is an
// Int64ObservableCounter, a gauge a Float64ObservableGauge.
//
// An instrument is named as promstats's metric, shardcache_requests_total,
// rather than in OpenTelemetry's dotted style (shardcache.requests): a
// Prometheus name is left as it is by every translation of OpenTelemetry's
// Prometheus exporter (and of an OTLP receiver that writes to Prometheus,
// which translate the same way), where a dotted one is not. The exporter
// adds _total to a counter's name, and the unit's suffix (_seconds for
// "s", _bytes for "By", _ratio for a gauge of "1") to any name, unless
// the name has them already, which ours do; its UTF-8 translations keep
// dots as they are. A unit is set only where the name says it; counts and
// 0-or-1 states have none, so that no _ratio is added to them. Through
// the exporter, the series are promstats's, name for name and label for
// label, but for the labels the exporter adds to every series: those of
// the instrumentation scope (otel_scope_name and others: WithoutScopeInfo
// removes them) and the resource's, if asked for.
//
// # The latency histograms: a Producer
//
// promstats's shardcache_request_duration_seconds{node,op} is a histogram
// of the client's own buckets, read from client.Stats, and OpenTelemetry's
// API has no asynchronous histogram: an instrument can only record each
// call as it happens. NewProducer exports those histograms, buckets, count
// and sum as Stats has them, as a Producer of the OpenTelemetry SDK, which
// a Reader takes beside the MeterProvider's instruments:
//
//	reader := sdkmetric.NewPeriodicReader(exporter,
//		sdkmetric.WithProducer(otelstats.NewProducer(c)))
//
// # What each node's server holds
//
// NewNodeObserver exports what metrics.NodePoll reads (client.NodeStats:
// items, memory and its limit, evictions, the server's own hits and
// misses), polled in a goroutine of its own, every 30 seconds by default,
// never during a collection, as promstats.NewNodeCollector does.
package otelstats

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/shardcache/shardcache/metrics"
)

// ScopeName is the name of the instrumentation scope of every instrument:
// the meter's and the Producer's.
const ScopeName = "github.com/shardcache/shardcache/otelstats"

// Source is what New and NewProducer read: a *client.Client, or anything
// that reports the same statistics (its near cache's and its topology's
// too, when it has NearCacheStats and TopologyInfo methods).
type Source = metrics.Source

// NodeSource is what NewNodeObserver polls: a *client.Client.
type NodeSource = metrics.NodeSource

// Option configures New, NewNodeObserver and NewProducer.
type Option func(*config)

type config struct {
	provider metric.MeterProvider
	attrs    []attribute.KeyValue
	interval time.Duration
}

// WithMeterProvider sets the MeterProvider the instruments are created on;
// the global one (otel.GetMeterProvider) by default. NewProducer ignores
// it: a Producer is given to a Reader.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.provider = mp }
}

// WithAttributes adds attributes to every data point, as promstats's
// constant labels: give each client of a process its own (such as
// attribute.String("cache", "sessions")) when it has several.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// WithNodeInterval sets the time between NewNodeObserver's polls;
// metrics.DefaultNodeInterval by default. Others ignore it.
func WithNodeInterval(d time.Duration) Option {
	return func(c *config) { c.interval = d }
}

func newConfig(opts []Option) config {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	if c.provider == nil {
		c.provider = otel.GetMeterProvider()
	}
	return c
}

// attributes returns the set of base and each label's value.
func attributes(base []attribute.KeyValue, labels, values []string) attribute.Set {
	kv := make([]attribute.KeyValue, 0, len(base)+len(labels))
	kv = append(kv, base...) // a copy: NewSet sorts its argument
	for i, l := range labels {
		kv = append(kv, attribute.String(l, values[i]))
	}
	return attribute.NewSet(kv...)
}

// observation is one instrument of a metric.
type observation struct {
	def     metrics.Metric
	counter metric.Int64ObservableCounter
	gauge   metric.Float64ObservableGauge
}

// registration is instruments of defs, observed by one callback that
// reads collect's samples.
type registration struct {
	once sync.Once
	reg  metric.Registration
	err  error
}

func register(cfg config, defs []metrics.Metric, collect func(emit func(metrics.Sample))) (*registration, error) {
	meter := cfg.provider.Meter(ScopeName)
	byName := map[string]observation{}
	var instruments []metric.Observable
	for _, d := range defs {
		o := observation{def: d}
		var err error
		switch d.Kind {
		case metrics.Counter:
			o.counter, err = meter.Int64ObservableCounter(d.Name, metric.WithDescription(d.Help), metric.WithUnit(d.Unit))
			instruments = append(instruments, o.counter)
		case metrics.Gauge:
			o.gauge, err = meter.Float64ObservableGauge(d.Name, metric.WithDescription(d.Help), metric.WithUnit(d.Unit))
			instruments = append(instruments, o.gauge)
		default:
			continue // a histogram: NewProducer's
		}
		if err != nil {
			return nil, err
		}
		byName[d.Name] = o
	}
	attrs := append([]attribute.KeyValue(nil), cfg.attrs...)
	reg, err := meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		collect(func(s metrics.Sample) {
			o, ok := byName[s.Name]
			if !ok {
				return
			}
			set := metric.WithAttributeSet(attributes(attrs, o.def.Labels, s.Labels))
			if o.counter != nil {
				obs.ObserveInt64(o.counter, int64(s.Value), set)
			} else {
				obs.ObserveFloat64(o.gauge, s.Value, set)
			}
		})
		return nil
	}, instruments...)
	if err != nil {
		return nil, err
	}
	return &registration{reg: reg}, nil
}

// unregister stops the callback; the first call's error, every time.
func (r *registration) unregister() error {
	r.once.Do(func() { r.err = r.reg.Unregister() })
	return r.err
}

// Observer is the instruments of one client's statistics, observed at
// each collection of their MeterProvider until Close.
type Observer struct {
	reg *registration
}

// New creates an instrument for each counter and gauge of
// metrics.ClientMetrics on the MeterProvider, and registers a callback
// that reads src's statistics (metrics.Collect) at each collection. Nodes
// that leave the client's placements are no longer observed, nor a near
// cache or a topology the client does not have. The latency histograms
// are NewProducer's.
func New(src Source, opts ...Option) (*Observer, error) {
	reg, err := register(newConfig(opts), metrics.ClientMetrics(), func(emit func(metrics.Sample)) { metrics.Collect(src, emit) })
	if err != nil {
		return nil, err
	}
	return &Observer{reg: reg}, nil
}

// Close unregisters the callback: later collections observe nothing of
// the client. It may be called more than once.
func (o *Observer) Close() error { return o.reg.unregister() }

// NodeObserver is the instruments of what each node's server holds, read
// from a poll in a goroutine of its own (metrics.NodePoll).
type NodeObserver struct {
	poll *metrics.NodePoll
	reg  *registration
}

// NewNodeObserver creates an instrument for each metric of
// metrics.NodeMetrics, starts polling src (at once, then every
// WithNodeInterval), and registers a callback that observes the latest
// poll: a collection never waits for a server.
func NewNodeObserver(src NodeSource, opts ...Option) (*NodeObserver, error) {
	cfg := newConfig(opts)
	poll := metrics.NewNodePoll(src, cfg.interval)
	reg, err := register(cfg, metrics.NodeMetrics(), poll.Collect)
	if err != nil {
		poll.Close()
		return nil, err
	}
	return &NodeObserver{poll: poll, reg: reg}, nil
}

// Poll polls the nodes now, on the caller's goroutine, as the background
// poll does: for a test, or an application that wants values before its
// first collection.
func (o *NodeObserver) Poll(ctx context.Context) { o.poll.Poll(ctx) }

// Close stops the poll, waits for it to end, and unregisters the callback.
// It may be called more than once.
func (o *NodeObserver) Close() error {
	o.poll.Close()
	return o.reg.unregister()
}

// Producer is an OpenTelemetry SDK Producer of a client's latency
// histograms: shardcache_request_duration_seconds{node,op}, with the
// buckets, count and sum of client.Stats, in seconds. Give it to the
// Reader of the MeterProvider New uses (sdkmetric.WithProducer). Its
// histograms are cumulative, from the Producer's creation; a node's
// counts start again from zero when its connection pool does
// (client.Stats), which a backend reads as a reset.
type Producer struct {
	src   Source
	attrs []attribute.KeyValue
	defs  []metrics.Metric // the histograms of metrics.ClientMetrics
	start time.Time
}

var _ sdkmetric.Producer = (*Producer)(nil)

// NewProducer returns a Producer of src's latency histograms. Of the
// options, it takes WithAttributes.
func NewProducer(src Source, opts ...Option) *Producer {
	cfg := newConfig(opts)
	p := &Producer{src: src, attrs: append([]attribute.KeyValue(nil), cfg.attrs...), start: time.Now()}
	for _, d := range metrics.ClientMetrics() {
		if d.Kind == metrics.Histogram {
			p.defs = append(p.defs, d)
		}
	}
	return p
}

// Produce reads src's statistics and returns its histograms, one data
// point per node and kind of call; none before the first call.
func (p *Producer) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	points := map[string][]metricdata.HistogramDataPoint[float64]{}
	labels := map[string][]string{}
	for _, d := range p.defs {
		labels[d.Name] = d.Labels
	}
	metrics.Collect(p.src, func(s metrics.Sample) {
		l, ok := labels[s.Name]
		if !ok {
			return
		}
		h := s.Histogram
		if len(h.Counts) != len(h.Bounds)+1 {
			return // not a histogram of Stats
		}
		bounds := make([]float64, len(h.Bounds))
		for i, b := range h.Bounds {
			bounds[i] = b.Seconds()
		}
		counts := make([]uint64, len(h.Counts))
		for i, c := range h.Counts {
			counts[i] = uint64(c)
		}
		points[s.Name] = append(points[s.Name], metricdata.HistogramDataPoint[float64]{
			Attributes: attributes(p.attrs, l, s.Labels), StartTime: p.start, Time: now,
			Count: uint64(h.Count()), Bounds: bounds, BucketCounts: counts, Sum: h.Sum.Seconds(),
		})
	})
	var out []metricdata.Metrics
	for _, d := range p.defs {
		if len(points[d.Name]) > 0 {
			out = append(out, metricdata.Metrics{Name: d.Name, Description: d.Help, Unit: d.Unit,
				Data: metricdata.Histogram[float64]{DataPoints: points[d.Name], Temporality: metricdata.CumulativeTemporality}})
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return []metricdata.ScopeMetrics{{Scope: instrumentation.Scope{Name: ScopeName}, Metrics: out}}, nil
}
