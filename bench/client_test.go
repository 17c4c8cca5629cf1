package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// The client benchmarks run the façade and the library it wraps against the
// same real servers, started by the benchmark (internal/testserver), in one
// run: BenchmarkRedis/OP/MODE/ROW and BenchmarkMemcached/OP/MODE/ROW. Within
// an OP/MODE the baseline rows come first and shardcache last.

const (
	// benchNodes is the fleet the façade shards over.
	benchNodes = 4
	// valueSize is the size of every value: a small cached object.
	valueSize = 100
	// multiKeys is the number of keys of one GetMulti.
	multiKeys = 100
	// multiBatches GetMulti key sets are cycled through.
	multiBatches = 16
	// singleKeys single keys on the first node are cycled through; a power
	// of two, cycled with a mask.
	singleKeys = 1024
	// parallelism is goroutines per GOMAXPROCS in the parallel rows: enough
	// requests in flight to keep the servers and the client busy, fewer
	// than the pool's 10 connections per CPU.
	parallelism = 8
)

// facadeTimeout is the façade's default for every network step, copied into
// the direct clients so that both sides run with the same options.
const facadeTimeout = client.DefaultTimeout

// facadePoolSize is the façade's default PoolSize.
func facadePoolSize() int { return 10 * runtime.GOMAXPROCS(0) }

var benchValue = func() []byte {
	v := make([]byte, valueSize)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	return v
}()

// directRedis is a go-redis client with the options client.New gives each
// node (client.dial); TestDirectClientsMatchFacade checks it.
func directRedis(addr string) *redis.Client { return redis.NewClient(directRedisOptions(addr)) }

// directRedisOptions are directRedis's options.
func directRedisOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		DialTimeout:           facadeTimeout,
		ReadTimeout:           facadeTimeout,
		WriteTimeout:          facadeTimeout,
		PoolSize:              facadePoolSize(),
		MaxIdleConns:          facadePoolSize(),
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		MaxRetries:            -1,
		PipelinePoolSize:      -1,
	}
}

// redisRing is go-redis's own sharding client over addrs, with the same
// per-shard options as directRedis.
func redisRing(addrs []string) *redis.Ring {
	shards := make(map[string]string, len(addrs))
	for i, a := range addrs {
		shards["shard"+strconv.Itoa(i)] = a
	}
	return redis.NewRing(&redis.RingOptions{
		Addrs:                 shards,
		DialTimeout:           facadeTimeout,
		ReadTimeout:           facadeTimeout,
		WriteTimeout:          facadeTimeout,
		PoolSize:              facadePoolSize(),
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		MaxRetries:            -1,
	})
}

// directMemcache is a gomemcache client over addrs with the Timeout and
// MaxIdleConns that client.New sets; with several addresses gomemcache
// shards by itself (crc32 of the key modulo the server count).
func directMemcache(addrs ...string) *memcache.Client {
	mc := memcache.New(addrs...)
	mc.Timeout = facadeTimeout
	mc.MaxIdleConns = facadePoolSize()
	return mc
}

