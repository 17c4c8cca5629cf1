package redisnode

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The near cache is go-redis's client-side caching (RESP3 CLIENT
// TRACKING, EXPERIMENTAL in go-redis; this module pins v9.23.0) on the
// node's go-redis client. go-redis keeps the replies of the reads it may
// cache (of the node's, GET: its MGETs go over connections of the
// package's own, or in pipelines), and the server tells it, on the
// connection that read a key, when any client changes the key. This file
// adds only what the client needs around it:
//
//   - nearCache wraps the node's go-redis LocalCache, so that the node's
//     hook knows a call was answered from process memory (nearMark): such
//     a call is not a call to the node, for the observer. The price of a
//     wrapper (go-redis gives these only to its own *LocalCache): a hit
//     copies the value once more, go-redis's miss coalescing and refresh
//     options are off, and an invalidation drops the copy of a read of the
//     same key still in flight whenever that read was sent: one more miss,
//     never a stale value.
//   - After a write through the node's go-redis client, the hook drops the
//     key's near copies at once (evict), so that this process reads its
//     own writes: the server's invalidation reaches the connection that
//     read the key, and go-redis applies it only when it next reads that
//     connection (within DrainInterval when it is idle).
//
// A near copy comes only from reads that are not pipelined: the
// migration's reads of old owners are pipelines (GetMulti with TTLs),
// which go-redis never answers from its cache nor fills it with.

// NearCache configures a node's near cache: the client's Options.NearCache
// with its defaults applied.
type NearCache struct {
	MaxEntries    int // negative: no bound on entries
	MaxBytes      int64
	MaxAge        time.Duration // negative: no bound
	DrainInterval time.Duration
}

// ErrNearCache means a near cache that cannot be had on this node.
var ErrNearCache = errors.New("shardcache: near cache unavailable")

// NearStats is what a node's near cache answered and holds.
type NearStats struct {
	Hits, Misses int64
	Entries      int
	Bytes        int64
}

// NearStats returns the node's near cache statistics; false without one.
func (n *Node) NearStats() (NearStats, bool) {
	if n.near == nil {
		return NearStats{}, false
	}
	cs := n.near.Stats()
	return NearStats{Hits: n.near.hits.Load(), Misses: n.near.misses.Load(), Entries: cs.Entries, Bytes: cs.MemoryUsageBytes}, true
}

// config is go-redis's configuration of one node's cache.
func (nc *NearCache) config() redis.CacheConfig {
	cfg := redis.CacheConfig{MaxEntries: max(nc.MaxEntries, 0), MaxMemoryBytes: nc.MaxBytes, DrainInterval: nc.DrainInterval}
	if nc.MaxAge > 0 {
		cfg.MaxStaleness = nc.MaxAge
	}
	return cfg
}

// nearCache is one node's near cache: go-redis's LocalCache, seen by go-redis
// through Options.ClientSideCache, with the façade's counts beside it.
type nearCache struct {
	*redis.LocalCache
	// prefix is go-redis's namespace of the node's keys in the cache (its
	// cscNamespacePrefix: the DB and the ACL user), which evict needs.
	// Reserve checks it on every fill, so that a go-redis that changed it
	// caches nothing rather than keep copies evict cannot reach.
	prefix string
	// hits counts the calls answered from the cache, misses the GETs (and
	// the MGETs of Client.Redis) that went to the node.
	hits, misses atomic.Int64
}

// forNode gives the go-redis options of node n a near cache, when nc is set:
// RESP3 and a LocalCache of the configured size. It returns the cache, nil
// when nc is nil.
func (nc *NearCache) forNode(addr string, opt *redis.Options) (*nearCache, error) {
	if nc == nil {
		return nil, nil
	}
	if opt.DB != 0 { // NodeCredentials can set it per node
		return nil, fmt.Errorf("%w: node %s: go-redis caches only database 0, not DB %d", ErrNearCache, addr, opt.DB)
	}
	c := &nearCache{LocalCache: redis.NewLocalCache(nc.config())}
	opt.Protocol = 3
	opt.ClientSideCache = c
	// Beside an explicit ClientSideCache go-redis reads its config only for
	// the drain interval (and to check MaxStaleness against other options).
	cfg := nc.config()
	opt.ClientSideCacheConfig = &cfg
	return c, nil
}

