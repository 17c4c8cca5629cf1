package client

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/near"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/gutter"
	"github.com/shardcache/shardcache/internal/node/health"
	"github.com/shardcache/shardcache/internal/node/redisnode"
	"github.com/shardcache/shardcache/ring"
)

// The client reaches each cache server through the node seam (package
// internal/node): a node.Node per physical node, made here from the
// options, reference-counted across both placements by internal/pool. The
// wire protocols live below it (internal/node/redisnode over go-redis,
// internal/node/mcnode over internal/wire/memcache); the client decides
// only where a call goes and what its outcome means.

// member is one node's client as the client holds it: the node, and its
// health, which the node tells the outcome of every call (health.go).
type member struct {
	node.Node
	rn ring.Node
	h  *health.Observer
	// down stands for the node while it is held down: every call fails at
	// once with ErrNodeDown (state.conn hands it out).
	down *node.Failing
	// near is the node's near cache store, nil without Options.NearCache.
	near *near.Cache
	// gutter stands for the node while it is held down when there is a
	// gutter pool (gutter.go), outside a migration; nil without one.
	gutter *gutter.Node
	// gutterTo is the gutter pool's node that gutter sends to.
	gutterTo *member
	// hints are the keys written while the node missed them: through its
	// gutter, or as a replica (replicas.go). They are replayed as deletes
	// before the node serves again (comeUp).
	hints gutter.Hints
	// tomb, with replicas, buries a key missed while the node was up
	// rather than deleting it, so that a read's repair that read another
	// replica before the write cannot land after (member.Wrote).
	tomb time.Duration
}

// Close closes the node, which ends the calls in flight on it, then stops
// its probe.
func (m *member) Close() error {
	err := m.Node.Close()
	m.h.Close()
	return err
}

// dial makes the client of node n, with its health; no connection is
// opened yet.
func (c *Client) dial(n ring.Node) (*member, error) {
	h := newHealth(n, &c.opts)
	store := c.opts.NearCache.newStore()
	nd, err := c.newNode(n, h, store)
	if err != nil {
		return nil, err
	}
	h.Ping = nd.Ping
	if ic, ok := nd.(node.IdleCloser); ok {
		h.Flush = ic.CloseIdle
	}
	m := &member{Node: nd, rn: n, h: h, down: node.NewFailing(ErrNodeDown, h), near: store}
	if c.opts.Replicas > 1 {
		m.tomb = replicaTomb(&c.opts)
	}
	if m.gutter = c.gutterOf(n, m); m.gutter != nil || c.opts.Replicas > 1 {
		h.ComeUp = m.comeUp
	}
	if tw, ok := nd.(node.TombstoneWatcher); ok && c.opts.Replicas > 1 {
		tw.ExpectTombstones(time.Now().AddDate(100, 0, 0)) // a replica set's deletes bury (replicas.go)
	}
	return m, nil
}

// newNode makes the backend's node client of n, telling obs of its calls
// and filling store (nil: no near cache).
func (c *Client) newNode(n ring.Node, obs node.Observer, store *near.Cache) (node.Node, error) {
	o := &c.opts
	if err := checkAddr(n.Addr); err != nil {
		return nil, err
	}
	creds, err := o.credentials(n)
	if err != nil {
		return nil, err
	}
	if o.Backend == Memcached {
		return c.newMemcachedNode(n, creds, obs, store)
	}
	cfg := redisnode.Config{
		Addr: n.Addr, Username: creds.Username, Password: creds.Password, DB: creds.DB, TLS: creds.TLSConfig,
		PoolSize: o.PoolSize, MaxIdle: o.MaxIdle, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		AutoPipeline: o.AutoPipeline, NearCache: o.NearCache.forNode(store), Observer: obs,
	}
	if o.NewRedisClient != nil {
		cfg.NewClient = func(opt *redis.Options) *redis.Client { return o.NewRedisClient(n, opt) }
		if o.ReleaseRedisClient != nil {
			cfg.Release = func(c *redis.Client) { o.ReleaseRedisClient(n, c) }
		}
	}
	nd, err := redisnode.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: node %s: %w", ErrBadOptions, n.Addr, err)
	}
	return nd, nil
}

// checkAddr refuses an address the dialer would read as another, as
// ring.New does, for the nodes of a Placement of the caller's.
func checkAddr(addr string) error {
	if err := ring.CheckAddr(addr); err != nil {
		return fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	return nil
}

// unlisted is the node of an address the client has no connection for.
var unlisted = node.NewFailing(ErrUnknownNode, nil)

// items returns n's item capability: both backends have it.
func items(n node.Node) node.Items {
	if in, ok := n.(node.Items); ok {
		return in
	}
	return unlisted
}

// redisOf returns the go-redis client of a Redis node, for the client's
// own commands on it (RedisDo), without handing it out (see Redis); a
// stand-in for other nodes says why it has none.
func redisOf(n node.Node) (*redis.Client, error) {
	if r, ok := n.(node.Refuser); ok {
		return nil, r.Refuse()
	}
	if r, ok := n.(interface{ Client() *redis.Client }); ok {
		return r.Client(), nil
	}
	return nil, fmt.Errorf("%w: a Redis command on a Memcached node", ErrUnsupported)
}