// facade returns a shardcache client with default options over addrs.
func facade(tb testing.TB, backend client.Backend, addrs []string) *client.Client {
	tb.Helper()
	nodes := make([]ring.Node, len(addrs))
	for i, a := range addrs {
		nodes[i] = ring.Node{Name: "cache-" + strconv.Itoa(i), Addr: a}
	}
	c, err := client.New(client.Options{Backend: backend, Nodes: nodes})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// TestDirectClientsMatchFacade makes the Get and Set rows a fair comparison:
// the direct clients must run with the options of the façade's own clients.
func TestDirectClientsMatchFacade(t *testing.T) {
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2"} // New dials nothing
	rc := facade(t, client.Redis, addrs)
	d := directRedis(addrs[0])
	defer d.Close()
	got, want := d.Options(), rc.Redis(keysOn(rc, addrs[0], 1)[0]).Options()
	type redisOpts struct {
		Addr                                                string
		DialTimeout, ReadTimeout, WriteTimeout, PoolTimeout time.Duration
		PoolSize, MinIdleConns, MaxIdleConns                int
		MaxRetries, DialerRetries, Protocol                 int
		ContextTimeoutEnabled                               bool
	}
	pick := func(o *redis.Options) redisOpts {
		return redisOpts{o.Addr, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout,
			o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxRetries, o.DialerRetries, o.Protocol,
			o.ContextTimeoutEnabled}
	}
	if g, w := pick(got), pick(want); g != w {
		t.Errorf("direct go-redis options\n%+v\nfaçade's\n%+v", g, w)
	}

	// The façade's Memcached nodes take the client's defaults: timeouts of
	// DefaultTimeout, PoolSize (and as many idle) of 10 per CPU.
	dm := directMemcache(addrs[0])
	if dm.Timeout != client.DefaultTimeout || dm.MaxIdleConns != facadePoolSize() {
		t.Errorf("direct gomemcache Timeout %v, MaxIdleConns %d; façade's %v, %d",
			dm.Timeout, dm.MaxIdleConns, client.DefaultTimeout, facadePoolSize())
	}
}

// keysOn returns n keys that c places on the node at addr.
func keysOn(c *client.Client, addr string, n int) []string {
	ks := make([]string, 0, n)
	for i := 0; len(ks) < n; i++ {
		if k := "item:" + strconv.Itoa(i) + ":v1"; c.Locate(k).Addr == addr {
			ks = append(ks, k)
		}
	}
	return ks
}

// multiKeySets returns multiBatches disjoint sets of multiKeys keys.
func multiKeySets() [][]string {
	sets := make([][]string, multiBatches)
	for i := range sets {
		sets[i] = make([]string, multiKeys)
		for j := range sets[i] {
			sets[i][j] = fmt.Sprintf("page:%d:item:%d", i, j)
		}
	}
	return sets
}

// spread fails unless the façade places every key set on all the nodes, so
// that GetMulti really fans out.
func spread(tb testing.TB, c *client.Client, sets [][]string) {
	tb.Helper()
	for _, ks := range sets {
		seen := map[string]bool{}
		for _, k := range ks {
			seen[c.Locate(k).Addr] = true
		}
		if len(seen) != benchNodes {
			tb.Fatalf("a key set reaches %d of %d nodes", len(seen), benchNodes)
		}
	}
}

// cpuTime is the CPU time this process has used, user and system: the
// client's own cost, whatever the servers and other processes do with the
// machine's cores.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per op since start as cpu-ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// serial times one call of op per iteration on the benchmark's goroutine.
func serial(op func(i int) error) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		start := cpuTime(b)
		for i := 0; b.Loop(); i++ {
			if err := op(i); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, start)
	}
}

