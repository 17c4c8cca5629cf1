// Package gomemcache is a drop-in for gomemcache's *memcache.Client that
// shards keys over many Memcached servers with shardcache's ring and keeps
// them through a resharding.
//
// A program written for github.com/bradfitz/gomemcache changes its
// constructor and nothing else:
//
//	-mc := memcache.New("10.0.0.1:11211", "10.0.0.2:11211")
//	+mc, err := gomemcache.New([]ring.Node{{Addr: "10.0.0.1:11211"}, {Addr: "10.0.0.2:11211"}})
//	 it, err := mc.Get("user:42") // *memcache.Item; err == memcache.ErrCacheMiss on a miss
//
// *Client has the methods of *memcache.Client with the same signatures,
// takes and returns gomemcache's own *memcache.Item (Flags, Expiration and
// CasID kept) and returns gomemcache's errors with its semantics: its
// sentinels bare (err == memcache.ErrCacheMiss holds), Delete or Increment
// of a missing key memcache.ErrCacheMiss, a failed condition
// memcache.ErrNotStored or memcache.ErrCASConflict, a bad key
// memcache.ErrMalformedKey, no nodes memcache.ErrNoServers. A server's
// error line reads as gomemcache reports it in that method (from
// Increment, "memcache: client error: cannot increment or decrement
// non-numeric value"; from Set, "memcache: unexpected response line from"
// the verb and the line, quoted), a SERVER_ERROR is also
// memcache.ErrServerError, and a dial that timed out a
// *memcache.ConnectTimeoutError; each of these wraps the client's
// *client.NodeError naming the node, which errors.Is and errors.As reach
// with its cause. Keys are placed by a ring.Ring, and Reshard runs the
// dual-ring migration of package client: reads fall back to the old owner
// and backfill the new one, writes and deletes reach both owners, and
// Replace, Append, Prepend, CompareAndSwap, Increment and Decrement on a
// key only its old owner holds find it as on one server. Every mechanism is
// package client's; this package translates types, errors and semantics.
//
// Where it differs from gomemcache:
//   - An empty key is memcache.ErrMalformedKey (gomemcache sends it and
//     reports the server's error).
//   - A negative Expiration, or an absolute one in the past, is an error
//     wrapping client.ErrBadTTL (Memcached would store an item that is
//     already expired).
//   - DeleteAll and FlushAll both flush every node (gomemcache's DeleteAll
//     flushes the one server the empty key maps to).
//   - A value over the server's item limit is refused before it is sent,
//     with the text of the server's refusal ("SERVER_ERROR object too
//     large for cache"), and is also client.ErrValueTooLarge.
//   - The sentinels are not also package client's (a value cannot be
//     both); another error, a network one included, is a
//     *client.NodeError naming the node (gomemcache returns the network's
//     own, which errors.Is and errors.As reach through it).
//   - The client's DialContext field is not there: TLS and ASCII
//     authentication are Options; PoolSize bounds each node's
//     connections, where gomemcache bounds only its idle ones
//     (MaxIdleConns, which keeps its meaning here).
//   - Timeout and MaxIdleConns are read at the first call: set them
//     before, as after New.
//
// For code that keeps memcache.NewFromSelector and wants only our placement,
// NewSelector gives a memcache.ServerSelector over any ring.Locator.
//
// gomemcache's own tests run against the drop-in (internal/upstream, its
// test files copied byte for byte): the suite's body against three
// memcached servers, three of gomemcache's fake servers, three over TLS
// and through a Reshard at each of 13 points of it; TestFakeServer,
// TestScanGetResponseLine (on the drop-in's parser) and the placement
// benchmarks as they are. Excluded, for these reasons:
//   - TestLocalhost needs a memcached someone runs on localhost:11211, and
//     skips without one: its body runs against servers started for it.
//   - TestUnixSocket: a node is a TCP address, host:port; the drop-in
//     cannot reach a Unix socket.
//   - TestTLS sets DialContext, which the drop-in does not have: its body
//     runs over TLS with Options.TLSConfig.
//   - TestScanGetResponseLine's size-max-uint32: a value of 2^31-1 bytes is
//     refused (over 512 MiB) rather than allocated.
//   - BenchmarkOnItem times gomemcache's private connection path.
package gomemcache

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// Options configures NewWithOptions. The zero value is usable.
type Options struct {
	// Vnodes is the ring's points per unit of weight, for the nodes and for
	// Reshard. Default ring.DefaultVnodes.
	Vnodes int
	// MigrateFrom resumes a migration already under way (see
	// client.Options.MigrateFrom).
	MigrateFrom *client.MigrateFrom
	// TLSConfig, Username and Password protect every node's connections
	// and log in to them (memcached -Z and -Y), as client.Options's fields
	// of the same names.
	TLSConfig          *tls.Config
	Username, Password string
	// PoolSize is the most connections per node (gomemcache has no bound;
	// MaxIdleConns bounds its idle ones). Default client's.
	PoolSize int
}

