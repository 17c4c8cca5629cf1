// Package mcnode is a Memcached node: node.Node and its capabilities
// (node.Items, node.Sweeper, node.Leaser, node.IdleCloser) over
// internal/wire/memcache, one bounded pool of connections per node.
//
// Every call tells the Observer its outcome once, with the kind of call
// the client's statistics count it as: a Get, a GetItem and a
// GetAndTouch are OpGet; Store is OpSet or OpAdd for set and add, OpOther
// for the other four; a multi-get is OpGetMulti, with the keys found and
// missed (Observer.Keys); an Exists is OpExists, and a sweep's listing,
// dumps, restores and Size are OpSweep, as on Redis, without keys counted:
// they are no reads of the application's, and would skew its hit rate;
// the leases' stores and releases OpLease; Ping OpPing. With
// Config.Batch, each Get that waited in a batch is observed as one Get.
// Errors are the node package's sentinels (node.ErrCacheMiss itself for a
// miss), the others as the wire gave them (wire.ErrPoolTimeout among
// them).
//
// WithNear puts a node behind a near cache's store (package near), which
// its Gets fill and its writes drop copies from.
//
//	n := mcnode.New(mcnode.Config{Addr: "10.0.0.1:11211", PoolSize: 8, Observer: obs})
//	defer n.Close()
//	v, err := n.Get(ctx, "user:42") // node.ErrCacheMiss on a miss
package mcnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/wire"
	"github.com/shardcache/shardcache/internal/wire/memcache"
)

// Config configures a Node. The zero value of every field but Addr is
// usable.
type Config struct {
	// Addr is the server's "host:port".
	Addr string
	// PoolSize is the most connections open to the server at once, in
	// use, idle or being dialed; a call that finds them all busy waits.
	// Default wire.DefaultSize.
	PoolSize int
	// MaxIdle is the most idle connections kept; default PoolSize.
	MaxIdle int
	// DialTimeout, ReadTimeout and WriteTimeout bound each step of a call,
	// and PoolTimeout the wait for a connection (see wire.Config).
	DialTimeout, ReadTimeout, WriteTimeout, PoolTimeout time.Duration
	// IdleTimeout and MaxLifetime retire connections (see wire.Config).
	IdleTimeout, MaxLifetime time.Duration
	// Budget, when set, is shared with another client of the server.
	Budget *wire.Budget
	// Dial, when set, opens the connections instead of the node's dialer
	// (TCP, then TLS and the login below): the caller's then does it all.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLS, when set, makes every connection TLS.
	TLS *tls.Config
	// Username and Password log each connection in (memcached -Y).
	Username, Password string
	// Batch batches Gets naturally: while one Get or batch is in flight,
	// the Gets that arrive wait and go together in the next multi-get.
	Batch bool
	// MaxValueSize, when positive, replaces the limit learned from the
	// server's item_size_max (a proxy's, which it does not tell).
	MaxValueSize int
	// Observer is told every call's outcome; default node.Discard.
	Observer node.Observer
}

// Node is one Memcached server's node. It is safe for concurrent use.
type Node struct {
	mc    *memcache.Client
	obs   node.Observer
	batch *batcher // nil without Config.Batch
	// tombsUntil is when tombstones may be gone, in Unix nanoseconds
	// (tomb.go).
	tombsUntil atomic.Int64
}

var (
	_ node.Node        = (*Node)(nil)
	_ node.Items       = (*Node)(nil)
	_ node.Sweeper     = (*Node)(nil)
	_ node.Leaser      = (*Node)(nil)
	_ node.LeaseReader = (*Node)(nil)
	_ node.IdleCloser  = (*Node)(nil)

	_ node.TombstoneWatcher = (*Node)(nil)
)