// parallel times op from parallelism goroutines per CPU, each cycling
// through its own stretch of the key indexes.
func parallel(op func(i int) error) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(parallelism)
		var g atomic.Int64
		start := cpuTime(b)
		b.RunParallel(func(pb *testing.PB) {
			i := int(g.Add(1)) * 7919 // a prime stride: goroutines start apart
			for pb.Next() {
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
		reportCPU(b, start)
	}
}

// checkValue fails a Get that did not return the stored value.
func checkValue(v []byte, err error) error {
	if err != nil {
		return err
	}
	if len(v) != valueSize {
		return fmt.Errorf("got %d bytes, want %d", len(v), valueSize)
	}
	return nil
}

// checkHits fails a GetMulti that did not find every key.
func checkHits(n int) error {
	if n != multiKeys {
		return fmt.Errorf("%d hits of %d keys", n, multiKeys)
	}
	return nil
}

// loadData picks the single-key keys (all on node addr) and the multi-key
// sets (spread over the nodes), and writes all of them through the façade. It
// returns the sets' keys flattened too.
func loadData(b *testing.B, sc *client.Client, addr string) (keys []string, sets [][]string, all []string) {
	keys = keysOn(sc, addr, singleKeys)
	sets = multiKeySets()
	spread(b, sc, sets)
	for _, ks := range sets {
		all = append(all, ks...)
	}
	items := make(map[string][]byte, len(all)+len(keys))
	for _, k := range slices.Concat(all, keys) {
		items[k] = benchValue
	}
	if err := sc.SetMulti(context.Background(), items, 0); err != nil {
		b.Fatal(err)
	}
	return keys, sets, all
}

// BenchmarkRedis compares the façade over 4 redis-server nodes with go-redis:
//
//   - Get, Set: the façade vs a go-redis Client with the façade's options on
//     the node that owns the keys (all the keys of these rows are on it).
//   - GetMulti100: the façade's GetMulti of 100 keys (one MGET per node, in
//     parallel) vs go-redis's Ring over the same 4 servers with a pipeline of
//     100 GETs, and vs one MGET of the 100 keys on a single server.
func BenchmarkRedis(b *testing.B) {
	servers := testserver.Redis(b, benchNodes)
	addrs := testserver.Addrs(servers)
	ctx := context.Background()
	sc := facade(b, client.Redis, addrs)
	direct := directRedis(addrs[0])
	defer direct.Close()
	rg := redisRing(addrs)
	defer rg.Close()

	keys, sets, all := loadData(b, sc, addrs[0])
	// Every client writes the data where it will read it: the façade and
	// direct on their owners (the same node for keys), the Ring on its own
	// placement, and all the multi keys on the single MGET server.
	for _, p := range []redis.Pipeliner{rg.Pipeline(), direct.Pipeline()} {
		for _, k := range all {
			p.Set(ctx, k, benchValue, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}

	const mask = singleKeys - 1
	directGet := func(i int) error { return checkValue(direct.Get(ctx, keys[i&mask]).Bytes()) }
	facadeGet := func(i int) error { return checkValue(sc.Get(ctx, keys[i&mask])) }
	directSet := func(i int) error { return direct.Set(ctx, keys[i&mask], benchValue, time.Hour).Err() }
	facadeSet := func(i int) error { return sc.Set(ctx, keys[i&mask], benchValue, time.Hour) }

	getMulti := func(c *client.Client) func(int) error {
		return func(i int) error {
			hits, err := c.GetMulti(ctx, sets[i%multiBatches])
			if err != nil {
				return err
			}
			return checkHits(len(hits))
		}
	}
	facadeMulti := getMulti(sc)
	// The same placement with Options.AutoPipeline: a node's MGET joins the
	// auto-pipeliner's next batch while other calls to the node are under
	// way, and is sent at once when there are none.
	facadeMultiAP := getMulti(facadeWith(b, client.Options{Backend: client.Redis, AutoPipeline: true}, addrs))
	ringMulti := func(i int) error {
		ks := sets[i%multiBatches]
		cmds := make([]*redis.StringCmd, len(ks))
		if _, err := rg.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, k := range ks {
				cmds[j] = p.Get(ctx, k)
			}
			return nil
		}); err != nil && err != redis.Nil {
			return err
		}
		n := 0
		for _, c := range cmds {
			if v, err := c.Bytes(); err == nil && len(v) == valueSize {
				n++
			}
		}
		return checkHits(n)
	}
	// The fan-out floor: the façade's partition of each key set, computed
	// before the timer, sent as one MGET per node from parallel goroutines.
	perNode := make([]*redis.Client, len(addrs))
	for j, a := range addrs {
		perNode[j] = directRedis(a)
		defer perNode[j].Close()
	}
	parts := make([][][]string, len(sets))
	for j, ks := range sets {
		parts[j] = make([][]string, len(addrs))
		for _, k := range ks {
			n := slices.Index(addrs, sc.Locate(k).Addr)
			parts[j][n] = append(parts[j][n], k)
		}
	}
	fanOut := func(i int) error {
		var wg sync.WaitGroup
		var hits atomic.Int64
		errs := make([]error, len(addrs))
		for j, ks := range parts[i%multiBatches] {
			wg.Go(func() {
				vals, err := perNode[j].MGet(ctx, ks...).Result()
				errs[j] = err
				for _, v := range vals {
					if s, ok := v.(string); ok && len(s) == valueSize {
						hits.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return checkHits(int(hits.Load()))
	}
	mget := func(i int) error {
		vals, err := direct.MGet(ctx, sets[i%multiBatches]...).Result()
		if err != nil {
			return err
		}
		n := 0
		for _, v := range vals {
			if s, ok := v.(string); ok && len(s) == valueSize {
				n++
			}
		}
		return checkHits(n)
	}

	for _, mode := range []struct {
		name string
		run  func(func(int) error) func(*testing.B)
		pair func(base, ours func(int) error, servers ...*testserver.Server) func(*testing.B)
	}{{"serial", serial, pairedSerial}, {"parallel", parallel, pairedParallel}} {
		b.Run("Get/"+mode.name+"/go-redis", mode.run(directGet))
		b.Run("Get/"+mode.name+"/shardcache", mode.run(facadeGet))
		b.Run("Get/"+mode.name+"/paired-shardcache-vs-go-redis", mode.pair(directGet, facadeGet, servers[0]))
		b.Run("Set/"+mode.name+"/go-redis", mode.run(directSet))
		b.Run("Set/"+mode.name+"/shardcache", mode.run(facadeSet))
		b.Run("Set/"+mode.name+"/paired-shardcache-vs-go-redis", mode.pair(directSet, facadeSet))
		b.Run("GetMulti100/"+mode.name+"/go-redis-mget-1node", mode.run(mget))
		b.Run("GetMulti100/"+mode.name+"/go-redis-ring-4nodes", mode.run(ringMulti))
		b.Run("GetMulti100/"+mode.name+"/go-redis-mget-4nodes", mode.run(fanOut))
		b.Run("GetMulti100/"+mode.name+"/shardcache-4nodes", mode.run(facadeMulti))
		b.Run("GetMulti100/"+mode.name+"/shardcache-autopipeline-4nodes", mode.run(facadeMultiAP))
		b.Run("GetMulti100/"+mode.name+"/paired-shardcache-vs-go-redis-ring", mode.pair(ringMulti, facadeMulti, servers...))
		b.Run("GetMulti100/"+mode.name+"/paired-shardcache-vs-go-redis-mget-4nodes", mode.pair(fanOut, facadeMulti, servers...))
		b.Run("GetMulti100/"+mode.name+"/paired-shardcache-autopipeline-vs-go-redis-ring", mode.pair(ringMulti, facadeMultiAP, servers...))
		b.Run("GetMulti100/"+mode.name+"/paired-shardcache-autopipeline-vs-go-redis-mget-4nodes", mode.pair(fanOut, facadeMultiAP, servers...))
	}
}

// BenchmarkMemcached compares the façade over 4 memcached nodes with
// gomemcache:
//
//   - Get, Set: the façade vs a gomemcache Client with the façade's Timeout
//     and MaxIdleConns on the node that owns the keys.
//   - GetMulti100: the façade's GetMulti of 100 keys vs gomemcache's own
//     sharding client over the same 4 servers (it also sends one multi-get
//     per server, in parallel), and vs one multi-get of the 100 keys on a
//     single server.
func BenchmarkMemcached(b *testing.B) {
	servers := testserver.Memcached(b, benchNodes)
	addrs := testserver.Addrs(servers)
	ctx := context.Background()
	sc := facade(b, client.Memcached, addrs)
	direct := directMemcache(addrs[0])
	defer direct.Close()
	multi := directMemcache(addrs...)
	defer multi.Close()

	keys, sets, all := loadData(b, sc, addrs[0])
	for _, mc := range []*memcache.Client{multi, direct} {
		for _, k := range all {
			if err := mc.Set(&memcache.Item{Key: k, Value: benchValue}); err != nil {
				b.Fatal(err)
			}
		}
	}

	const mask = singleKeys - 1
	directGet := func(i int) error {
		it, err := direct.Get(keys[i&mask])
		if err != nil {
			return err
		}
		return checkValue(it.Value, nil)
	}
	facadeGet := func(i int) error { return checkValue(sc.Get(ctx, keys[i&mask])) }
	directSet := func(i int) error {
		return direct.Set(&memcache.Item{Key: keys[i&mask], Value: benchValue, Expiration: 3600})
	}
	facadeSet := func(i int) error { return sc.Set(ctx, keys[i&mask], benchValue, time.Hour) }
	// gomemcache takes no context; the façade honours one that can be
	// cancelled, as a request's context can: a Get through its connection's
	// deadline, on the caller's goroutine; a Set by running gomemcache's call
	// on another goroutine.
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	facadeGetCtx := func(i int) error { return checkValue(sc.Get(reqCtx, keys[i&mask])) }
	facadeSetCtx := func(i int) error { return sc.Set(reqCtx, keys[i&mask], benchValue, time.Hour) }

	getMulti := func(mc *memcache.Client) func(int) error {
		return func(i int) error {
			hits, err := mc.GetMulti(sets[i%multiBatches])
			if err != nil {
				return err
			}
			return checkHits(len(hits))
		}
	}
	facadeMulti := func(i int) error {
		hits, err := sc.GetMulti(ctx, sets[i%multiBatches])
		if err != nil {
			return err
		}
		return checkHits(len(hits))
	}

	for _, mode := range []struct {
		name string
		run  func(func(int) error) func(*testing.B)
		pair func(base, ours func(int) error, servers ...*testserver.Server) func(*testing.B)
	}{{"serial", serial, pairedSerial}, {"parallel", parallel, pairedParallel}} {
		b.Run("Get/"+mode.name+"/gomemcache", mode.run(directGet))
		b.Run("Get/"+mode.name+"/shardcache", mode.run(facadeGet))
		b.Run("Get/"+mode.name+"/shardcache-cancelctx", mode.run(facadeGetCtx))
		b.Run("Get/"+mode.name+"/paired-shardcache-vs-gomemcache", mode.pair(directGet, facadeGet, servers[0]))
		b.Run("Get/"+mode.name+"/paired-shardcache-cancelctx-vs-gomemcache", mode.pair(directGet, facadeGetCtx, servers[0]))
		b.Run("Set/"+mode.name+"/gomemcache", mode.run(directSet))
		b.Run("Set/"+mode.name+"/shardcache", mode.run(facadeSet))
		b.Run("Set/"+mode.name+"/shardcache-cancelctx", mode.run(facadeSetCtx))
		b.Run("GetMulti100/"+mode.name+"/gomemcache-1node", mode.run(getMulti(direct)))
		b.Run("GetMulti100/"+mode.name+"/gomemcache-4nodes", mode.run(getMulti(multi)))
		b.Run("GetMulti100/"+mode.name+"/shardcache-4nodes", mode.run(facadeMulti))
		b.Run("GetMulti100/"+mode.name+"/paired-shardcache-vs-gomemcache-4nodes", mode.pair(getMulti(multi), facadeMulti, servers...))
	}
}
