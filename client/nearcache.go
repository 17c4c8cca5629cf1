package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardcache/shardcache/internal/near"
	"github.com/shardcache/shardcache/internal/node/redisnode"
	"github.com/shardcache/shardcache/ring"
)

// The near cache (Options.NearCache) is a store of package near per node,
// which Get and GetMulti read before anything else: a hit is a lookup, no
// call to the node. This file holds its policy (when a copy may answer) and
// its configuration and statistics; the store is filled by the node's
// reads:
//
//   - On Redis, by go-redis's client-side caching (RESP3 CLIENT TRACKING),
//     which package redisnode hands the store: the server invalidates a
//     copy when any client writes its key, and redisnode's hook drops it at
//     once after a write of this client's.
//   - On Memcached, by mcnode.Near (internal/node/mcnode/nearcache.go),
//     around the node's Gets and writes: this client's writes drop copies at once, and
//     nothing tells it of other clients' writes: MaxAge bounds a copy's
//     life.
//
// A copy answers only for the key's current owner: the near cache read is
// the owner's (route.New), and a miss held there does not answer for a key
// whose route is dual (it goes on to the old owner). The migration paths
// read old owners through pipelines or multi-gets, which fill nothing. A
// node held down answers nothing, near or not.

// NearCache configures the near cache: see Options.NearCache and the
// package doc. Sizes are per node: each node has a store of its own.
type NearCache struct {
	// MaxEntries bounds the copies kept per node. Default
	// DefaultNearCacheEntries; negative: no bound on entries (MaxBytes must
	// then be set).
	MaxEntries int
	// MaxBytes bounds their estimated size per node: the key, the value and
	// near.EntryOverhead (128 bytes) each. The store has 16 shards from 64
	// KiB on and never keeps a value larger than a shard's share
	// (MaxBytes/16): such keys are read from their node every time. Default
	// 0: no byte bound.
	MaxBytes int64
	// MaxAge is the longest a copy is served after its read was sent,
	// whatever the invalidations say: on Redis the bound for one lost with
	// its connection, or for an expired key Redis has not deleted yet; on
	// Memcached the only bound of a copy's life. Default
	// DefaultNearCacheMaxAge; negative: no bound (Redis only).
	MaxAge time.Duration
	// DrainInterval is how often go-redis reads a Redis node's idle
	// connections for invalidations: another client's write reaches this
	// process's copies within about that. Each read costs CPU even when
	// nothing changes, per node. Default DefaultNearCacheDrainInterval; at
	// least 1ms. Memcached, which has no invalidations, does not use it.
	DrainInterval time.Duration
}

// Near cache defaults.
const (
	// DefaultNearCacheEntries is NearCache.MaxEntries by default, go-redis's
	// own default.
	DefaultNearCacheEntries = 10000
	// DefaultNearCacheDrainInterval is NearCache.DrainInterval by default:
	// another client's write reaches this process's near copies within about
	// that long; a shorter interval costs each node's connection idle CPU
	// (docs/performance.md, "Near cache"; BenchmarkNearCacheIdle).
	DefaultNearCacheDrainInterval = 50 * time.Millisecond
	// DefaultNearCacheMaxAge is NearCache.MaxAge by default: a hot key is
	// read from its node once every 10 s per process (1,000 reads a second
	// for 10,000 hot keys), and a near copy outlives its key's TTL by at most
	// that.
	DefaultNearCacheMaxAge = 10 * time.Second
)

// ErrNearCache means a near cache that cannot be had: with a Redis
// database other than 0 (go-redis caches database 0 only), or through a
// NewRedisClient hook whose client does not keep the options' cache, RESP3
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
	case o.Backend == Redis && o.DB != 0:
		return fmt.Errorf("%w: %w: go-redis caches only database 0, not DB %d", ErrBadOptions, ErrNearCache, o.DB)
	case o.Backend == Memcached && nc.MaxAge < 0:
		return fmt.Errorf("%w: a Memcached NearCache needs a MaxAge, not %v: nothing else ends a copy", ErrBadOptions, nc.MaxAge)
	case nc.MaxEntries < 0 && nc.MaxBytes <= 0:
		return fmt.Errorf("%w: NearCache without a bound: MaxEntries %d and MaxBytes %d", ErrBadOptions, nc.MaxEntries, nc.MaxBytes)
	case nc.MaxBytes < 0:
		return fmt.Errorf("%w: negative NearCache.MaxBytes %d", ErrBadOptions, nc.MaxBytes)
	case nc.DrainInterval < time.Millisecond:
		return fmt.Errorf("%w: NearCache.DrainInterval %v under 1ms", ErrBadOptions, nc.DrainInterval)
	}
	return nil
}