// Client is a sharded Memcached client with the method set of
// *memcache.Client. It is safe for concurrent use.
type Client struct {
	// Timeout specifies the socket read/write timeout.
	// If zero, memcache.DefaultTimeout (500ms) is used.
	Timeout time.Duration
	// MaxIdleConns specifies the maximum number of idle connections that
	// will be maintained per node. If less than one,
	// memcache.DefaultMaxIdleConns (2) is used.
	//
	// Set Timeout and MaxIdleConns before the Client is first used, as
	// gomemcache's users do: the first call builds the node clients with
	// them, and later changes are not seen.
	MaxIdleConns int

	opts  client.Options // what New was given, for the node clients
	mu    sync.Mutex     // serialises the first use
	used  atomic.Bool    // the knobs have been read
	cc    *client.Client // built with built's knobs; rebuilt at first use if they changed
	built knobs
}

// knobs are the Client fields that configure the node clients.
type knobs struct {
	timeout time.Duration
	maxIdle int
}

// New returns a client over nodes, placed by a ring.Ring. It dials nothing:
// connections are made on first use.
func New(nodes []ring.Node) (*Client, error) {
	return NewWithOptions(nodes, Options{})
}

// NewWithOptions is New with options.
func NewWithOptions(nodes []ring.Node, opts Options) (*Client, error) {
	c := &Client{opts: client.Options{
		Backend:     client.Memcached,
		Nodes:       nodes,
		Vnodes:      opts.Vnodes,
		MigrateFrom: opts.MigrateFrom,
		TLSConfig:   opts.TLSConfig,
		Username:    opts.Username,
		Password:    opts.Password,
		PoolSize:    opts.PoolSize,
		// Backfills are synchronous, so that a Get during a migration
		// returns the CasID of the copy a CompareAndSwap will find.
	}}
	cc, err := client.New(c.options(knobs{}))
	if err != nil {
		return nil, noServers(err)
	}
	c.cc = cc
	return c, nil
}

// options returns the client's options with k applied, gomemcache's
// defaults for zero values.
func (c *Client) options(k knobs) client.Options {
	o := c.opts
	if k.timeout <= 0 {
		k.timeout = memcache.DefaultTimeout
	}
	if k.maxIdle <= 0 {
		k.maxIdle = memcache.DefaultMaxIdleConns
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = k.timeout, k.timeout, k.timeout
	o.MaxIdle = k.maxIdle
	return o
}

// c returns the client underneath, made again with Timeout and
// MaxIdleConns at the first use if they changed since New (nothing was
// dialed yet).
func (c *Client) c() *client.Client {
	if !c.used.Load() {
		c.firstUse()
	}
	return c.cc
}

func (c *Client) firstUse() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used.Load() {
		return
	}
	if k := (knobs{c.Timeout, c.MaxIdleConns}); k != c.built {
		if cc, err := client.New(c.options(k)); err == nil { // the same options New accepted
			c.cc.Close()
			c.cc, c.built = cc, k
		}
	}
	c.used.Store(true)
}

