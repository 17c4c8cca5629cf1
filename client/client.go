package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/shardcache/shardcache/internal/backfill"
	"github.com/shardcache/shardcache/internal/follow"
	"github.com/shardcache/shardcache/internal/lease"
	"github.com/shardcache/shardcache/internal/loading"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/replica"
	"github.com/shardcache/shardcache/internal/pool"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// Backend is the protocol the nodes speak.
type Backend int

// Backends.
const (
	Redis     Backend = iota // Redis, through go-redis v9
	Memcached                // Memcached, over the package's own implementation of its protocol
)

// String returns the backend's name: "redis" or "memcached".
func (b Backend) String() string {
	switch b {
	case Redis:
		return "redis"
	case Memcached:
		return "memcached"
	}
	return fmt.Sprintf("Backend(%d)", int(b))
}

// Options configures a Client. The zero value of every field but Nodes (or
// Placement) is usable; defaults are applied by New. The package doc says
// more of the mechanisms the fields set.
type Options struct {
	// Backend is the protocol of every node. Default Redis.
	Backend Backend

	// Nodes are the cache servers; New builds a ring of them. An address
	// is "host:port", with nothing around it.
	Nodes []ring.Node
	// Vnodes is the ring's points per unit of weight, for Nodes and for
	// Reshard. Default ring.DefaultVnodes.
	Vnodes int
	// Equalize, above 0, equalizes every ring the client builds (Nodes,
	// MigrateFrom.Nodes, Reshard): each node's share within Equalize (0.01
	// is 1%) of its weight's fair share (ring.WithEqualize). It is part of
	// the placement: a fleet must agree on it, and changing it reshards
	// (see Resharding in the package doc). Default 0, the classic ring.
	Equalize float64
	// Placement, when set, replaces the ring built from Nodes (leave Nodes
	// empty): any ring.Locator, such as a ring built with other options.
	Placement ring.Locator
	// Replicas, above 1, keeps every key on that many distinct nodes
	// (ring.LocateN: distinct zones first), at most MaxReplicas: writes
	// reach all of them, reads the first that has the key, Zone's first
	// (see Replicas in the package doc). Default 1.
	Replicas int
	// Zone is this process's zone (ring.Node.Zone), read first. Default "".
	Zone string

	// MigrateFrom declares a migration already under way, so that a
	// process started during its window resumes it instead of starting
	// over. It is ignored once its window has passed.
	MigrateFrom *MigrateFrom
	// SkipEmptyCheck makes Reshard add nodes without checking that they
	// hold no keys (ErrNodeNotEmpty): for a fleet whose every process
	// calls Reshard itself, as go-redis Ring's SetAddrs is called
	// (compat/goredis sets it), where the first process to switch writes
	// to an added node before the others would check it. A node added back
	// with the keys it held when it left then serves them: flush it first.
	SkipEmptyCheck bool

	// DialTimeout, ReadTimeout and WriteTimeout bound each network step,
	// and the caller's context bounds the whole call. Default
	// DefaultTimeout each (gomemcache's; go-redis's defaults are long for
	// a cache).
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// PoolSize is the most connections open to one node from this client,
	// whatever the calls and options; a call that finds them all busy
	// waits for one. Default 10 per CPU, as go-redis.
	PoolSize int
	// MaxIdle is the most idle connections kept per node. Default
	// PoolSize.
	MaxIdle int

	// MaxKeyLength is the longest key accepted. Default 250 bytes for
	// Memcached (its protocol's limit) and 64 KiB for Redis.
	MaxKeyLength int
	// MaxValueSize is the longest value a write accepts: a longer one fails
	// with ErrValueTooLarge before any I/O. Default
	// DefaultMaxValueSizeMemcached or DefaultMaxValueSizeRedis; a Memcached
	// node also checks each value against its server's item limit.
	MaxValueSize int

	// AsyncBackfill makes a migration's backfills asynchronous: a read
	// returns once it has the value, and a worker writes the copy; with
	// BackfillQueue copies waiting, more are dropped and counted. Default
	// synchronous; the queue defaults to 4096.
	AsyncBackfill bool
	BackfillQueue int

	// FailureThreshold connection-level failures of a node in a row mark it
	// down: its calls then fail at once with ErrNodeDown until a probe
	// answers, the first after ProbeInterval, doubling up to
	// ProbeBackoffCap times it. Defaults DefaultFailureThreshold and
	// DefaultProbeInterval; a negative FailureThreshold disables this.
	FailureThreshold int
	ProbeInterval    time.Duration
	// FailOpen makes a down node's keys read as misses and drops writes to
	// it, counted in Health; deletes and Incr still fail. Keys are never
	// sent to another node. Default false: ErrNodeDown.
	FailOpen bool
	// Gutter, when set, are the nodes that stand in for a node the breaker
	// holds down, outside a migration: its reads and writes go to one of
	// them (chosen by the node's name), each TTL capped at GutterTTL
	// (default DefaultGutterTTL), and go home once it is back, the keys
	// written meanwhile deleted there first (see the package doc). Gutter
	// nodes must not be regular nodes. Default none.
	Gutter    []ring.Node
	GutterTTL time.Duration

	// NegativeTTL, when positive, makes GetOrLoad and GetMultiOrLoad cache
	// a loader's ErrNotFound for that long (see ErrNotFound). Default 0.
	NegativeTTL time.Duration
	// Lease, when positive, makes GetOrLoad take a lease on a missing key
	// in the cache, so one process of the fleet loads it while the others
	// wait, re-reading it every LeaseRetry; it should outlast a load. Every
	// process must agree on it (see the package doc). Default 0: no
	// leases; LeaseRetry defaults to DefaultLeaseRetry.
	Lease, LeaseRetry time.Duration
	// MetaLeases takes each lease in the read's own round trip: on
	// Memcached ≥ 1.6 a placeholder item in the key's place, on Redis one
	// script. GetOrLoad's and GetMultiOrLoad's first read is then the
	// lease's, so a miss reaches the loader after one round trip (three
	// with Lease alone; two with StaleWhileRevalidate or EarlyRefresh,
	// whose first read asks for a refresh, not a miss's lease), and a hit
	// costs that read (a script on Redis, an add
	// pipelined with the mg on Memcached) rather than a plain GET. On
	// Memcached every process must run a version with it before it is set
	// (see Loading in the package doc); a server without the meta commands
	// gets the leases of Lease. Default false.
	MetaLeases bool
	// StaleWhileRevalidate, when positive, is how long GetOrLoad and
	// GetMultiOrLoad serve a value past its TTL while one caller of the
	// fleet reloads it in the background; EarlyRefresh has one caller
	// reload it that far before its TTL. Every process must agree on them,
	// as on Lease (see Loading in the package doc). Default 0: off.
	StaleWhileRevalidate, EarlyRefresh time.Duration
	// LoadLimit, when set, caps the loader calls of GetOrLoad and
	// GetMultiOrLoad in this process (see LoadLimit). Default: no cap.
	LoadLimit *LoadLimit

	// Now is the clock of migration windows and load limits, for tests
	// and simulations. Default time.Now.
	Now func() time.Time

	// Username, Password, DB and TLSConfig log in to every node and protect
	// its connections, those of every later Reshard included: Redis's ACL
	// user or requirepass and database, Memcached's ASCII authentication
	// (memcached -Y, DB 0 only), TLS for both. A refusal is ErrAuth, a
	// Redis ACL refusal ErrNoPerm. Options print with the password
	// redacted.
	Username  string
	Password  string
	DB        int
	TLSConfig *tls.Config
	// NodeCredentials, when set, returns the credentials of node n, given
	// those of the fields above, each time the client sets a node up.
	NodeCredentials func(n ring.Node, c Credentials) Credentials

	// NewRedisClient, when set, makes the go-redis client of every Redis
	// node, as go-redis's RingOptions.NewClient does: opt is what the
	// client would use; pass it to redis.NewClient, changed if need be,
	// and add hooks. Every command to the node then goes through the
	// client it makes. Default redis.NewClient(opt).
	NewRedisClient func(n ring.Node, opt *redis.Options) *redis.Client
	// ReleaseRedisClient, when set, is called in place of Close on a
	// client NewRedisClient made, once the client is done with it (its
	// node dropped and no call left on it, or Close): for a caller that
	// shares the client, as compat/goredis shares its Ring's shards.
	ReleaseRedisClient func(n ring.Node, c *redis.Client)

	// Logger receives the client's events, never one per call: a node
	// down or up, a migration started or over, the backfill queue full
	// and accepting again. Default none: silent.
	Logger *slog.Logger
	// DisableStats turns off the per-node counters of Stats, which cost
	// an atomic add per counter and two clock reads per call.
	DisableStats bool

	// AutoPipeline makes concurrent callers share round trips: on Redis
	// through go-redis's auto-pipeliner (EXPERIMENTAL in go-redis), on
	// Memcached by batching the Gets that arrive while one is in flight.
	// A call that finds none other under way goes at once. Default false.
	AutoPipeline bool

	// NearCache, when set, keeps hot keys in process memory, read before
	// any call to a node: Get and GetMulti answer from it, their values then
	// shared and not to be changed. Redis invalidates a copy when any client
	// writes its key; Memcached cannot: there a write by another process is
	// seen within NearCache.MaxAge. Default nil.
	NearCache *NearCache

	// Topology, when set, makes the client take its nodes from a source
	// (DNS, a file, etcd) and follow every change as the fleet's rollout
	// protocol says (package topology): leave Nodes, Placement and
	// MigrateFrom empty, and Equalize 0 (the topology says how to place).
	// New waits for the first topology. Default nil:
	// the nodes of Options, changed by Reshard alone.
	Topology *TopologyOptions
}