// New returns the node of the server at cfg.Addr. It dials nothing yet.
func New(cfg Config) *Node {
	mc := memcache.New(memcache.Config{
		Config: wire.Config{
			Addr: cfg.Addr, Dial: cfg.Dial, Size: cfg.PoolSize, MaxIdle: cfg.MaxIdle,
			IdleTimeout: cfg.IdleTimeout, MaxLifetime: cfg.MaxLifetime,
			DialTimeout: cfg.DialTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout,
			PoolTimeout: cfg.PoolTimeout, Budget: cfg.Budget,
		},
		TLS: cfg.TLS, Username: cfg.Username, Password: cfg.Password, MaxValueSize: cfg.MaxValueSize,
	})
	n := &Node{mc: mc, obs: cfg.Observer}
	if n.obs == nil {
		n.obs = node.Discard
	}
	if cfg.Batch {
		n.batch = &batcher{}
	}
	return n
}

// Client returns the node's protocol client, for what the node interface
// does not say (meta commands, stats).
func (n *Node) Client() *memcache.Client { return n.mc }

// Get returns key's value, or node.ErrCacheMiss: one "gets" on the
// caller's goroutine, the value its one allocation (or through the
// batcher, with Config.Batch).
func (n *Node) Get(ctx context.Context, key string) ([]byte, error) {
	if n.batch != nil {
		return n.batch.get(ctx, n, key)
	}
	return n.get(ctx, key)
}

func (n *Node) get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // nothing sent: no outcome of the node's
	}
	start := n.obs.Begin()
	it, err := n.mc.Get(ctx, key)
	if err == nil && isHidden(it.Value, it.Flags) {
		err = memcache.ErrCacheMiss
	}
	err = nodeErr(err)
	n.obs.Done(ctx, node.OpGet, start, err)
	return it.Value, err
}

// GetMulti reads keys in one round trip. With withTTL, where the server
// has the meta commands, it reads each hit's value, flags, CAS id and
// remaining TTL with pipelined "mg <key> v f t c" (TTLKnown); otherwise
// one "gets", flags and CAS ids but no TTL.
func (n *Node) GetMulti(ctx context.Context, keys []string, withTTL bool) ([]node.Item, error) {
	return n.getMulti(ctx, node.OpGetMulti, keys, withTTL)
}

// getMulti is GetMulti observed as a call of kind op: OpGetMulti for the
// application's reads, OpSweep and OpExists for the sweep's and the
// copies' (sweep.go), whose keys are not counted (see keys).
func (n *Node) getMulti(ctx context.Context, op node.Op, keys []string, withTTL bool) ([]node.Item, error) {
	if withTTL {
		items, err := n.getTTL(ctx, op, keys)
		if !errors.Is(err, memcache.ErrNoMeta) {
			return items, err
		}
	}
	out := make([]node.Answer, len(keys))
	if err := n.send(ctx, op, keys).Recv(out); err != nil {
		return nil, err
	}
	items := make([]node.Item, len(keys))
	for i := range out {
		items[i] = node.AnswerItem(keys[i], &out[i])
	}
	return items, nil
}

// getTTL is GetMulti with mg; memcache.ErrNoMeta, not observed, when the
// server has no meta commands (a capability, not a failure).
func (n *Node) getTTL(ctx context.Context, op node.Op, keys []string) ([]node.Item, error) {
	out := make([]memcache.TTLAnswer, len(keys))
	start := n.obs.Begin()
	found, err := n.mc.GetTTL(ctx, keys, out)
	if errors.Is(err, memcache.ErrNoMeta) {
		return nil, err
	}
	err = nodeErr(err)
	n.obs.Done(ctx, op, start, err)
	if err != nil {
		return nil, err
	}
	items := make([]node.Item, len(keys))
	for i := range out {
		a := &out[i]
		if a.Found && isHidden(a.Value, a.Flags) {
			*a, found = memcache.TTLAnswer{}, found-1
		}
		items[i] = node.AnswerItem(keys[i], &a.Answer)
		if a.Found {
			items[i].TTL, items[i].TTLKnown = remaining(a.TTL), true
		}
	}
	n.keys(op, found, len(keys)-found)
	return items, nil
}

