package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/ring"
)

// The near cache (Options.NearCache) is go-redis's client-side caching
// (RESP3 CLIENT TRACKING, EXPERIMENTAL in go-redis; this module pins
// v9.23.0) on the go-redis client of every Redis node. go-redis keeps the
// replies of the reads it may cache (of the façade's, GET: its MGETs go
// over the client's own connections, redis_raw.go, or in pipelines, see
// nearMGet), and the server tells it, on the connection that read
// a key, when any client changes the key. This file adds only what the
// façade needs around it:
//
//   - nearCache wraps the node's go-redis LocalCache, so that the node's hook
//     knows a call was answered from process memory (nearMark): such a call is
//     not a call to the node, for Stats and for the breaker alike. The price
//     of a wrapper (go-redis gives these only to its own *LocalCache): a hit
//     copies the value once more, go-redis's miss coalescing and refresh
//     options are off, and an invalidation drops the copy of a read of the
//     same key still in flight whenever that read was sent (go-redis's own
//     cache keeps one sent after the invalidation was seen): one more miss,
//     never a stale value. The next read after a write through this client
//     often pays that miss anyway: the server's invalidation of the write
//     goes to the connection that read the key, which is often the one the
//     next read takes.
//   - After a write through one of the node's go-redis clients, the hook
//     drops the key's near copies at once (evict), so that this process reads
//     its own writes: the server's invalidation reaches the connection that
//     read the key, and go-redis applies it only when it next reads that
//     connection (within NearCache.DrainInterval when it is idle).
//
// A near copy must come only from the key's current owner, whose server
// every client writes (see NearCache): the migration paths read old owners
// through pipelines, which go-redis never answers from its cache nor fills
// it with.

// NearCache configures the near cache: see Options.NearCache. Sizes are per
// node: each node's go-redis client has a cache of its own.
type NearCache struct {
	// MaxEntries bounds the replies kept per node. Default
	// DefaultNearCacheEntries; negative: no bound on entries (MaxBytes must
	// then be set).
	MaxEntries int
	// MaxBytes bounds their estimated size per node (go-redis's
	// MaxMemoryBytes: the value, the key and about 100 bytes of overhead
	// each). go-redis splits a budget of 64 KiB or more into 16 shards and
	// never keeps a reply larger than one shard's share (MaxBytes/16): such
	// keys are read from their node every time. Default 0: no byte bound.
	MaxBytes int64
	// MaxAge is the longest a near copy is served after it was read,
	// whatever the invalidations say (go-redis's MaxStaleness): the bound for
	// an invalidation lost with its connection, and for a key whose TTL has
	// run out but that Redis has not deleted yet (Redis deletes an expired
	// key, and so invalidates its near copies, when a command touches it or
	// when its active expiry samples it: with many keys with TTLs, that can
	// be later than the TTL). Default DefaultNearCacheMaxAge; negative: no
	// bound.
	MaxAge time.Duration
	// DrainInterval is how often go-redis reads the node's idle connections
	// for invalidations (ClientSideCacheConfig.DrainInterval): while a
	// connection is idle, which the one that read a hot key mostly is, a
	// write by another client reaches its near copies within about that. A
	// connection in use reads them with its next reply. Each read costs CPU
	// even when nothing changes, per node: go-redis's default of 5ms cost
	// this project's 2-core machine about 2% of a core per node, idle. Default
	// DefaultNearCacheDrainInterval; at least 1ms.
	DrainInterval time.Duration
}

// Near cache defaults.
const (
	// DefaultNearCacheEntries is NearCache.MaxEntries by default, go-redis's
	// own default.
	DefaultNearCacheEntries = 10000
	// DefaultNearCacheDrainInterval is NearCache.DrainInterval by default:
	// another client's write reaches this process's near copies within about
	// 50ms, for 0.3–0.45% of a core per node, idle, on the 2-core
	// development machine (bench: BenchmarkNearCacheIdle; 1.7–2.2% at
	// go-redis's 5ms).
	DefaultNearCacheDrainInterval = 50 * time.Millisecond
	// DefaultNearCacheMaxAge is NearCache.MaxAge by default: a hot key is
	// read from its node once every 10 s per process (1,000 reads a second
	// for 10,000 hot keys), and a near copy outlives its key's TTL by at most
	// that.
	DefaultNearCacheMaxAge = 10 * time.Second
)

// ErrNearCache means a near cache that cannot be had: on Memcached, with a
// Redis database other than 0 (go-redis caches database 0 only), or through
// a NewRedisClient hook whose client does not keep the options' cache, RESP3
// and database 0. It comes wrapped in ErrBadOptions.
var ErrNearCache = errors.New("shardcache: near cache unavailable")

// withDefaults returns a copy of nc with its defaults applied; nil stays
// nil.
func (nc *NearCache) withDefaults() *NearCache {
	if nc == nil {
		return nil
	}
	c := *nc // a copy: the caller's may change after New
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultNearCacheEntries
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultNearCacheMaxAge
	}
	if c.DrainInterval == 0 {
		c.DrainInterval = DefaultNearCacheDrainInterval
	}
	return &c
}

