package client

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/near"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/gutter"
	"github.com/shardcache/shardcache/internal/node/redisnode"
	"github.com/shardcache/shardcache/internal/node/replica"
	"github.com/shardcache/shardcache/ring"
)

// The client reaches each cache server through the node seam (package
// internal/node): a node.Node per physical node, made here from the
// options, reference-counted across both placements by internal/pool. The
// wire protocols live below it (internal/node/redisnode over go-redis,
// internal/node/mcnode over internal/wire/memcache); the client decides
// only where a call goes and what its outcome means.

// member is one node's client as the client holds it: the node, and its
// health, which the node tells the outcome of every call (probe.go).
type member struct {
	node.Node
	h *nodeHealth
	// down stands for the node while it is held down: every call fails at
	// once with ErrNodeDown (state.conn hands it out).
	down *failing
	// near is the node's near cache store, nil without Options.NearCache.
	near *near.Cache
	// gutter stands for the node while it is held down when there is a
	// gutter pool (gutter.go), outside a migration; nil without one.
	gutter *gutter.Node
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
	m.h.close()
	return err
}

// dial makes the client of node n, with its health; no connection is
// opened yet.
func (c *Client) dial(n ring.Node) (*member, error) {
	h := newNodeHealth(n, &c.opts)
	store := c.opts.NearCache.newStore()
	nd, err := c.newNode(n, h, store)
	if err != nil {
		return nil, err
	}
	h.ping = nd.Ping
	if ic, ok := nd.(node.IdleCloser); ok {
		h.flush = ic.CloseIdle
	}
	m := &member{Node: nd, h: h, down: newFailing(ErrNodeDown, h), near: store}
	if c.opts.Replicas > 1 {
		m.tomb = replicaTomb(&c.opts)
	}
	if m.gutter = c.gutterOf(n, m); m.gutter != nil || c.opts.Replicas > 1 {
		h.comeUp = m.comeUp
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

// failing stands for a node every call of which fails at once with err: a
// node held down (ErrNodeDown), counted in its statistics without a
// latency (the call never reached the network), or one the client has no
// connection to (ErrUnknownNode). It has every capability a node has, so
// that code asserting one sees the failure rather than none.
type failing struct {
	err error
	h   *nodeHealth // nil: nothing counted
	p   failedPending
}

// unlisted is the node of an address the client has no connection for.
var unlisted = newFailing(ErrUnknownNode, nil)

func newFailing(err error, h *nodeHealth) *failing {
	return &failing{err: err, h: h, p: failedPending{err}}
}

var (
	_ node.Node    = (*failing)(nil)
	_ node.Items   = (*failing)(nil)
	_ node.Sweeper = (*failing)(nil)
	_ node.Leaser  = (*failing)(nil)
)

// fail counts a call of kind op and returns the error.
func (f *failing) fail(op node.Op) error {
	if f.h != nil {
		f.h.stats.record(op, time.Time{}, f.err)
	}
	return f.err
}

func (f *failing) Get(context.Context, string) ([]byte, error) { return nil, f.fail(node.OpGet) }
func (f *failing) GetMulti(context.Context, []string, bool) ([]node.Item, error) {
	return nil, f.fail(node.OpGetMulti)
}
func (f *failing) Send(context.Context, []string) node.Pending {
	f.fail(node.OpGetMulti)
	return &f.p
}
func (f *failing) Set(context.Context, string, []byte, time.Duration) error {
	return f.fail(node.OpSet)
}
func (f *failing) SetMulti(context.Context, []node.Item) error { return f.fail(node.OpSetMulti) }
func (f *failing) Add(context.Context, string, []byte, time.Duration) error {
	return f.fail(node.OpAdd)
}
func (f *failing) AddMulti(context.Context, []node.Item) ([]bool, error) {
	return nil, f.fail(node.OpAddMulti)
}
func (f *failing) Delete(context.Context, string) error        { return f.fail(node.OpDelete) }
func (f *failing) DeleteMulti(context.Context, []string) error { return f.fail(node.OpDeleteMulti) }
func (f *failing) Bury(context.Context, []string, time.Duration, node.TombKind) ([]bool, error) {
	return nil, f.fail(node.OpDeleteMulti)
}
func (f *failing) Incr(context.Context, string, int64) (int64, error) {
	return 0, f.fail(node.OpIncr)
}
func (f *failing) Touch(context.Context, string, time.Duration) error { return f.fail(node.OpTouch) }
func (f *failing) Ping(context.Context) error                         { return f.err }
func (f *failing) Close() error                                       { return nil }

func (f *failing) GetItem(context.Context, string) (node.Item, error)   { return node.Item{}, f.err }
func (f *failing) Store(context.Context, node.StoreOp, node.Item) error { return f.err }
func (f *failing) DeleteFound(context.Context, string) (bool, error)    { return false, f.err }
func (f *failing) Flush(context.Context) error                          { return f.err }
func (f *failing) GetAndTouch(context.Context, string, time.Duration) (node.Item, error) {
	return node.Item{}, f.err
}
func (f *failing) IncrDecr(context.Context, string, uint64, bool) (uint64, error) { return 0, f.err }

func (f *failing) Scan(context.Context, string, int, func([]node.Item) error) error { return f.err }
func (f *failing) Dump(context.Context, []node.Item) ([]node.Item, error)           { return nil, f.err }
func (f *failing) Restore(context.Context, []node.Item) ([]bool, error)             { return nil, f.err }
func (f *failing) Exists(context.Context, []string) ([]bool, error)                 { return nil, f.err }
func (f *failing) Size(context.Context) (int64, error)                              { return 0, f.err }

func (f *failing) StoreLeased(context.Context, []node.Item, []string, string) ([]bool, error) {
	return nil, f.fail(node.OpLease)
}
func (f *failing) ReleaseLeases(context.Context, []string, string) error { return f.fail(node.OpLease) }

// failedPending is a multi-get that failed before it was sent.
type failedPending struct{ err error }

func (p *failedPending) Recv([]node.Answer) error { return p.err }

// items returns n's item capability: both backends have it.
func items(n node.Node) node.Items {
	if in, ok := n.(node.Items); ok {
		return in
	}
	return unlisted
}

// sweeper returns n's sweep capability, nil without one.
func sweeper(n node.Node) node.Sweeper {
	sn, _ := n.(node.Sweeper)
	return sn
}

// leaser returns n's lease capability.
func leaser(n node.Node) node.Leaser {
	if ln, ok := n.(node.Leaser); ok {
		return ln
	}
	return unlisted
}

// redisOf returns the go-redis client of a Redis node, for the client's
// own commands on it (RedisDo), without handing it out (see Redis).
func redisOf(n node.Node) (*redis.Client, error) {
	switch n := n.(type) {
	case *failing:
		return nil, n.err
	case *gutter.Node:
		return nil, ErrNodeDown
	case *replica.Set:
		return nil, fmt.Errorf("%w: a Redis command on a replica set (Options.Replicas)", ErrUnsupported)
	case interface{ Client() *redis.Client }:
		return n.Client(), nil
	}
	return nil, fmt.Errorf("%w: a Redis command on a Memcached node", ErrUnsupported)
}