// DefaultTimeout is the default of DialTimeout, ReadTimeout and
// WriteTimeout.
const DefaultTimeout = 500 * time.Millisecond

// MigrateFrom describes the placement a migration moves keys from, and its
// window.
type MigrateFrom struct {
	// Placement is the old placement; or leave it nil and give Nodes for a
	// ring built with Options.Vnodes and Options.Equalize.
	Placement ring.Locator
	Nodes     []ring.Node
	// Start is when the migration started, and Window how long it lasts:
	// with a Sweep, long enough for the rollout of the new configuration
	// and the sweep; without one, the longest TTL the application writes
	// (and keys without expiry are lost). See package migration.
	Start  time.Time
	Window time.Duration
	// Announced says that every process of the fleet was given this
	// migration before its start: their writes then may have left
	// tombstones on the new owners (client/copy.go, the handover), which
	// this process's copies made after the handover replace. A migration
	// whose Start is ahead at New is announced anyway. Leave it false in a
	// process that only sweeps, or whose Start is not the fleet's.
	Announced bool
}

// init applies defaults.
func (o *Options) init() {
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultTimeout
	}
	if o.PoolSize == 0 {
		o.PoolSize = 10 * runtime.GOMAXPROCS(0)
	}
	if o.MaxIdle == 0 || o.MaxIdle > o.PoolSize {
		o.MaxIdle = o.PoolSize
	}
	if o.MaxKeyLength == 0 {
		o.MaxKeyLength = 64 << 10
		if o.Backend == Memcached {
			o.MaxKeyLength = 250
		}
	}
	if o.MaxValueSize == 0 {
		o.MaxValueSize = DefaultMaxValueSizeRedis
		if o.Backend == Memcached {
			o.MaxValueSize = DefaultMaxValueSizeMemcached
		}
	}
	if o.BackfillQueue == 0 {
		o.BackfillQueue = 4096
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = DefaultFailureThreshold
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.LeaseRetry == 0 {
		o.LeaseRetry = DefaultLeaseRetry
	}
	o.NearCache = o.NearCache.withDefaults()
	if o.LoadLimit != nil {
		l := *o.LoadLimit // a copy: the caller's may change after New
		if l.Burst == 0 {
			l.Burst = max(int(math.Ceil(l.PerSecond)), 1)
		}
		o.LoadLimit = &l
	}
}

