package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/compat/goredis"
	"github.com/shardcache/shardcache/ring"
)

func Example() {
	// Two Redis servers: in-process ones here, "10.0.0.1:6379" in production.
	a, b := miniredis.NewMiniRedis(), miniredis.NewMiniRedis()
	if err := a.Start(); err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	if err := b.Start(); err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	// Was: rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": ..., "b": ...}})
	rdb, err := goredis.New([]ring.Node{{Name: "a", Addr: a.Addr()}, {Name: "b", Addr: b.Addr()}})
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()

	// The rest is go-redis, unchanged.
	ctx := context.Background()
	rdb.MSet(ctx, "user:1", "Ada", "user:2", "Grace", "user:3", "Edsger")
	vals, err := rdb.MGet(ctx, "user:1", "user:2", "user:3", "user:4").Result() // across both nodes
	fmt.Println(vals, err)
	_, err = rdb.Get(ctx, "user:4").Result()
	fmt.Println(errors.Is(err, redis.Nil))

	// Reshard keeps every key for the window (the longest TTL written).
	err = rdb.Reshard([]ring.Node{{Name: "a", Addr: a.Addr()}}, time.Hour)
	fmt.Println(err, rdb.Migration().Active)
	// Output:
	// [Ada Grace Edsger <nil>] <nil>
	// true
	// <nil> true
}

// A multi-key command that cannot be split, over keys on different nodes,
// fails with ErrCrossShard, where go-redis's Ring runs it on the first key's
// shard over what that shard holds. A hash tag keeps keys on one node.
func ExampleRing_crossShard() {
	a, b := miniredis.NewMiniRedis(), miniredis.NewMiniRedis()
	if err := a.Start(); err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	if err := b.Start(); err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	rdb, err := goredis.New([]ring.Node{{Name: "a", Addr: a.Addr()}, {Name: "b", Addr: b.Addr()}})
	if err != nil {
		log.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()

	// Two sets on different nodes.
	x, y := "set:0", ""
	for i := 1; y == ""; i++ {
		if k := fmt.Sprintf("set:%d", i); rdb.Shardcache().Locate(k) != rdb.Shardcache().Locate(x) {
			y = k
		}
	}
	rdb.SAdd(ctx, x, "Ada")
	rdb.SAdd(ctx, y, "Grace")
	err = rdb.SUnionStore(ctx, "all", x, y).Err()
	fmt.Println(errors.Is(err, goredis.ErrCrossShard))

	// The same under a hash tag: one node, and it runs.
	rdb.SAdd(ctx, "{team}:x", "Ada")
	rdb.SAdd(ctx, "{team}:y", "Grace")
	n, err := rdb.SUnionStore(ctx, "{team}:all", "{team}:x", "{team}:y").Result()
	fmt.Println(n, err)
	// Output:
	// true
	// 2 <nil>
}