// keys tells the observer the keys a multi-get of kind op found and
// missed, for the application's reads (OpGetMulti) only: the hit rates
// are read from them, and the sweep's dumps and Exists, which read keys
// the application did not ask for, would move them (Redis's hook counts
// the same).
func (n *Node) keys(op node.Op, found, missed int) {
	if op == node.OpGetMulti {
		n.obs.Keys(op, found, missed)
	}
}

// remaining converts mg's remaining TTL to a Duration: -1 (none) is 0,
// and 0 (expiring within the second) 1 ms, so that it still expires.
func remaining(secs int64) time.Duration {
	switch {
	case secs < 0:
		return 0
	case secs == 0:
		return time.Millisecond
	}
	return time.Duration(secs) * time.Second
}

// Send sends a multi-get of keys, waiting for a connection if all are
// busy; Recv observes it as one OpGetMulti, with its keys.
func (n *Node) Send(ctx context.Context, keys []string) node.Pending {
	return n.send(ctx, node.OpGetMulti, keys)
}

// send is Send, its Recv observed as a call of kind op.
func (n *Node) send(ctx context.Context, op node.Op, keys []string) *pending {
	start := n.obs.Begin()
	return &pending{n: n, p: n.mc.Send(ctx, keys), ctx: ctx, start: start, op: op, keys: len(keys)}
}

// SendIdle is Send on an idle connection; false, nothing sent, when the
// pool has none: a client sends on every node's idle connection first,
// then dials or waits for the others.
func (n *Node) SendIdle(ctx context.Context, keys []string) (node.Pending, bool) {
	start := n.obs.Begin()
	p, ok := n.mc.SendIdle(ctx, keys)
	if !ok {
		return nil, false
	}
	return &pending{n: n, p: p, ctx: ctx, start: start, op: node.OpGetMulti, keys: len(keys)}, true
}

// TrySend is Send without waiting; false, nothing sent, when every
// connection is busy.
func (n *Node) TrySend(ctx context.Context, keys []string) (node.Pending, bool) {
	start := n.obs.Begin()
	p, ok := n.mc.TrySend(ctx, keys)
	if !ok {
		return nil, false
	}
	return &pending{n: n, p: p, ctx: ctx, start: start, op: node.OpGetMulti, keys: len(keys)}, true
}

type pending struct {
	n     *Node
	p     memcache.Pending
	ctx   context.Context
	start time.Time
	op    node.Op // the kind of call Recv observes
	keys  int
}

func (p *pending) Recv(out []node.Answer) error {
	found, err := p.p.Recv(out)
	if err == nil {
		found -= unbury(out)
	}
	err = nodeErr(err)
	p.n.obs.Done(p.ctx, p.op, p.start, err)
	if err == nil {
		p.n.keys(p.op, found, p.keys-found)
	}
	return err
}

// Set stores value under key for ttl (0: no expiry).
func (n *Node) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return n.store(ctx, node.OpSet, memcache.Set, memcache.Item{Key: key, Value: value, Exptime: memcache.Expiration(ttl)})
}

// Add stores value only if key is absent, else node.ErrNotStored.
// A tombstone counts as absent.
func (n *Node) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return n.store(ctx, node.OpAdd, memcache.Add, memcache.Item{Key: key, Value: value, Exptime: memcache.Expiration(ttl)})
}

func (n *Node) store(ctx context.Context, o node.Op, op memcache.StoreOp, it memcache.Item) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := n.obs.Begin()
	var err error
	switch op {
	case memcache.Add:
		err = n.addOverTomb(ctx, it)
	case memcache.Replace, memcache.Append, memcache.Prepend:
		err = n.storeChecked(ctx, op, it)
	case memcache.CAS:
		err = n.casChecked(ctx, it)
	default:
		err = n.mc.Store(ctx, op, it)
	}
	if refusedBefore(err) {
		return nodeErr(err) // refused before any I/O: no outcome of the node's
	}
	err = nodeErr(err)
	n.obs.Done(ctx, o, start, err)
	return err
}

