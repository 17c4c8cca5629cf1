package redisnode

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/near"
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

// newNearCache returns a near cache as forNode and attached make it, for
// the default user, without a server.
func newNearCache() *nearCache {
	return &nearCache{store: near.New(near.Config{MaxEntries: 100}), other: redis.NewLocalCache(redis.CacheConfig{MaxEntries: 100}), prefix: "0\x000:\x00"}
}

// getCacheKey is go-redis's cache key of a GET of key in c's namespace.
func getCacheKey(c *nearCache, key string) string {
	return c.prefix + getPrefix + strconv.Itoa(len(key)) + "\r\n" + key + "\r\n"
}

// TestNearCacheEvict: which keys a write drops from a near cache, without a
// server: each command's keys, and nothing for a read.
func TestNearCacheEvict(t *testing.T) {
	ctx := context.Background()
	fill := func(c *nearCache, keys ...string) {
		for _, k := range keys {
			tok, ok := c.Reserve(getCacheKey(c, k), []string{c.prefix + k})
			if !ok || !c.FulfillOwned(getCacheKey(c, k), tok, 0, []byte("$1\r\nv\r\n")) {
				t.Fatalf("cannot fill %s", k)
			}
		}
	}
	held := func(c *nearCache, keys ...string) (in []string) {
		for _, k := range keys {
			if _, _, ok := c.store.Get(k); ok {
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
		c := newNearCache()
		fill(c, all...)
		c.evict(redis.NewCmd(ctx, tc.args...))
		if got := held(c, all...); !slices.Equal(got, tc.kept) {
			t.Errorf("after %v: %v kept, want %v", tc.args, got, tc.kept)
		}
	}
	// A key outside the namespace evict knows is fetched, and not kept.
	c := newNearCache()
	if tok, fetch := c.Reserve("get x", []string{"1\x000:\x00x"}); tok != 0 || !fetch {
		t.Errorf("Reserve outside the namespace: token %d, fetch %v; want 0, true", tok, fetch)
	}
	if tok, _ := c.Reserve(getCacheKey(c, "x"), []string{"1\x000:\x00x"}); c.FulfillOwned(getCacheKey(c, "x"), tok, 0, []byte("$1\r\nv\r\n")) {
		t.Error("a GET outside the namespace was kept")
	}
}

// TestNearCacheReplies: a GET's cache key and raw replies, as go-redis
// hands them to the cache, and the replies it answers with.
func TestNearCacheReplies(t *testing.T) {
	c := newNearCache()
	for _, k := range []string{"k", "", "a\r\nb", strings.Repeat("x", 300)} {
		if got, ok := c.getKey(getCacheKey(c, k)); !ok || got != k {
			t.Errorf("getKey(%q) = %q, %v", getCacheKey(c, k), got, ok)
		}
	}
	for _, ck := range []string{"", c.prefix, c.prefix + "*2\r\n$4\r\nhget\r\n$1\r\nk\r\n", c.prefix + getPrefix + "2\r\nk\r\n",
		"1\x000:\x00" + getPrefix + "1\r\nk\r\n", c.prefix + getPrefix + "-1\r\n"} {
		if k, ok := c.getKey(ck); ok {
			t.Errorf("getKey(%q) = %q: not a GET of the namespace", ck, k)
		}
	}
	for _, tc := range []struct {
		raw   string
		value string
		found bool
		ok    bool
	}{
		{"$3\r\nabc\r\n", "abc", true, true},
		{"$0\r\n\r\n", "", true, true},
		{"$4\r\na\r\nb\r\n", "a\r\nb", true, true},
		{"_\r\n", "", false, true},
		{"$-1\r\n", "", false, true},
		{"+OK\r\n", "", false, false},
		{"$3\r\nab\r\n", "", false, false},
		{"$x\r\nab\r\n", "", false, false},
	} {
		v, found, ok := getReply([]byte(tc.raw))
		if string(v) != tc.value || found != tc.found || ok != tc.ok {
			t.Errorf("getReply(%q) = %q, %v, %v", tc.raw, v, found, ok)
		}
		if ok {
			if back := getReplyOf(v, found); found && string(back) != tc.raw || !found && string(back) != "_\r\n" {
				t.Errorf("getReplyOf(%q, %v) = %q", v, found, back)
			}
		}
	}
}
