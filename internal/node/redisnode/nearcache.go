package redisnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/near"
)

// The near cache's copies of the node's GETs are in a store of package
// near, which the client reads before it calls the node (a hit costs no
// command and no call); go-redis's client-side caching (RESP3 CLIENT
// TRACKING, EXPERIMENTAL in go-redis; go.mod pins the version) fills it
// and keeps it current, through the Cache go-redis is given:
//
//   - nearCache is that Cache. A GET's reply is kept in the store under its
//     key (go-redis reserves it before the read is sent and fulfills it
//     with the reply, on behalf of the connection that read it); the other
//     reads go-redis may cache, those sent through Node.Redis (HGET, ...),
//     go to a go-redis LocalCache beside it. The server tells the
//     connection that read a key when any client changes it, and go-redis
//     hands the invalidation to nearCache (DeleteByRedisKey); a connection
//     that goes takes its copies with it (EvictByConn): nobody would report
//     their changes any more. go-redis reads its idle connections for
//     invalidations every DrainInterval; a connection in use reads them
//     with its next reply.
//   - Before and after a write through the node's go-redis client, the
//     hook drops the key's near copies (evict): before, so that no read of
//     this process answers the old value from memory once the server may
//     hold the new one (a read that began after another one returned the
//     new value would go back); after, so that this process reads its own
//     writes without waiting for the server's invalidation, and a read in
//     flight keeps nothing it read before the write.
//   - nearMark tells the hook that a call was answered from process memory
//     (a GET or other read sent through Node.Redis that go-redis answered
//     from the cache): such a call is not a call to the node, for the
//     observer.
//
// A near copy comes only from reads that are not pipelined: the
// migration's reads of old owners are pipelines (GetMulti with TTLs),
// which go-redis never answers from its cache nor fills it with.