// check rejects options that cannot work, after init.
func (o *Options) check() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Vnodes", int64(o.Vnodes)}, {"PoolSize", int64(o.PoolSize)}, {"MaxIdle", int64(o.MaxIdle)}, {"MaxKeyLength", int64(o.MaxKeyLength)},
		{"MaxValueSize", int64(o.MaxValueSize)}, {"BackfillQueue", int64(o.BackfillQueue)},
		{"DialTimeout", int64(o.DialTimeout)}, {"ReadTimeout", int64(o.ReadTimeout)}, {"WriteTimeout", int64(o.WriteTimeout)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: negative %s", ErrBadOptions, f.name)
		}
	}
	if o.Backend != Redis && o.Backend != Memcached {
		return fmt.Errorf("%w: unknown backend %v", ErrBadOptions, o.Backend)
	}
	if o.Placement != nil && len(o.Nodes) > 0 {
		return fmt.Errorf("%w: give Nodes or Placement, not both", ErrBadOptions)
	}
	if e := o.Equalize; !(e >= 0 && e < 1) { // NaN too
		return fmt.Errorf("%w: Equalize %v (want 0 for the classic ring, or a tolerance above 0 and below 1)", ErrBadOptions, e)
	}
	if m := o.MigrateFrom; m != nil && m.Window < 0 {
		return fmt.Errorf("MigrateFrom: %w: %v", migration.ErrBadWindow, m.Window)
	}
	if err := o.checkReplicas(); err != nil {
		return err
	}
	return o.NearCache.check(o)
}