// refusedBefore reports whether err refused a store before any I/O: a
// malformed key, or a value too large (not the server's refusal, a
// *memcache.ServerError).
func refusedBefore(err error) bool {
	var se *memcache.ServerError
	return err != nil && (errors.Is(err, memcache.ErrMalformedKey) ||
		errors.Is(err, memcache.ErrValueTooLarge) && !errors.As(err, &se))
}

// SetMulti stores every item, each with its TTL and flags, in one round
// trip of pipelined sets.
func (n *Node) SetMulti(ctx context.Context, items []node.Item) error {
	_, err := n.storeMulti(ctx, node.OpSetMulti, memcache.Set, items)
	return err
}

// AddMulti adds each item if absent, in one round trip of pipelined adds,
// and reports which were stored; beside a failure, what was stored too.
func (n *Node) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	return n.addMulti(ctx, node.OpAddMulti, items)
}

// addMulti is AddMulti observed as a call of kind op: OpAddMulti, or
// OpSweep for Restore.
func (n *Node) addMulti(ctx context.Context, op node.Op, items []node.Item) ([]bool, error) {
	stored, err := n.storeMulti(ctx, op, memcache.Add, items)
	if stored == nil || err != nil {
		return stored, err // a node that failed is not asked again, item by item
	}
	for i, it := range items {
		if it.OverWritten && !stored[i] {
			stored[i] = n.overWritten(ctx, it) == nil
		}
	}
	return stored, err
}

// storeMulti runs op for every item in one round trip and reports which
// were stored. The error is the whole's, or the first item's that was
// not a refused condition (a value too large, the server's refusal); with
// it, nil when nothing was stored.
func (n *Node) storeMulti(ctx context.Context, o node.Op, op memcache.StoreOp, items []node.Item) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := n.obs.Begin()
	stored, err, outcome := n.storeItems(ctx, op, items)
	n.obs.Done(ctx, o, start, outcome)
	if err != nil && !anyTrue(stored) {
		return nil, err
	}
	return stored, err
}

// storeItems runs op for every item in one round trip: which were stored,
// the error to return, and the node's outcome (the error but for values
// refused before any I/O, which are no outcome of the node's).
func (n *Node) storeItems(ctx context.Context, op memcache.StoreOp, items []node.Item) (stored []bool, err, outcome error) {
	mi := make([]memcache.Item, len(items))
	for i, it := range items {
		mi[i] = memcache.Item{Key: it.Key, Value: it.Value, Flags: it.Flags, Exptime: memcache.Expiration(it.TTL), CAS: it.CAS}
	}
	results := make([]error, len(items))
	err = n.mc.StoreMulti(ctx, op, mi, results)
	stored = make([]bool, len(items))
	var first, firstServer error
	for i, r := range results {
		stored[i] = r == nil
		if r != nil && r != memcache.ErrNotStored {
			if first == nil {
				first = r
			}
			if firstServer == nil && !refusedBefore(r) {
				firstServer = r
			}
		}
	}
	if err != nil {
		err = nodeErr(err)
		return stored, err, err
	}
	return stored, nodeErr(first), nodeErr(firstServer)
}

func anyTrue(b []bool) bool {
	for _, v := range b {
		if v {
			return true
		}
	}
	return false
}

// Delete removes key; nil whether or not it was there.
func (n *Node) Delete(ctx context.Context, key string) error {
	_, err := n.DeleteFound(ctx, key)
	return err
}

// DeleteMulti removes every key, in one round trip of pipelined deletes.
func (n *Node) DeleteMulti(ctx context.Context, keys []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := n.obs.Begin()
	err := nodeErr(n.mc.DeleteMulti(ctx, keys, nil))
	n.obs.Done(ctx, node.OpDeleteMulti, start, err)
	return err
}