// check rejects a near cache that cannot work with o.
func (nc *NearCache) check(o *Options) error {
	if nc == nil {
		return nil
	}
	switch {
	case o.Backend != Redis:
		return fmt.Errorf("%w: %w: NearCache is go-redis's client-side caching, Redis only, not %v", ErrBadOptions, ErrNearCache, o.Backend)
	case o.DB != 0:
		return fmt.Errorf("%w: %w: go-redis caches only database 0, not DB %d", ErrBadOptions, ErrNearCache, o.DB)
	case nc.MaxEntries < 0 && nc.MaxBytes <= 0:
		return fmt.Errorf("%w: NearCache without a bound: MaxEntries %d and MaxBytes %d", ErrBadOptions, nc.MaxEntries, nc.MaxBytes)
	case nc.MaxBytes < 0:
		return fmt.Errorf("%w: negative NearCache.MaxBytes %d", ErrBadOptions, nc.MaxBytes)
	case nc.DrainInterval < time.Millisecond:
		return fmt.Errorf("%w: NearCache.DrainInterval %v under 1ms", ErrBadOptions, nc.DrainInterval)
	}
	return nil
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
func (nc *NearCache) forNode(n ring.Node, opt *redis.Options) (*nearCache, error) {
	if nc == nil {
		return nil, nil
	}
	if opt.DB != 0 { // NodeCredentials can set it per node
		return nil, fmt.Errorf("%w: %w: node %s: go-redis caches only database 0, not DB %d", ErrBadOptions, ErrNearCache, n.Addr, opt.DB)
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
func (c *nearCache) attached(n ring.Node, rdb *redis.Client) error {
	if c == nil {
		return nil
	}
	opt := rdb.Options()
	if cache, ok := opt.ClientSideCache.(*nearCache); !ok || cache != c || opt.Protocol != 3 || opt.DB != 0 ||
		opt.CredentialsProvider != nil || opt.CredentialsProviderContext != nil || opt.StreamingCredentialsProvider != nil {
		return fmt.Errorf("%w: %w: node %s: the NewRedisClient hook's client does not keep the ClientSideCache, Protocol 3 and DB 0 of the options it was given",
			ErrBadOptions, ErrNearCache, n.Addr)
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

// nearMGet sends an MGET of keys for a node with a near cache, in a
// pipeline of its own: go-redis never answers a pipeline from its cache nor
// fills it with one. Kept, an MGET's reply would be one entry per distinct
// key list, holding every value of the list, that its next identical list
// alone could use; and even an MGET that is not kept costs go-redis a cache
// key and a namespaced string per key before it is sent. A failed pipeline
// leaves its error in the command.
func (n redisNode) nearMGet(ctx context.Context, keys []string) *redis.SliceCmd {
	var cmd *redis.SliceCmd
	_, _ = n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.MGet(ctx, keys...)
		return nil
	})
	return cmd
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

// nearHook is healthHook for a node with a near cache: a call answered from
// the cache is counted as a near hit, not as a call to the node (it reached
// no server, so it says nothing of the node's health), and every write
// evicts its keys' near copies.
type nearHook struct {
	healthHook
	c *nearCache
}

func (k nearHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := k.h.begin()
		m := &nearMark{Context: ctx}
		err := next(m, cmd)
		if m.hit.Load() {
			k.c.hits.Add(1)
			return err
		}
		switch cmd.Name() {
		case "get", "mget":
			k.c.misses.Add(1)
		}
		k.report(ctx, cmd, start, err)
		k.c.evict(cmd)
		return err
	}
}

func (k nearHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	report := k.healthHook.ProcessPipelineHook(next)
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := report(ctx, cmds)
		for _, cmd := range cmds {
			k.c.evict(cmd)
		}
		return err
	}
}

// evictHook evicts the near copies of the keys written through a node's
// second go-redis client, the auto-pipeliner's (autopipeline.go), which
// reads nothing through the cache.
type evictHook struct{ c *nearCache }

func (evictHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (k evictHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		k.c.evict(cmd)
		return err
	}
}

func (k evictHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			k.c.evict(cmd)
		}
		return err
	}
}

// redisHook is the hook that reports a Redis node's calls to h: nearHook
// when the node has a near cache, else healthHook.
func redisHook(h *nodeHealth, c *nearCache) redis.Hook {
	if c != nil {
		return nearHook{healthHook{h}, c}
	}
	return healthHook{h}
}

// NearCacheStats is one node's near cache: what go-redis holds for it, and
// what the façade's calls found there.
type NearCacheStats struct {
	Node ring.Node
	// Hits counts the calls answered from process memory: they reached no
	// server, and are not in the node's Stats (calls, hits, latency) nor in
	// its health. Misses counts the Gets that went to the node (and the
	// MGETs sent through Client.Redis); those are in its Stats. GetMulti
	// never goes through the near cache.
	Hits, Misses int64
	// Entries and Bytes are what the cache holds now (go-redis's CSCStats:
	// replies, and their estimated size).
	Entries int
	Bytes   int64
}

// HitRatio returns Hits / (Hits + Misses), 0 before any read.
func (s NearCacheStats) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// NearCacheStats returns the near cache of every node the client routes to
// (during a migration, those of both placements), sorted by name; nil
// without Options.NearCache. A node's counts live as long as its
// connection pool, as in Stats.
func (c *Client) NearCacheStats() []NearCacheStats {
	st := c.state.Load()
	if st == nil || c.opts.NearCache == nil {
		return nil
	}
	var out []NearCacheStats
	for _, nd := range st.conns {
		rn, ok := nd.(redisNode)
		if !ok || rn.near == nil {
			continue
		}
		cs := rn.near.Stats()
		out = append(out, NearCacheStats{Node: rn.h.node, Hits: rn.near.hits.Load(), Misses: rn.near.misses.Load(),
			Entries: cs.Entries, Bytes: cs.MemoryUsageBytes})
	}
	slices.SortFunc(out, func(a, b NearCacheStats) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	return out
}