// DefaultLeaseRetry is how often a process waiting for another's load under
// a lease re-reads the key, by default.
const DefaultLeaseRetry = 10 * time.Millisecond

// Client is a sharded cache client. It is safe for concurrent use.
type Client struct {
	opts  Options
	pools *pool.Pools[*member]
	// gutterRing places the down nodes on the gutter pool's, gutterConns
	// (Options.Gutter, gutter.go); nil without one.
	gutterRing  *ring.Ring
	gutterConns map[string]*member
	// gutterStop ends gutterLoop, gutterWG waits for it.
	gutterStop context.CancelFunc
	gutterWG   sync.WaitGroup

	// state is what every operation reads, swapped whole on Reshard and at
	// the end of a migration window so the hot path takes no lock. nil once
	// closed.
	state atomic.Pointer[state]
	// last is the latest migration, kept after its window for Status.
	last atomic.Pointer[migration.Migration]

	mu    sync.Mutex  // serialises changes of state
	timer *time.Timer // drops the old placement at the end of a window
	// grace is how long a retired placement's nodes stay open, so that an
	// operation routed just before its retirement still finishes there
	// (retire.go); releases holds the timers that will close them.
	grace    time.Duration
	releases []*time.Timer
	queue    *backfill.Queue // nil when backfills are synchronous
	// migrations counts the migrations started; pastCounts adds up the
	// counters of those before the latest (c.last). Under mu.
	migrations int64
	pastCounts migration.Snapshot

	// GetOrLoad's: one load per key in flight, the database guard (nil
	// without Options.LoadLimit) and the counters of LoadStats.
	flight    singleflight.Group
	winners   winners // GetOrLoad's loads under a lease its first read took
	limiter   *loading.Limiter
	loads     loadCounters
	refreshes loading.Background // the background reloads of StaleWhileRevalidate and EarlyRefresh
	leases    lease.Config       // how its leases are named and how long they last (lease.go)

	// maxValueSet: Options.MaxValueSize was given, and replaces the limit a
	// Memcached node learns from its server.
	maxValueSet bool

	// follower follows Options.Topology's source; nil without one.
	follower *follow.Follower
}

// state is an immutable routing table.
type state struct {
	placement ring.Locator
	own       map[string]*member // the placement's nodes, by address
	// During a migration: the migration, and the clients of both
	// placements' nodes by address. Otherwise mig is nil and conns is own.
	mig   *migration.Migration
	conns map[string]*member
	// hold keeps a migration before its start, whatever the clock says:
	// the client received its topology late and reads the old placement
	// alone until it has repaired the new owners (internal/follow).
	hold bool
	// released is closed when the hold ends; nil when st is not held.
	released chan struct{}
	// gone are the addresses of old nodes that a change without a
	// migration removed (a DNS target that left the answers): a pod gone,
	// most likely. A failure to reach one is forgiven (failopen.go): its
	// keys have nowhere to come from, and must still be writable.
	gone map[string]bool
	// announced: the migration was known before its start, by this
	// process or others (a topology's), so writes before it may have left
	// tombstones on the new owners (copy.go, tombTTL).
	announced bool
}