// NearCache configures a node's near cache.
type NearCache struct {
	// Store holds the copies of the node's GETs, which the client reads
	// before it calls the node.
	Store *near.Cache
	// MaxEntries, MaxBytes and MaxAge bound go-redis's LocalCache of the
	// other reads sent through Node.Redis. MaxEntries negative: no bound on
	// entries; MaxAge negative: no bound.
	MaxEntries    int
	MaxBytes      int64
	MaxAge        time.Duration
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

// NearStats returns the node's near cache statistics, the store's and the
// other reads' together; false without one.
func (n *Node) NearStats() (NearStats, bool) {
	if n.near == nil {
		return NearStats{}, false
	}
	st, other := n.near.store.Stats(), n.near.other.Stats()
	return NearStats{
		Hits:    st.Hits + n.near.otherHits.Load(),
		Misses:  st.Misses + n.near.otherMisses.Load(),
		Entries: st.Entries + other.Entries,
		Bytes:   st.Bytes + other.MemoryUsageBytes,
	}, true
}

// config is go-redis's configuration of one node's LocalCache.
func (nc *NearCache) config() redis.CacheConfig {
	cfg := redis.CacheConfig{MaxEntries: max(nc.MaxEntries, 0), MaxMemoryBytes: nc.MaxBytes, DrainInterval: nc.DrainInterval}
	if nc.MaxAge > 0 {
		cfg.MaxStaleness = nc.MaxAge
	}
	return cfg
}

// nearCache is one node's near cache, seen by go-redis through
// Options.ClientSideCache: the store of its GETs, and a LocalCache of the
// other reads go-redis caches.
type nearCache struct {
	store *near.Cache
	other *redis.LocalCache
	// prefix is go-redis's namespace of the node's keys in the cache (its
	// cscNamespacePrefix: the DB and the ACL user), which cache keys and
	// invalidations carry. Reserve checks it on every fill, so that a
	// go-redis that changed it caches nothing rather than keep copies
	// evict cannot reach.
	prefix string
	// otherHits counts the reads the LocalCache answered, otherMisses
	// those it did not (the store counts its own).
	otherHits, otherMisses atomic.Int64
}

var _ redis.Cache = (*nearCache)(nil)

// forNode gives the go-redis options of node n a near cache, when nc is set:
// RESP3 and a Cache over nc's store. It returns the cache, nil when nc is
// nil.
func (nc *NearCache) forNode(addr string, opt *redis.Options) (*nearCache, error) {
	if nc == nil {
		return nil, nil
	}
	if opt.DB != 0 { // NodeCredentials can set it per node
		return nil, fmt.Errorf("%w: node %s: go-redis caches only database 0, not DB %d", ErrNearCache, addr, opt.DB)
	}
	if nc.Store == nil {
		return nil, fmt.Errorf("%w: node %s: no store", ErrNearCache, addr)
	}
	cfg := nc.config()
	c := &nearCache{store: nc.Store, other: redis.NewLocalCache(cfg)}
	opt.Protocol = 3
	opt.ClientSideCache = c
	// Beside an explicit ClientSideCache go-redis reads its config only for
	// the drain interval (and to check MaxStaleness against other options).
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

// getPrefix starts go-redis's cache key of a GET, after the namespace: the
// command as it is written on the wire, up to the key's length.
const getPrefix = "*2\r\n$3\r\nget\r\n$"

// getKey returns the key of cacheKey when it is a GET's in c's namespace.
func (c *nearCache) getKey(cacheKey string) (string, bool) {
	rest, ok := strings.CutPrefix(cacheKey, c.prefix)
	if !ok || c.prefix == "" {
		return "", false
	}
	if rest, ok = strings.CutPrefix(rest, getPrefix); !ok {
		return "", false
	}
	i := strings.IndexByte(rest, '\r')
	if i < 1 {
		return "", false
	}
	n, err := strconv.Atoi(rest[:i])
	if err != nil || n < 0 || len(rest) != i+2+n+2 || rest[i+1] != '\n' || rest[i+2+n:] != "\r\n" {
		return "", false
	}
	return rest[i+2 : i+2+n], true
}

// getReply returns the value of a GET's reply as go-redis read it, raw: a
// bulk string, or a null for a miss; ok is false for anything else. The
// value is raw's own memory.
func getReply(raw []byte) (value []byte, found, ok bool) {
	switch s := string(raw); {
	case s == "_\r\n" || s == "$-1\r\n":
		return nil, false, true
	case len(s) < 5 || s[0] != '$' || !strings.HasSuffix(s, "\r\n"):
		return nil, false, false
	}
	i := bytes.IndexByte(raw, '\r')
	n, err := strconv.Atoi(string(raw[1:i]))
	if err != nil || n < 0 || len(raw) != i+2+n+2 || raw[i+1] != '\n' {
		return nil, false, false
	}
	return raw[i+2 : i+2+n : i+2+n], true, true
}

// getReplyOf is the raw reply of a GET that found value (or, !found, none).
func getReplyOf(value []byte, found bool) []byte {
	if !found {
		return []byte("_\r\n")
	}
	b := make([]byte, 0, len(value)+16)
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(value)), 10)
	b = append(b, "\r\n"...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}

// Get answers a read go-redis would send, from the store for a GET (the
// client looked there first: this is a read sent through Node.Redis, or
// one filled meanwhile), and marks the call's nearMark.
func (c *nearCache) Get(ctx context.Context, cacheKey string) ([]byte, bool) {
	var v []byte
	if key, ok := c.getKey(cacheKey); ok {
		value, found, ok := c.store.Get(key)
		if !ok {
			return nil, false
		}
		v = getReplyOf(value, found)
	} else if v, ok = c.other.Get(ctx, cacheKey); ok {
		c.otherHits.Add(1)
	} else {
		return nil, false
	}
	if m, _ := ctx.Value(nearMarkKey{}).(*nearMark); m != nil {
		m.hit.Store(true)
	}
	return v, true
}

// Reserve registers a read about to be sent, for keys in the namespace
// evict knows; other keys are fetched without being kept (token 0, as
// LocalCache answers when full).
func (c *nearCache) Reserve(cacheKey string, redisKeys []string) (uint64, bool) {
	for _, k := range redisKeys {
		if !strings.HasPrefix(k, c.prefix) || c.prefix == "" {
			return 0, true
		}
	}
	if key, ok := c.getKey(cacheKey); ok {
		return c.store.Reserve(key), true
	}
	c.otherMisses.Add(1)
	return c.other.Reserve(cacheKey, redisKeys)
}

// FulfillOwned keeps the reply of a reserved read, fetched by connection
// ownerConnID.
func (c *nearCache) FulfillOwned(cacheKey string, token, ownerConnID uint64, value []byte) bool {
	key, ok := c.getKey(cacheKey)
	if !ok {
		return c.other.FulfillOwned(cacheKey, token, ownerConnID, value)
	}
	v, found, ok := getReply(value)
	if !ok || token == 0 {
		c.store.Cancel(key, token)
		return false
	}
	return c.store.Fulfill(key, token, v, found, ownerConnID)
}

// Cancel ends a reservation, which keeps nothing.
func (c *nearCache) Cancel(cacheKey string, token uint64) bool {
	if key, ok := c.getKey(cacheKey); ok {
		c.store.Cancel(key, token)
		return true
	}
	return c.other.Cancel(cacheKey, token)
}

// DeleteByRedisKey drops every copy that read redisKey (in the namespace):
// the server's invalidation, or evict's.
func (c *nearCache) DeleteByRedisKey(redisKey string) int {
	n := c.other.DeleteByRedisKey(redisKey)
	if key, ok := strings.CutPrefix(redisKey, c.prefix); ok && c.prefix != "" && c.store.Delete(key) {
		n++
	}
	return n
}

// DeleteByCacheKey drops one cached reply.
func (c *nearCache) DeleteByCacheKey(cacheKey string) bool {
	if key, ok := c.getKey(cacheKey); ok {
		return c.store.Delete(key)
	}
	return c.other.DeleteByCacheKey(cacheKey)
}

// EvictByConn drops the copies connection connID read: it is gone, and
// its invalidations with it.
func (c *nearCache) EvictByConn(connID uint64) int {
	return c.store.EvictOwner(connID) + c.other.EvictByConn(connID)
}

// Flush drops every copy.
func (c *nearCache) Flush() int { return c.store.Flush() + c.other.Flush() }

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
// in its csc_commands.go), and the other reads the façade sends: none
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
