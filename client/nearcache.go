package client

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardcache/shardcache/internal/node/redisnode"
	"github.com/shardcache/shardcache/ring"
)

// The near cache (Options.NearCache) is go-redis's client-side caching
// (RESP3 CLIENT TRACKING, EXPERIMENTAL in go-redis; this module pins
// v9.23.0) on the go-redis client of every Redis node: package redisnode
// holds it, and this file its configuration and statistics.
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
var ErrNearCache = redisnode.ErrNearCache

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

// forNode returns the near cache of every node: nc with its defaults,
// for package redisnode; nil without one.
func (nc *NearCache) forNode() *redisnode.NearCache {
	if nc == nil {
		return nil
	}
	return &redisnode.NearCache{MaxEntries: nc.MaxEntries, MaxBytes: nc.MaxBytes, MaxAge: nc.MaxAge, DrainInterval: nc.DrainInterval}
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
	for _, m := range st.conns {
		ns, ok := m.Node.(interface {
			NearStats() (redisnode.NearStats, bool)
		})
		if !ok {
			continue
		}
		s, ok := ns.NearStats()
		if !ok {
			continue
		}
		out = append(out, NearCacheStats{Node: m.h.node, Hits: s.Hits, Misses: s.Misses, Entries: s.Entries, Bytes: s.Bytes})
	}
	slices.SortFunc(out, func(a, b NearCacheStats) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	return out
}