// at is the instant st routes at when the clock reads now: now, or just
// before the migration's start while st is held.
func (st *state) at(now time.Time) time.Time {
	if st.hold && !now.Before(st.mig.Start()) {
		return st.mig.Start().Add(-time.Nanosecond)
	}
	return now
}

// first returns the node key's operations ask first at now: its owner, or
// during a migration its route's New (before the start, the old owner).
func (st *state) first(key string, now time.Time) ring.Node {
	if st.mig == nil {
		return st.placement.Locate(key)
	}
	return st.mig.Route(key, now).New
}

// placed is a node the client routes to, and which of a state's
// placements list it.
type placed struct {
	ring.Node
	current, old bool
}

// listed returns the nodes of st's placements, each once by address, the
// current placement's first, in their order (Stats, NodeStats, Ping).
func (st *state) listed() []placed {
	var out []placed
	byAddr := map[string]int{}
	add := func(nodes []ring.Node, current bool) {
		for _, n := range nodes {
			i, ok := byAddr[n.Addr]
			if !ok {
				i = len(out)
				byAddr[n.Addr] = i
				out = append(out, placed{Node: n})
			}
			if current {
				out[i].current = true
			} else {
				out[i].old = true
			}
		}
	}
	add(st.placement.Nodes(), true)
	if st.mig != nil {
		add(st.mig.Old().Nodes(), false)
	}
	return out
}

// New connects a client. It dials nothing: connections are made on first use.
func New(opts Options) (*Client, error) {
	maxValueSet := opts.MaxValueSize != 0
	opts.init()
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.NegativeTTL < 0 || opts.Lease < 0 || opts.LeaseRetry < 0 {
		return nil, fmt.Errorf("%w: negative NegativeTTL %v, Lease %v or LeaseRetry %v", ErrBadOptions, opts.NegativeTTL, opts.Lease, opts.LeaseRetry)
	}
	if opts.GutterTTL < 0 {
		return nil, fmt.Errorf("%w: negative GutterTTL %v", ErrBadOptions, opts.GutterTTL)
	}
	if opts.ReleaseRedisClient != nil && opts.NewRedisClient == nil {
		return nil, fmt.Errorf("%w: ReleaseRedisClient without NewRedisClient", ErrBadOptions)
	}
	if opts.StaleWhileRevalidate < 0 || opts.EarlyRefresh < 0 {
		return nil, fmt.Errorf("%w: negative StaleWhileRevalidate %v or EarlyRefresh %v", ErrBadOptions, opts.StaleWhileRevalidate, opts.EarlyRefresh)
	}
	limiter, err := newLimiter(&opts)
	if err != nil {
		return nil, err
	}
	c := &Client{opts: opts, grace: retireGrace(&opts), limiter: limiter, leases: leaseConfig(&opts), maxValueSet: maxValueSet}
	c.pools = pool.New(c.dial)
	if err := c.initGutter(); err != nil {
		c.pools.Close()
		return nil, err
	}
	st, err := c.initialState()
	if err != nil {
		c.stopGutter()
		c.pools.Close()
		return nil, err
	}
	c.state.Store(st)
	if opts.AsyncBackfill {
		c.queue = backfill.NewQueue(backfill.QueueConfig{Size: opts.BackfillQueue, Timeout: opts.ReadTimeout + opts.WriteTimeout,
			Now: opts.Now, Logger: opts.Logger, Overwrite: bugBackfillSet})
	}
	if c.follower != nil {
		c.follower.Start()
	}
	return c, nil
}