// attached returns an error unless rdb caches through c (a NewRedisClient
// hook may have made its client from options of its own), and sets c's
// namespace from rdb's options.
func (c *nearCache) attached(addr string, rdb *redis.Client) error {
	if c == nil {
		return nil
	}
	opt := rdb.Options()
	if cache, ok := opt.ClientSideCache.(*nearCache); !ok || cache != c || opt.Protocol != 3 || opt.DB != 0 ||
		opt.CredentialsProvider != nil || opt.CredentialsProviderContext != nil || opt.StreamingCredentialsProvider != nil {
		return fmt.Errorf("%w: node %s: the NewRedisClient hook's client does not keep the ClientSideCache, Protocol 3 and DB 0 of the options it was given",
			ErrNearCache, addr)
	}
	// The user the client logs in as, which a hook may have changed.
	c.prefix = "0\x00" + strconv.Itoa(len(opt.Username)) + ":" + opt.Username + "\x00"
	return nil
}

// Get is LocalCache's, and marks a hit on the call's nearMark.
func (c *nearCache) Get(ctx context.Context, cacheKey string) ([]byte, bool) {
	v, ok := c.LocalCache.Get(ctx, cacheKey)
	if ok {
		if m, _ := ctx.Value(nearMarkKey{}).(*nearMark); m != nil {
			m.hit.Store(true)
		}
	}
	return v, ok
}

// Reserve is LocalCache's, for keys in the namespace evict knows; other keys
// are fetched without being kept (token 0, as LocalCache answers when full).
func (c *nearCache) Reserve(cacheKey string, redisKeys []string) (uint64, bool) {
	for _, k := range redisKeys {
		if !strings.HasPrefix(k, c.prefix) {
			return 0, true
		}
	}
	return c.LocalCache.Reserve(cacheKey, redisKeys)
}

// drop removes the near copies of key: every cached reply that read it.
func (c *nearCache) drop(key any) {
	var k string
	switch key := key.(type) {
	case string:
		k = key
	case []byte:
		k = string(key)
	default:
		k = fmt.Sprint(key)
	}
	c.DeleteByRedisKey(c.prefix + k)
}

// nearReads are the commands whose replies go-redis may keep (its allow-list
// in v9.23.0, csc_commands.go), and the other reads the façade sends: none
// of them changes a key, so evict leaves their keys' copies alone.
var nearReads = func() map[string]bool {
	m := map[string]bool{}
	for _, names := range []string{
		"get mget getbit getrange strlen substr hget hgetall hmget hkeys hvals hlen hexists hstrlen",
		"lindex llen lpos lrange scard sismember smembers smismember sdiff sinter sintercard sunion",
		"zcard zcount zlexcount zmscore zrange zrangebylex zrangebyscore zrank zrevrange zrevrangebylex",
		"zrevrangebyscore zrevrank zscore zdiff zinter zunion bitcount bitfield_ro bitpos",
		"exists type sort_ro lcs geodist geohash geopos geosearch georadiusbymember_ro georadius_ro",
		"xlen xrange xrevrange json.get json.mget json.arrindex json.arrlen json.objkeys json.objlen",
		"json.resp json.strlen json.type ts.get ts.info ts.range ts.revrange",
		"pttl ttl scan dump dbsize ping info hello client select auth command memory object randomkey",
	} {
		for _, n := range strings.Fields(names) {
			m[n] = true
		}
	}
	return m
}()

// evict drops the near copies of the keys cmd may have changed, after it ran
// (whatever its outcome: a timed-out write may have been applied). A fetch
// still in flight for such a key is dropped too (LocalCache removes its
// reservation), so no read that began before the write publishes the value
// it read.
func (c *nearCache) evict(cmd redis.Cmder) {
	name := cmd.Name()
	if nearReads[name] {
		return
	}
	args := cmd.Args()
	switch name {
	case "flushdb", "flushall":
		c.Flush()
	case "del", "unlink":
		for _, k := range args[1:] {
			c.drop(k)
		}
	case "rename", "renamenx", "copy", "smove", "lmove", "blmove", "rpoplpush", "brpoplpush":
		for _, k := range args[1:min(len(args), 3)] {
			c.drop(k)
		}
	case "mset", "msetnx":
		for i := 1; i < len(args); i += 2 {
			c.drop(args[i])
		}
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		if len(args) < 3 {
			return
		}
		n, err := strconv.Atoi(fmt.Sprint(args[2]))
		if err != nil {
			return
		}
		for i := 3; i < len(args) && i < 3+n; i++ {
			c.drop(args[i])
		}
	default: // a command on one key, its first argument
		if len(args) > 1 {
			c.drop(args[1])
		}
	}
}

// nearMark is the context of a call on a node with a near cache: its Get
// marks the call answered from process memory.
type nearMark struct {
	context.Context
	hit atomic.Bool
}

type nearMarkKey struct{}

// Value returns m for nearMarkKey, else what the call's context holds.
func (m *nearMark) Value(key any) any {
	if key == (nearMarkKey{}) {
		return m
	}
	return m.Context.Value(key)
}
