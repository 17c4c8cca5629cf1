package integration_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// Trace every Redis command with OpenTelemetry: NewRedisClient gets the
// options the client would use, so the traced clients keep its timeouts and
// retry policy, and it is called for every node, those of later Reshards too.
func Example_redisotel() {
	srv, err := miniredis.Run() // a Redis server, for the example
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	spans := tracetest.NewSpanRecorder() // in production: your exporter's provider, or otel.GetTracerProvider()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	c, err := client.New(client.Options{
		Nodes: []ring.Node{{Name: "a", Addr: srv.Addr()}},
		NewRedisClient: func(n ring.Node, opt *redis.Options) *redis.Client {
			rdb := redis.NewClient(opt)
			if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp)); err != nil {
				log.Print(err)
			}
			return rdb
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	c.Set(ctx, "user:42", []byte("Ada"), time.Hour)
	c.Get(ctx, "user:42")
	for _, s := range spans.Ended() {
		if s.Name() == "set" || s.Name() == "get" {
			fmt.Println(s.Name())
		}
	}
	// Output:
	// set
	// get
}

// Trace Memcached calls: gomemcache has no hooks, so the application opens a
// span around each façade call, naming the node that owns the key.
func Example_memcachedTracing() {
	c, err := client.New(client.Options{
		Backend: client.Memcached,
		Nodes:   []ring.Node{{Name: "a", Addr: "10.0.0.1:11211"}, {Name: "b", Addr: "10.0.0.2:11211"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	tracer := otel.Tracer("myapp")
	get := func(ctx context.Context, key string) ([]byte, error) {
		ctx, span := tracer.Start(ctx, "cache get", trace.WithAttributes(
			attribute.String("db.system", "memcached"), attribute.String("shardcache.node", c.Locate(key).Name)))
		defer span.End()
		v, err := c.Get(ctx, key)
		if err != nil && err != client.ErrCacheMiss {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return v, err
	}
	_, _ = get(context.Background(), "user:42")
}

// TestRedisotelSeesEveryNode checks that a redisotel hook added through
// NewRedisClient traces the commands of every node on real redis-servers:
// the initial nodes (go-redis's Ring misses those), and a node Reshard adds.
func TestRedisotelSeesEveryNode(t *testing.T) {
	ss := testserver.Redis(t, 3)
	nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr}, {Name: "b", Addr: ss[1].Addr}, {Name: "c", Addr: ss[2].Addr}}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	c, err := client.New(client.Options{Nodes: nodes[:2], ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		NewRedisClient: func(n ring.Node, opt *redis.Options) *redis.Client {
			rdb := redis.NewClient(opt)
			if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp)); err != nil {
				t.Error(err)
			}
			return rdb
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	setOn := func(addr string) {
		for i := 0; ; i++ {
			if k := "otel:" + strconv.Itoa(i); c.Locate(k).Addr == addr {
				if err := c.Set(ctx, k, []byte("v"), time.Hour); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
	}
	setOn(ss[0].Addr)
	setOn(ss[1].Addr)
	if err := c.Reshard(nodes, 0); err != nil {
		t.Fatal(err)
	}
	setOn(ss[2].Addr)

	var traced []string // the server ports of the SET spans
	for _, s := range spans.Ended() {
		if s.Name() != "set" {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == "server.port" {
				traced = append(traced, strconv.Itoa(int(a.Value.AsInt64())))
			}
		}
	}
	for _, s := range ss {
		_, port, _ := strings.Cut(s.Addr, ":")
		if !slices.Contains(traced, port) {
			t.Errorf("no SET span for %s; SET spans for ports %v", s.Addr, traced)
		}
	}
}