// initialState returns the state New starts in: the first topology's, when
// the client follows one, or the placement of the options and the
// migration MigrateFrom resumes.
func (c *Client) initialState() (*state, error) {
	if o := c.opts.Topology; o != nil {
		f, st, err := c.newFollower(o)
		c.follower = f
		return st, err
	}
	placement, err := c.placement(c.opts.Placement, c.opts.Nodes)
	if err != nil {
		return nil, err
	}
	own, err := c.pools.Acquire(placement.Nodes())
	if err != nil {
		return nil, err
	}
	st := &state{placement: placement, own: own, conns: own}
	if m := c.opts.MigrateFrom; m != nil && c.opts.Now().Before(m.Start.Add(m.Window)) {
		old, err := c.placement(m.Placement, m.Nodes)
		if err == nil {
			var oldConns map[string]*member
			if oldConns, err = c.pools.Acquire(old.Nodes()); err == nil {
				st, err = c.migrate(old, oldConns, placement, own, m.Start, m.Window, 0)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("MigrateFrom: %w", err)
		}
		st.announced = st.announced || m.Announced
	}
	return st, nil
}

// placement returns p, or a ring of nodes built with Options.Vnodes and
// Options.Equalize: every ring the client builds is built here.
func (c *Client) placement(p ring.Locator, nodes []ring.Node) (ring.Locator, error) {
	if p != nil {
		if len(p.Nodes()) == 0 {
			return nil, fmt.Errorf("%w: placement has no nodes", ErrBadOptions)
		}
		if err := c.checkNotGutter(p); err != nil {
			return nil, err
		}
		return c.replicated(p)
	}
	var opts []ring.Option
	if c.opts.Vnodes > 0 {
		opts = append(opts, ring.WithVnodes(c.opts.Vnodes))
	}
	if c.opts.Equalize > 0 {
		opts = append(opts, ring.WithEqualize(c.opts.Equalize))
	}
	r, err := ring.New(nodes, opts...)
	if err != nil {
		return nil, fmt.Errorf("shardcache: nodes: %w", err)
	}
	if err := c.checkNotGutter(r); err != nil {
		return nil, err
	}
	return c.replicated(r)
}

// replicated returns p placing replica sets with Options.Replicas above 1,
// else p.
func (c *Client) replicated(p ring.Locator) (ring.Locator, error) {
	if c.opts.Replicas <= 1 {
		return p, nil
	}
	if rp, ok := p.(*replica.Placement); ok {
		return rp, nil
	}
	return newReplicaPlacement(p, &c.opts)
}

// Close closes every node's pool and stops the backfill worker. Operations
// after Close return ErrClosed.
func (c *Client) Close() error {
	if c.follower != nil {
		c.follower.Close() // before the state goes: it may be applying a topology
	}
	c.mu.Lock()
	st := c.state.Swap(nil)
	if c.timer != nil {
		c.timer.Stop()
	}
	c.stopReleases()
	c.mu.Unlock()
	if st == nil {
		return nil
	}
	c.stopGutter()
	c.refreshes.Stop() // background refreshes (refresh.go): their loads see a canceled context
	if c.queue != nil {
		c.queue.Close() // ends a copy under way, bounded as it is anyway
	}
	return c.pools.Close()
}

// CloseIdleConnections closes the idle connections of every node; the
// client stays usable, and dials again when it needs to, as net/http's
// Transport does.
func (c *Client) CloseIdleConnections() {
	st := c.state.Load()
	if st == nil {
		return
	}
	for _, m := range st.conns {
		if ic, ok := m.Node.(node.IdleCloser); ok {
			ic.CloseIdle()
		}
	}
	for _, m := range c.gutterConns {
		if ic, ok := m.Node.(node.IdleCloser); ok {
			ic.CloseIdle()
		}
	}
}

// Locate returns the node that owns key in the current placement: with
// Options.Replicas, the first of its replicas in ring order.
func (c *Client) Locate(key string) ring.Node {
	st := c.state.Load()
	if st == nil {
		return ring.Node{}
	}
	if rp, ok := st.placement.(*replica.Placement); ok {
		return rp.Primary(key)
	}
	return st.placement.Locate(key)
}

// Nodes returns the nodes of the current placement.
func (c *Client) Nodes() []ring.Node {
	st := c.state.Load()
	if st == nil {
		return nil
	}
	return st.placement.Nodes()
}

// Redis returns the go-redis client of the node that owns key, for commands
// the façade does not wrap; nil for Memcached or after Close. With
// Options.Replicas it is the key's first replica's: a command sent through
// it reaches that node alone. From then on
// every command the client sends that node goes through this go-redis
// client, GetMulti's MGETs included, so that a hook added to it (AddHook)
// sees them all.
func (c *Client) Redis(key string) *redis.Client {
	st := c.state.Load()
	if st == nil {
		return nil
	}
	m := st.conns[c.Locate(key).Addr]
	if m == nil {
		return nil
	}
	if r, ok := m.Node.(interface{ Redis() *redis.Client }); ok {
		return r.Redis()
	}
	return nil
}

// Reshard moves the client to a ring of nodes (built with Options.Vnodes
// and Options.Equalize).
// For window reads fall back to the current placement and writes reach both;
// then the current placement is dropped and the pools of nodes only it used
// are closed, after a grace period that lets operations routed before
// finish (retire.go). A zero window switches at once, without a dual-ring
// phase.
//
// The window must last until every key is on its new owner: with a Sweep,
// the rollout of the new configuration to every process plus the sweep;
// without one, the longest TTL the application writes, and keys without
// expiry that nobody reads during the window are lost.
//
// It fails with ErrMigrationActive while an earlier window is open, and
// with ErrNodeNotEmpty when a node it adds already holds keys: a node
// removed earlier and added back still has the values it held then, older
// than what was written since, and would serve them (CheckEmpty). It reads
// each added node's key count first (one round trip, bounded by
// DefaultNodeStatsTimeout), and fails with the node's error when one
// cannot be read.
//
// Reshard is one process's change: in a fleet where every process called
// it, the first to start would write to an added node before the others
// checked it. A fleet changes its nodes by publishing the change ahead
// (Options.Topology, Options.MigrateFrom), checked by its publisher.
func (c *Client) Reshard(nodes []ring.Node, window time.Duration) error {
	p, err := c.placement(nil, nodes)
	if err != nil {
		return err
	}
	return c.ReshardTo(p, window)
}

// ReshardTo is Reshard to any placement.
func (c *Client) ReshardTo(p ring.Locator, window time.Duration) error {
	if p == nil || len(p.Nodes()) == 0 {
		return fmt.Errorf("%w: placement has no nodes", ErrBadOptions)
	}
	if st := c.state.Load(); st == nil {
		return ErrClosed
	} else if err := activeErr(st, c.opts.Now()); err != nil {
		return err // before a node is dialled
	}
	// The nodes are acquired, and the added ones read, before c.mu is
	// taken: Stats, Close and the retirement of a window wait on it, not on
	// a node's round trip.
	own, err := c.acquire(p.Nodes())
	if err != nil {
		return err
	}
	var checked ring.Locator
	if !c.opts.SkipEmptyCheck {
		if checked, err = c.checkAdded(p, own); err != nil {
			c.pools.Release(p.Nodes())
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state.Load()
	if err := activeErr(st, c.opts.Now()); err != nil || st == nil {
		c.pools.Release(p.Nodes())
		return cmp.Or(err, ErrClosed)
	}
	if checked != nil && st.placement != checked {
		c.pools.Release(p.Nodes())
		return fmt.Errorf("%w: another Reshard changed the placement during this one's check of its nodes", ErrMigrationActive)
	}
	now := c.opts.Now()
	if st.mig != nil {
		st = c.retireLocked(st)
	}
	next, err := c.migrate(st.placement, st.own, p, own, now, window, 0)
	if err != nil {
		c.pools.Release(p.Nodes())
		return err
	}
	c.state.Store(next)
	if window == 0 {
		c.retireLocked(next)
	}
	return nil
}

// activeErr is ErrMigrationActive while st's migration window is open at
// now; nil for a nil st.
func activeErr(st *state, now time.Time) error {
	if st != nil && st.mig != nil && st.mig.Active(now) {
		return fmt.Errorf("%w: it ends at %v", ErrMigrationActive, st.mig.End().Format(time.RFC3339))
	}
	return nil
}

// migrate returns the state of a migration from old to p, with the clients
// of both placements' nodes, for clocks within skew of each other
// (migration.WithSkew), and arms the timer that ends it.
func (c *Client) migrate(old ring.Locator, oldConns map[string]*member, p ring.Locator, own map[string]*member, start time.Time, window, skew time.Duration) (*state, error) {
	if ro, ok := old.(*replica.Placement); ok {
		if rp, ok := p.(*replica.Placement); ok {
			old = ro.Without(rp) // replicas.go
		}
	}
	m, err := migration.New(old, p, start, window, migration.WithSkew(skew))
	if err != nil {
		return nil, err
	}
	conns := make(map[string]*member, len(oldConns)+len(own))
	for addr, n := range oldConns {
		conns[addr] = n
	}
	for addr, n := range own {
		conns[addr] = n
	}
	if prev := c.last.Load(); prev != nil {
		c.pastCounts = c.pastCounts.Add(prev.Counters.Snapshot())
	}
	c.migrations++
	c.last.Store(m)
	if window > 0 {
		c.opts.Logger.Info("shardcache: migration started", slog.String("old", nodeList(old)), slog.String("new", nodeList(p)),
			slog.Time("start", start), slog.Duration("window", window), slog.Time("end", m.End()), slog.Float64("moved", m.Status(start).Moved))
	} else {
		c.opts.Logger.Info("shardcache: resharded at once, without a window", slog.String("old", nodeList(old)), slog.String("new", nodeList(p)),
			slog.Float64("moved", m.Status(start).Moved))
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	if d := m.End().Add(m.Skew()).Sub(c.opts.Now()); d > 0 {
		c.timer = time.AfterFunc(d, c.retireIfOver)
	}
	if window > 0 {
		for _, n := range conns {
			if tw, ok := n.Node.(node.TombstoneWatcher); ok {
				tw.ExpectTombstones(m.End().Add(tombMargin))
			}
		}
	}
	// Known before its start (a MigrateFrom given ahead): writes before it
	// leave tombstones on the new owners.
	announced := start.After(c.opts.Now())
	return &state{placement: p, own: own, mig: m, conns: conns, announced: announced}, nil
}

// retireIfOver drops the old placement if the window has passed. Operations
// call it when they see the window over; a timer calls it too, so the old
// pools close without traffic.
func (c *Client) retireIfOver() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.state.Load(); st != nil && st.mig != nil && !st.hold && !st.mig.Active(c.opts.Now()) {
		c.retireLocked(st)
	}
}

// retireLocked ends st's migration: the new placement alone, and the old
// placement's nodes released. It returns the new state.
func (c *Client) retireLocked(st *state) *state {
	next := &state{placement: st.placement, own: st.own, conns: st.own}
	c.state.Store(next)
	if s := st.mig.Status(c.opts.Now()); s.End.After(s.Start) {
		c.opts.Logger.Info("shardcache: migration window over", slog.String("old", nodeList(st.mig.Old())), slog.String("new", nodeList(st.placement)),
			slog.Int64("fallback_hits", s.FallbackHits), slog.Int64("fallback_misses", s.FallbackMisses),
			slog.Int64("backfills", s.Backfills), slog.Int64("backfills_dropped", s.BackfillsDropped))
	}
	c.releaseLocked(st.mig.Old().Nodes())
	return next
}

// Migration returns the status of the latest migration: Active while its
// window is open, counters included. Without any migration it returns the
// current nodes as NewNodes.
func (c *Client) Migration() migration.Status {
	now := c.opts.Now()
	if m := c.last.Load(); m != nil {
		return m.Status(now)
	}
	return migration.Status{NewNodes: c.Nodes()}
}

// load returns the state to route with at now, nil once closed. When a
// migration's window has passed it drops the old placement first.
func (c *Client) load() (*state, time.Time) {
	st := c.state.Load()
	if st == nil || st.mig == nil {
		return st, time.Time{}
	}
	now := st.at(c.opts.Now())
	if !st.mig.Active(now) {
		c.retireIfOver()
		if st = c.state.Load(); st != nil {
			now = st.at(now)
		}
	}
	return st, now
}

// heldDown reports whether the breaker holds n down with no gutter to
// stand in: its calls fail at once, without the network.
func (st *state) heldDown(n ring.Node) bool {
	_, down := st.conn(n).(*node.Failing)
	return down && n.Addr != "" && st.conns[n.Addr] != nil
}

// conn returns the client of node n in st. A placement that locates a key on
// a node it does not list gets one whose every call fails with
// ErrUnknownNode, so callers handle it as any other node failure; a node
// held down (health.go), one whose every call fails at once with ErrNodeDown.
func (st *state) conn(n ring.Node) node.Node {
	if m, ok := st.conns[n.Addr]; ok {
		if m.h.Down() {
			if m.gutter != nil && st.mig == nil {
				return m.gutter
			}
			return m.down
		}
		return m.Node
	}
	if s := setConn(st, n); s != nil {
		return s
	}
	return unlisted
}

func checkTTL(ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: %v", ErrBadTTL, ttl)
	}
	return nil
}
