package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisDoDuringMigration checks each RedisOp on keys only their old
// owner holds, in the window of an 8→6 resharding on redis-server: a hash
// is brought over whole with its TTL and kept (confirm sees a hash as
// present), updates find every field, a counter moves and leaves no copy
// behind, an overwrite reaches both owners.
func TestRedisDoDuringMigration(t *testing.T) {
	ctx := context.Background()
	cl := newCluster(t, "redis-server", 8)
	_, from, to, c := eightToSix(t, cl)
	oldRing, newRing := mustRing(t, from), mustRing(t, to)
	keys := dualKeys(t, "rdo", from, to, 5)
	direct := func(addr string) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	onOld := func(k string) *redis.Client { return direct(oldRing.Locate(k).Addr) }
	onNew := func(k string) *redis.Client { return direct(newRing.Locate(k).Addr) }
	hashRead, hashUpdate, counter, overwrite, missing := keys[0], keys[1], keys[2], keys[3], keys[4]
	for _, k := range []string{hashRead, hashUpdate} {
		onOld(k).HSet(ctx, k, "a", "1", "b", "2")
		onOld(k).Expire(ctx, k, time.Hour)
	}
	onOld(counter).Set(ctx, counter, "40", 0)

	if c.Migrating() {
		t.Fatal("Migrating before Reshard")
	}
	if err := c.Reshard(to, time.Hour); err != nil {
		t.Fatal(err)
	}
	if !c.Migrating() {
		t.Fatal("not Migrating after Reshard")
	}

	all := redis.NewMapStringStringCmd(ctx, "hgetall", hashRead)
	if err := c.RedisDo(ctx, hashRead, RedisRead, all); err != nil || len(all.Val()) != 2 || all.Val()["b"] != "2" {
		t.Fatalf("HGETALL of a hash on its old owner = %v, %v", all.Val(), err)
	}
	if got := onNew(hashRead).HGetAll(ctx, hashRead).Val(); len(got) != 2 {
		t.Fatalf("the hash was not brought over whole: %v", got)
	}
	if ttl := onNew(hashRead).PTTL(ctx, hashRead).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("the copy's TTL is %v, want the remaining hour", ttl)
	}

	hset := redis.NewIntCmd(ctx, "hset", hashUpdate, "c", "3")
	if err := c.RedisDo(ctx, hashUpdate, RedisUpdate, hset); err != nil || hset.Val() != 1 {
		t.Fatalf("HSET = %d, %v", hset.Val(), err)
	}
	for _, rdb := range []*redis.Client{onNew(hashUpdate), onOld(hashUpdate)} {
		if got := rdb.HGetAll(ctx, hashUpdate).Val(); len(got) != 3 {
			t.Fatalf("after HSET %s holds %v, want the three fields", rdb.Options().Addr, got)
		}
	}

	incr := redis.NewIntCmd(ctx, "incrby", counter, 2)
	if err := c.RedisDo(ctx, counter, RedisCounter, incr); err != nil || incr.Val() != 42 {
		t.Fatalf("INCRBY of a counter on its old owner = %d, %v; want 42", incr.Val(), err)
	}
	if n := onOld(counter).Exists(ctx, counter).Val(); n != 0 {
		t.Fatal("the old owner's copy of the counter was not deleted")
	}

	set := redis.NewStatusCmd(ctx, "set", overwrite, "v")
	if err := c.RedisDo(ctx, overwrite, RedisOverwrite, set); err != nil {
		t.Fatal(err)
	}
	for _, rdb := range []*redis.Client{onNew(overwrite), onOld(overwrite)} {
		if v := rdb.Get(ctx, overwrite).Val(); v != "v" {
			t.Fatalf("after SET %s holds %q", rdb.Options().Addr, v)
		}
	}

	get := redis.NewStringCmd(ctx, "get", missing)
	if err := c.RedisDo(ctx, missing, RedisRead, get); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET of a key on neither owner = %v, want redis.Nil", err)
	}
	st := c.Migration()
	if st.Backfills != 3 || st.FallbackMisses != 1 || st.DualWrites != 3 || st.DualDeletes != 0 {
		t.Fatalf("status: %+v; want 3 backfills (2 hashes, 1 counter), 1 miss, 3 dual writes (HSET, SET, the counter's old copy deleted)", st)
	}
}

// TestRedisDoMemcached checks the typed error on Memcached.
func TestRedisDoMemcached(t *testing.T) {
	cl := newCluster(t, "memcached", 1)
	c := cl.client(t, Options{})
	cmd := redis.NewStringCmd(context.Background(), "get", "k")
	if err := c.RedisDo(context.Background(), "k", RedisRead, cmd); !errors.Is(err, ErrUnsupported) || !errors.Is(cmd.Err(), ErrUnsupported) {
		t.Fatalf("RedisDo on Memcached = %v (cmd %v), want ErrUnsupported", err, cmd.Err())
	}
}
