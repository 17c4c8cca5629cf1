package redisnode

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// TestOpOf checks how go-redis commands are named in Stats: as the node
// methods that send them, the lease scripts as "lease", connection set-up
// not at all.
func TestOpOf(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		cmd  redis.Cmder
		want string
	}{
		{redis.NewStringCmd(ctx, "get", "k"), "get"},
		{redis.NewSliceCmd(ctx, "mget", "a", "b"), "get_multi"},
		{redis.NewStatusCmd(ctx, "set", "k", "v"), "set"},
		{redis.NewBoolCmd(ctx, "set", "k", "v", "px", 10, "nx"), "add"},
		{redis.NewIntCmd(ctx, "del", "k"), "delete"},
		{redis.NewIntCmd(ctx, "del", "a", "b"), "delete_multi"},
		{redis.NewIntCmd(ctx, "incrby", "k", 1), "incr"},
		{redis.NewBoolCmd(ctx, "pexpire", "k", 10), "touch"},
		{redis.NewCmd(ctx, "evalsha", storeLeasedScript.Hash(), 0), "lease"},
		{redis.NewCmd(ctx, "evalsha", "0123", 0), "other"},
		{redis.NewIntCmd(ctx, "exists", "k"), "exists"},
		{redis.NewStatusCmd(ctx, "ping"), "ping"},
		{redis.NewStringCmd(ctx, "hgetall", "h"), "other"},
	} {
		if got := opOf(tc.cmd).String(); got != tc.want {
			t.Errorf("%v: %s; want %s", tc.cmd.Args(), got, tc.want)
		}
	}
	if opOf(redis.NewMapStringInterfaceCmd(ctx, "hello", 3)) != node.OpSetup {
		t.Error("HELLO counted")
	}
}

// TestNearCacheEvict: which keys a write drops from a near cache, without a
// server: each command's keys, and nothing for a read.
func TestNearCacheEvict(t *testing.T) {
	ctx := context.Background()
	fill := func(c *nearCache, keys ...string) {
		for _, k := range keys {
			tok, ok := c.Reserve("get "+k, []string{c.prefix + k})
			if !ok || !c.FulfillOwned("get "+k, tok, 0, []byte("$1\r\nv\r\n")) {
				t.Fatalf("cannot fill %s", k)
			}
		}
	}
	held := func(c *nearCache, keys ...string) (in []string) {
		for _, k := range keys {
			if _, ok := c.LocalCache.Get(ctx, "get "+k); ok {
				in = append(in, k)
			}
		}
		return in
	}
	all := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		args []any
		kept []string
	}{
		{[]any{"set", "a", "v"}, []string{"b", "c", "d"}},
		{[]any{"get", "a"}, all},
		{[]any{"exists", "a", "b"}, all},
		{[]any{"del", "a", "c"}, []string{"b", "d"}},
		{[]any{"mset", "a", "1", "b", "2"}, []string{"c", "d"}},
		{[]any{"evalsha", "sha", 2, "b", "c", "a"}, []string{"a", "d"}},
		{[]any{"incrby", []byte("d"), 1}, []string{"a", "b", "c"}},
		{[]any{"rename", "a", "c"}, []string{"b", "d"}},
		{[]any{"flushdb"}, nil},
	} {
		c := &nearCache{LocalCache: redis.NewLocalCache(redis.CacheConfig{MaxEntries: 100}), prefix: "0\x000:\x00"}
		fill(c, all...)
		c.evict(redis.NewCmd(ctx, tc.args...))
		if got := held(c, all...); !slices.Equal(got, tc.kept) {
			t.Errorf("after %v: %v kept, want %v", tc.args, got, tc.kept)
		}
	}
	// A key outside the namespace evict knows is fetched, and not kept.
	c := &nearCache{LocalCache: redis.NewLocalCache(redis.CacheConfig{MaxEntries: 100}), prefix: "0\x000:\x00"}
	if tok, fetch := c.Reserve("get x", []string{"1\x000:\x00x"}); tok != 0 || !fetch {
		t.Errorf("Reserve outside the namespace: token %d, fetch %v; want 0, true", tok, fetch)
	}
}