// Incr adds delta to key's counter, with Redis's semantics where
// Memcached allows: a missing key is created with the value delta and no
// expiry (incr, then add on a miss, and a second round if another client
// created it first). Memcached's counters are unsigned: a decrement stops
// at 0, and a missing key decremented is created at 0.
func (n *Node) Incr(ctx context.Context, key string, delta int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	start := n.obs.Begin()
	v, err := n.incr(ctx, key, delta)
	err = nodeErr(err)
	n.obs.Done(ctx, node.OpIncr, start, err)
	return v, err
}

func (n *Node) incr(ctx context.Context, key string, delta int64) (int64, error) {
	for range 2 {
		var v uint64
		var err error
		var tomb *memcache.Item
		if delta >= 0 {
			v, tomb, err = n.incrChecked(ctx, key, uint64(delta), false)
		} else {
			v, tomb, err = n.incrChecked(ctx, key, uint64(-delta), true)
		}
		if err != memcache.ErrCacheMiss {
			return int64(v), err
		}
		first := max(delta, 0)
		it := memcache.Item{Key: key, Value: counter(first)}
		if tomb != nil {
			err = n.overTomb(ctx, *tomb, it)
		} else {
			err = n.mc.Store(ctx, memcache.Add, it)
		}
		if err == nil {
			return first, nil
		}
		if err != memcache.ErrNotStored {
			return 0, err
		}
	}
	return 0, memcache.ErrNotStored
}

// Touch sets key's TTL (0: no expiry), or returns node.ErrCacheMiss.
func (n *Node) Touch(ctx context.Context, key string, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := n.obs.Begin()
	err := nodeErr(n.touchChecked(ctx, key, memcache.Expiration(ttl)))
	n.obs.Done(ctx, node.OpTouch, start, err)
	return err
}

// Ping asks the server's version, its cheapest command.
func (n *Node) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := n.obs.Begin()
	_, err := n.mc.Version(ctx)
	err = nodeErr(err)
	n.obs.Done(ctx, node.OpPing, start, err)
	return err
}

// CloseIdle closes the idle connections: the client does it when it
// marks the node down, so that none outlives a restart of the server.
func (n *Node) CloseIdle() { n.mc.CloseIdle() }

// Close closes every connection, those of calls in flight included, which
// then fail with node.ErrClosed.
func (n *Node) Close() error { return n.mc.Close() }

// nodeErr maps the protocol's errors to the node package's sentinels: a
// miss, a refused condition and a closed pool are the sentinels
// themselves; a value too large, a refused login or TLS handshake, and a
// server that cannot list its keys wrap them, keeping the protocol's
// error and message.
func nodeErr(err error) error {
	switch err {
	case nil:
		return nil
	case memcache.ErrCacheMiss:
		return node.ErrCacheMiss
	case memcache.ErrNotStored:
		return node.ErrNotStored
	case memcache.ErrCASConflict:
		return node.ErrCASConflict
	case wire.ErrClosed:
		return node.ErrClosed
	}
	switch {
	case errors.Is(err, wire.ErrClosed):
		return node.ErrClosed
	case errors.Is(err, memcache.ErrValueTooLarge):
		return mapped{node.ErrValueTooLarge, err}
	case errors.Is(err, memcache.ErrAuth):
		return mapped{node.ErrAuth, err}
	case wire.TLSFailure(err):
		return fmt.Errorf("%w: %w", node.ErrAuth, err) // as redisnode says it
	case errors.Is(err, memcache.ErrNoMetadump):
		return mapped{node.ErrSweepUnsupported, err}
	case errors.Is(err, memcache.ErrBusy):
		return mapped{node.ErrSweepBusy, err}
	case errors.Is(err, net.ErrClosed):
		// A call's connection closed under it: the pool's Close (an idle
		// one the pool closes is no call's, and a failed call's is closed
		// once it has ended).
		return mapped{node.ErrClosed, err}
	}
	return err
}

// mapped is err, the protocol's, that is also the node package's sentinel
// is: its message is err's.
type mapped struct {
	is  error
	err error
}

func (m mapped) Error() string        { return m.err.Error() }
func (m mapped) Unwrap() error        { return m.err }
func (m mapped) Is(target error) bool { return target == m.is }