// newStore returns a node's store, nil without a near cache.
func (nc *NearCache) newStore() *near.Cache {
	if nc == nil {
		return nil
	}
	return near.New(near.Config{MaxEntries: max(nc.MaxEntries, 0), MaxBytes: nc.MaxBytes, MaxAge: max(nc.MaxAge, 0)})
}

// forNode returns a Redis node's near cache: store, and nc with its
// defaults for go-redis's cache of the other reads; nil without one.
func (nc *NearCache) forNode(store *near.Cache) *redisnode.NearCache {
	if nc == nil {
		return nil
	}
	return &redisnode.NearCache{Store: store, MaxEntries: nc.MaxEntries, MaxBytes: nc.MaxBytes, MaxAge: nc.MaxAge, DrainInterval: nc.DrainInterval}
}

// getNew reads key from its owner, r.New: its near copy when the owner's
// store holds one and the owner is not held down (a miss held near is
// ErrCacheMiss), else from the node. This lookup is all a near hit costs.
func (c *Client) getNew(ctx context.Context, r *route, key string) ([]byte, error) {
	if v, held, err := c.nearGet(r, key); held {
		return v, err
	}
	return r.st.conn(r.New).Get(ctx, key)
}

// nearGet answers key from its owner's near cache: held when a copy (or
// a miss, ErrCacheMiss) is held there.
func (c *Client) nearGet(r *route, key string) (v []byte, held bool, err error) {
	if c.opts.NearCache == nil {
		return nil, false, nil
	}
	m := r.st.conns[r.New.Addr]
	if m == nil || m.near == nil || m.h.Down() {
		return nil, false, nil
	}
	v, found, ok := m.near.Get(key)
	switch {
	case !ok:
		return nil, false, nil
	case !found:
		return nil, true, ErrCacheMiss
	}
	return v, true, nil
}

// nearMulti answers the keys of a GetMulti that their owners' stores hold,
// calling hit with each found, and returns the others, for the nodes (keys
// itself when it answered none). A miss held near answers for its key
// unless the key's route is dual: then the old owner may have it. A
// GetMulti fills no store. It reads the clock once, and counts each
// store's hits once.
func (c *Client) nearMulti(st *state, now time.Time, keys []string, hit func(key string, v []byte)) []string {
	if c.opts.NearCache == nil {
		return keys
	}
	var owners near.Owners
	store := func(addr string) *near.Cache { // the owner's, unless it is held down
		if m := st.conns[addr]; m != nil && !m.h.Down() {
			return m.near
		}
		return nil
	}
	at := time.Now()
	// rest is the keys not held, from the first one held on: keys[:i] up to
	// then, without a copy, and a slice of its own once a key past it is
	// not held.
	var rest []string
	cut, own := false, false
	for i, k := range keys {
		var owner ring.Node
		dual := false
		if st.mig == nil {
			owner = st.placement.Locate(k)
		} else {
			r := st.mig.Route(k, now)
			owner, dual = r.New, r.Fallback
		}
		held := false
		if o := owners.Of(owner.Addr, store); o != nil {
			v, found, ok := o.Peek(k, at)
			if held = ok && (found || !dual); held {
				o.Hit()
				if found {
					hit(k, v)
					if st.mig != nil {
						st.mig.Counters.NewHits.Add(1)
					}
				}
			}
		}
		switch {
		case held && !cut:
			cut, rest = true, keys[:i:i]
		case !held && cut:
			if !own {
				own, rest = true, append(make([]string, 0, len(rest)+len(keys)-i), rest...)
			}
			rest = append(rest, k)
		}
	}
	owners.Count()
	if !cut {
		return keys
	}
	return rest
}

// NearCacheStats is one node's near cache: what it holds, and what the
// façade's reads found there.
type NearCacheStats struct {
	Node ring.Node
	// Hits counts the keys answered from process memory (by Get, GetMulti
	// and the reads sent through Client.Redis that go-redis caches): they
	// reached no server, and are not in the node's Stats (calls, hits,
	// latency) nor in its health. Misses counts the reads that went to the
	// node for want of a copy (Gets; GetMulti's go without filling it);
	// those are in its Stats.
	Hits, Misses int64
	// Entries and Bytes are what the cache holds now: copies, and their
	// estimated size.
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
		if m.near == nil {
			continue
		}
		s := m.near.Stats()
		ns := NearCacheStats{Node: m.rn, Hits: s.Hits, Misses: s.Misses, Entries: s.Entries, Bytes: s.Bytes}
		if rn, ok := m.Node.(interface {
			NearStats() (redisnode.NearStats, bool)
		}); ok {
			// The store's and go-redis's cache of the other reads, together.
			if s, ok := rn.NearStats(); ok {
				ns.Hits, ns.Misses, ns.Entries, ns.Bytes = s.Hits, s.Misses, s.Entries, s.Bytes
			}
		}
		out = append(out, ns)
	}
	slices.SortFunc(out, func(a, b NearCacheStats) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	return out
}
