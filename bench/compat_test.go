package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/compat/gomemcache"
	"github.com/shardcache/shardcache/compat/goredis"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// The drop-in benchmarks run each compat package beside the library it
// replaces, both as a user writes them (default options, the same calls),
// in one run: BenchmarkDropinMemcached/OP/MODE/ROW and
// BenchmarkDropinRedis/OP/MODE/ROW.

// warm runs every op a few hundred times before the timers, so that no row
// pays for the connections the others then reuse.
func warm(b *testing.B, ops ...func(int) error) {
	for _, op := range ops {
		for i := range 300 {
			if err := op(i); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func ringNodes(addrs []string) []ring.Node {
	nodes := make([]ring.Node, len(addrs))
	for i, a := range addrs {
		nodes[i] = ring.Node{Name: "cache-" + strconv.Itoa(i), Addr: a}
	}
	return nodes
}

// BenchmarkDropinMemcached compares compat/gomemcache with gomemcache:
//
//   - Get: on the same single server, memcache.New(addr) vs
//     gomemcache.New of that one node.
//   - GetMulti100: 100 keys over the same 4 servers, memcache.New(addrs...)
//     (its own crc32 sharding) vs gomemcache.New of the 4 nodes.
//
// Both sides set the same Timeout and MaxIdleConns: gomemcache's default of 2
// idle connections would make the parallel rows measure dials, and its
// 500ms timeout fails calls on a loaded machine.
func BenchmarkDropinMemcached(b *testing.B) {
	addrs := testserver.Addrs(testserver.Memcached(b, benchNodes))
	knobs := func(timeout *time.Duration, idle *int) {
		*timeout, *idle = 5*time.Second, facadePoolSize()
	}
	orig1, orig4 := memcache.New(addrs[0]), memcache.New(addrs...)
	drop1, err := gomemcache.New(ringNodes(addrs[:1]))
	if err != nil {
		b.Fatal(err)
	}
	drop4, err := gomemcache.New(ringNodes(addrs))
	if err != nil {
		b.Fatal(err)
	}
	knobs(&orig1.Timeout, &orig1.MaxIdleConns)
	knobs(&orig4.Timeout, &orig4.MaxIdleConns)
	knobs(&drop1.Timeout, &drop1.MaxIdleConns)
	knobs(&drop4.Timeout, &drop4.MaxIdleConns)
	type mc interface {
		Get(string) (*memcache.Item, error)
		GetMulti([]string) (map[string]*memcache.Item, error)
		Set(*memcache.Item) error
	}
	sets := multiKeySets()
	keys := make([]string, singleKeys)
	for i := range keys {
		keys[i] = "item:" + strconv.Itoa(i) + ":v1"
	}
	for _, c := range []mc{orig1, drop4, orig4} {
		for _, k := range keys {
			if err := c.Set(&memcache.Item{Key: k, Value: benchValue}); err != nil {
				b.Fatal(err)
			}
		}
		for _, ks := range sets {
			for _, k := range ks {
				if err := c.Set(&memcache.Item{Key: k, Value: benchValue, Flags: 1}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	const mask = singleKeys - 1
	get := func(c mc) func(int) error {
		return func(i int) error {
			it, err := c.Get(keys[i&mask])
			if err != nil {
				return err
			}
			return checkValue(it.Value, nil)
		}
	}
	getMulti := func(c mc) func(int) error {
		return func(i int) error {
			hits, err := c.GetMulti(sets[i%multiBatches])
			if err != nil {
				return err
			}
			return checkHits(len(hits))
		}
	}
	warm(b, get(orig1), get(drop1), getMulti(orig4), getMulti(drop4))
	for _, mode := range []struct {
		name string
		run  func(func(int) error) func(*testing.B)
		pair func(base, ours func(int) error, servers ...*testserver.Server) func(*testing.B)
	}{{"serial", serial, pairedSerial}, {"parallel", parallel, pairedParallel}} {
		b.Run("Get/"+mode.name+"/gomemcache-1node", mode.run(get(orig1)))
		b.Run("Get/"+mode.name+"/dropin-1node", mode.run(get(drop1)))
		b.Run("GetMulti100/"+mode.name+"/gomemcache-4nodes", mode.run(getMulti(orig4)))
		b.Run("GetMulti100/"+mode.name+"/dropin-4nodes", mode.run(getMulti(drop4)))
		b.Run("Get/"+mode.name+"/paired-dropin-vs-gomemcache", mode.pair(get(orig1), get(drop1)))
		b.Run("GetMulti100/"+mode.name+"/paired-dropin-vs-gomemcache", mode.pair(getMulti(orig4), getMulti(drop4)))
	}
}

// BenchmarkDropinRedis compares compat/goredis with go-redis, default
// options on both sides:
//
//   - Get: on the same single server, redis.NewClient vs goredis.New of
//     that one node (a *redis.Ring with the hook).
//   - MGet100: 100 keys over the same 4 servers. go-redis's Ring.MGet sends
//     them all to the first key's shard and returns its values alone (the
//     row counts no hits: it is the cost of a wrong answer); a pipeline of
//     100 GETs is how go-redis's Ring answers correctly; the drop-in's MGet
//     is split by owner and returns all 100.
func BenchmarkDropinRedis(b *testing.B) {
	addrs := testserver.Addrs(testserver.Redis(b, benchNodes))
	ctx := context.Background()
	single := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer single.Close()
	shards := make(map[string]string, len(addrs))
	for i, a := range addrs {
		shards["shard"+strconv.Itoa(i)] = a
	}
	orig4 := redis.NewRing(&redis.RingOptions{Addrs: shards})
	defer orig4.Close()
	drop1, err := goredis.New(ringNodes(addrs[:1]))
	if err != nil {
		b.Fatal(err)
	}
	defer drop1.Close()
	drop4, err := goredis.New(ringNodes(addrs))
	if err != nil {
		b.Fatal(err)
	}
	defer drop4.Close()

	sets := multiKeySets()
	keys := make([]string, singleKeys)
	for i := range keys {
		keys[i] = "item:" + strconv.Itoa(i) + ":v1"
	}
	for _, c := range []redis.Cmdable{single, orig4, drop4} {
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.Set(ctx, k, benchValue, 0)
			}
			for _, ks := range sets {
				for _, k := range ks {
					p.Set(ctx, k, benchValue, 0)
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	const mask = singleKeys - 1
	get := func(c redis.Cmdable) func(int) error {
		return func(i int) error { return checkValue(c.Get(ctx, keys[i&mask]).Bytes()) }
	}
	mget := func(c redis.Cmdable, check bool) func(int) error {
		return func(i int) error {
			vals, err := c.MGet(ctx, sets[i%multiBatches]...).Result()
			if err != nil || !check {
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
	}
	pipelined := func(i int) error {
		ks := sets[i%multiBatches]
		cmds := make([]*redis.StringCmd, len(ks))
		if _, err := orig4.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, k := range ks {
				cmds[j] = p.Get(ctx, k)
			}
			return nil
		}); err != nil {
			return err
		}
		return checkHits(len(cmds))
	}
	warm(b, get(single), get(drop1), mget(orig4, false), pipelined, mget(drop4, true))
	for _, mode := range []struct {
		name string
		run  func(func(int) error) func(*testing.B)
		pair func(base, ours func(int) error, servers ...*testserver.Server) func(*testing.B)
	}{{"serial", serial, pairedSerial}, {"parallel", parallel, pairedParallel}} {
		b.Run("Get/"+mode.name+"/go-redis-1node", mode.run(get(single)))
		b.Run("Get/"+mode.name+"/dropin-1node", mode.run(get(drop1)))
		b.Run("MGet100/"+mode.name+"/go-redis-ring-mget-4nodes", mode.run(mget(orig4, false)))
		b.Run("MGet100/"+mode.name+"/go-redis-ring-pipeline-4nodes", mode.run(pipelined))
		b.Run("MGet100/"+mode.name+"/dropin-mget-4nodes", mode.run(mget(drop4, true)))
		b.Run("Get/"+mode.name+"/paired-dropin-vs-go-redis", mode.pair(get(single), get(drop1)))
		b.Run("MGet100/"+mode.name+"/paired-dropin-vs-go-redis-ring-pipeline", mode.pair(pipelined, mget(drop4, true)))
	}
}