// ctx is the context of every call: gomemcache's API takes none, and
// Timeout bounds each network step.
func (c *Client) ctx() context.Context { return context.Background() }

// Shardcache returns the client.Client underneath, for what only it has
// (Stats, Locate, Nodes, contexts).
func (c *Client) Shardcache() *client.Client { return c.c() }

// Reshard moves the client to a ring of nodes; for window (the longest TTL
// the application writes) reads fall back to the current placement and
// writes reach both. See client.Client.Reshard.
func (c *Client) Reshard(nodes []ring.Node, window time.Duration) error {
	return noServers(c.c().Reshard(nodes, window))
}

// Migration returns the status of the latest migration, counters included.
func (c *Client) Migration() migration.Status { return c.c().Migration() }

// Get gets the item for the given key. memcache.ErrCacheMiss is returned
// for a cache miss. The key must be at most 250 bytes in length.
func (c *Client) Get(key string) (*memcache.Item, error) {
	it, err := c.c().GetItem(c.ctx(), key)
	if err != nil {
		return nil, mcErr(vGet, err)
	}
	return mcItem(&it), nil
}

// GetMulti is a batch version of Get. The returned map from keys to items
// may have fewer elements than the input slice, due to cache misses. When a
// node fails, the items of the others are returned with the error.
func (c *Client) GetMulti(keys []string) (map[string]*memcache.Item, error) {
	m := make(map[string]*memcache.Item, len(keys))
	// One allocation for all the items rather than one each.
	buf := make([]memcache.Item, 0, len(keys))
	err := c.c().GetItemsFunc(c.ctx(), keys, func(it client.Item) {
		if len(buf) == cap(buf) { // a key reported twice during a migration
			buf = make([]memcache.Item, 0, len(keys))
		}
		buf = append(buf, *mcItem(&it))
		m[it.Key] = &buf[len(buf)-1]
	})
	if errors.Is(err, client.ErrMalformedKey) {
		return nil, memcache.ErrMalformedKey
	}
	return m, mcErr(vGet, err)
}

// Set writes the given item, unconditionally.
func (c *Client) Set(item *memcache.Item) error { return c.store(client.StoreSet, item) }

// Add writes the given item, if no value already exists for its key.
// memcache.ErrNotStored is returned if that condition is not met.
func (c *Client) Add(item *memcache.Item) error { return c.store(client.StoreAdd, item) }

// Replace writes the given item, but only if the server *does* already hold
// data for this key; else memcache.ErrNotStored.
func (c *Client) Replace(item *memcache.Item) error { return c.store(client.StoreReplace, item) }

// Append appends the given item to the existing item, if a value already
// exists for its key. memcache.ErrNotStored is returned if that condition is
// not met.
func (c *Client) Append(item *memcache.Item) error { return c.store(client.StoreAppend, item) }

// Prepend prepends the given item to the existing item, if a value already
// exists for its key. memcache.ErrNotStored is returned if that condition is
// not met.
func (c *Client) Prepend(item *memcache.Item) error { return c.store(client.StorePrepend, item) }

// CompareAndSwap writes the given item that was previously returned by Get,
// if the value was neither modified nor evicted between the Get and the
// CompareAndSwap calls: memcache.ErrCASConflict if it was modified,
// memcache.ErrCacheMiss if it is gone (as gomemcache returns for Memcached's
// NOT_FOUND).
func (c *Client) CompareAndSwap(item *memcache.Item) error {
	return c.store(client.StoreCAS, item)
}

func (c *Client) store(op client.StoreOp, item *memcache.Item) error {
	ctx := c.ctx()
	ttl, err := ttlOf(item.Expiration)
	if err != nil {
		return err
	}
	return mcErr(verb(op.String()), c.c().Store(ctx, op, client.Item{
		Key: item.Key, Value: item.Value, Flags: item.Flags, TTL: ttl, CasID: item.CasID,
	}))
}

// Delete deletes the item with the provided key. memcache.ErrCacheMiss is
// returned if the item didn't already exist in the cache.
func (c *Client) Delete(key string) error {
	found, err := c.c().DeleteFound(c.ctx(), key)
	if err == nil && !found {
		return memcache.ErrCacheMiss
	}
	return mcErr(vDelete, err)
}

// DeleteAll deletes all items in the cache: it flushes every node.
func (c *Client) DeleteAll() error { return mcErr(vDeleteAll, c.c().Flush(c.ctx())) }

// FlushAll flushes every node.
func (c *Client) FlushAll() error { return mcErr(vFlushAll, c.c().Flush(c.ctx())) }

// Increment atomically increments key by delta. The return value is the new
// value after being incremented or an error. If the value didn't exist in
// memcached the error is memcache.ErrCacheMiss. On 64-bit overflow, the new
// value wraps around.
func (c *Client) Increment(key string, delta uint64) (newValue uint64, err error) {
	v, err := c.c().Increment(c.ctx(), key, delta)
	return v, mcErr(vIncr, err)
}

// Decrement atomically decrements key by delta, capped at zero. If the value
// didn't exist the error is memcache.ErrCacheMiss.
func (c *Client) Decrement(key string, delta uint64) (newValue uint64, err error) {
	v, err := c.c().Decrement(c.ctx(), key, delta)
	return v, mcErr(vDecr, err)
}

// Touch updates the expiry for the given key: seconds is a relative time of
// up to 30 days, or else a Unix time; zero means no expiry.
// memcache.ErrCacheMiss is returned if the key is not in the cache.
func (c *Client) Touch(key string, seconds int32) error {
	ctx := c.ctx()
	ttl, err := ttlOf(seconds)
	if err != nil {
		return err
	}
	return mcErr(vTouch, c.c().Touch(ctx, key, ttl))
}

// GetAndTouch gets the item with the provided key and updates its expiry.
// memcache.ErrCacheMiss is returned if the item didn't already exist in the
// cache.
func (c *Client) GetAndTouch(key string, expiration int32) (*memcache.Item, error) {
	ctx := c.ctx()
	ttl, err := ttlOf(expiration)
	if err != nil {
		return nil, err
	}
	it, err := c.c().GetAndTouch(ctx, key, ttl)
	if err != nil {
		return nil, mcErr(vGet, err)
	}
	it.CasID = 0 // gomemcache's gat answers none
	return mcItem(&it), nil
}

// Ping checks that every node is alive. It returns an error if any of them
// is down.
func (c *Client) Ping() error { return mcErr(vPing, c.c().Ping(c.ctx())) }

// Close closes the idle connections of every node. As with gomemcache, the
// Client may still be used after Close.
func (c *Client) Close() error {
	c.c().CloseIdleConnections()
	return nil
}

// maxRelative is the largest expiration Memcached reads as seconds from
// now; larger ones are Unix times.
const maxRelative = 30 * 24 * 60 * 60

// ttlOf converts Memcached's expiration field to a TTL.
func ttlOf(exp int32) (time.Duration, error) {
	switch {
	case exp == 0:
		return 0, nil
	case exp < 0:
		return 0, fmt.Errorf("%w: expiration %d", client.ErrBadTTL, exp)
	case exp <= maxRelative:
		return time.Duration(exp) * time.Second, nil
	}
	ttl := time.Until(time.Unix(int64(exp), 0))
	if ttl <= 0 {
		return 0, fmt.Errorf("%w: expiration %d is in the past", client.ErrBadTTL, exp)
	}
	return ttl, nil
}

func mcItem(it *client.Item) *memcache.Item {
	return &memcache.Item{Key: it.Key, Value: it.Value, Flags: it.Flags, CasID: it.CasID}
}
