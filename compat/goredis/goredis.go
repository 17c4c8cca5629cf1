// Package goredis is a drop-in for go-redis's *redis.Ring: a genuine
// *redis.Ring whose keys are placed by shardcache's weighted ring, whose
// multi-key commands are correct across shards, and which reshards with the
// dual-ring migration of package client.
//
// A program written for go-redis changes its constructor and nothing else:
//
//	-rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "10.0.0.1:6379", "b": "10.0.0.2:6379"}})
//	+rdb, err := goredis.New([]ring.Node{{Name: "a", Addr: "10.0.0.1:6379"}, {Name: "b", Addr: "10.0.0.2:6379"}})
//	 v, err := rdb.Get(ctx, "user:42").Result() // errors.Is(err, redis.Nil) on a miss
//
// *Ring embeds the *redis.Ring, so it is a redis.UniversalClient and a
// redis.Cmdable, and pipelines, hooks (redisotel) and libraries over
// go-redis keep working. What changes:
//
//   - Placement. RingOptions.NewConsistentHash is the ring.Ring over every
//     configured node, also while go-redis's heartbeat marks a shard down: a
//     down shard's keys fail rather than silently move to another shard
//     (go-redis issue #526).
//   - Multi-key commands. A hook on the Ring splits MGET, MSET, DEL,
//     UNLINK, EXISTS and TOUCH by owner and merges the answers in order
//     (go-redis sends them whole to the first key's shard). The other
//     multi-key commands in CrossShardCommands fail with ErrCrossShard when
//     their keys span nodes; a hash tag ({user:42}:cart) keeps keys together.
//   - Resharding. Reshard starts a migration: for one window the hook hands
//     the cache commands of MigratedCommands to package client, which reads
//     the new owner and falls back to the old one, bringing the key over
//     whole (DUMP/RESTORE: any type, with its remaining TTL), and writes and
//     deletes both owners (counters are brought over first and the old copy
//     deleted, as client.Incr does). Every other command goes to the new
//     owner only, as do the commands of a MULTI/EXEC transaction. Use
//     Reshard, not SetAddrs, which rebuilds the shards without a window.
//   - Connections. The client.Client that splits the multi-key commands
//     and applies a migration runs its commands on the Ring's own shard
//     clients, so a node sees no more connections than go-redis's Ring
//     opens (RingOptions.PoolSize, and PipelinePoolSize for pipelines).
//     During a window the Ring keeps the old nodes' shards too (ForEachShard
//     and the heartbeat reach them) and closes them once it is over.
//     Shardcache().Stats() and its health count every command of the
//     shards, the Ring's own included.
package goredis

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// ErrCrossShard means a multi-key command that cannot be split had keys on
// different nodes.
var ErrCrossShard = errors.New("shardcache: command's keys are on different nodes")

// Options configures NewWithOptions. The zero value is usable.
type Options struct {
	// Ring configures the go-redis Ring and every shard's client: passwords,
	// timeouts, pool sizes, NewClient (for hooks or TLS),
	// HeartbeatFrequency. Its Addrs and NewConsistentHash are set from the
	// nodes and ignored here.
	Ring redis.RingOptions
	// Vnodes is the ring's points per unit of weight, for the nodes and for
	// Reshard. Default ring.DefaultVnodes.
	Vnodes int
	// MaxValueSize is the longest value argument a command may carry: a
	// longer one fails with client.ErrValueTooLarge before it is sent.
	// Default client.DefaultMaxValueSizeRedis, Redis's proto-max-bulk-len.
	MaxValueSize int
	// MigrateFrom resumes a migration already under way (see
	// client.Options.MigrateFrom).
	MigrateFrom *client.MigrateFrom
}

// Ring is a *redis.Ring placed by a ring.Ring, with correct multi-key
// commands and Reshard. It is safe for concurrent use.
type Ring struct {
	*redis.Ring

	// c applies the migration and splits the multi-key commands, over the
	// Ring's own shard clients (client.Options.KeepRedisClients): one
	// connection pool per node, RingOptions.PoolSize connections at most.
	c        *client.Client
	vnodes   int
	maxValue int

	reshard sync.Mutex // serialises Reshard and the narrowing after a window
	mu      sync.Mutex // guards the fields below (taken inside SetAddrs, by new shards)
	// shards are the Ring's shard clients by address, which c's nodes
	// share: while a window is open they include the old placement's
	// nodes (wide), so that every node c lists is a shard of the Ring.
	shards   map[string]*redis.Client
	orphans  []*redis.Client // clients made for a node the Ring had no shard for; closed by Close
	template *redis.Options  // a shard's options
	newShard func(*redis.Options) *redis.Client
	wide     atomic.Bool // the shards still include a window's old nodes
	narrowAt *time.Timer // narrows the shards once the window is over, without traffic
	closed   bool
}

// New returns a Ring over nodes. It dials nothing: connections are made on
// first use.
func New(nodes []ring.Node) (*Ring, error) {
	return NewWithOptions(nodes, Options{})
}

// NewWithOptions is New with options.
func NewWithOptions(nodes []ring.Node, opts Options) (*Ring, error) {
	r := &Ring{vnodes: opts.Vnodes, newShard: opts.Ring.NewClient, maxValue: opts.MaxValueSize}
	if r.maxValue <= 0 {
		r.maxValue = client.DefaultMaxValueSizeRedis
	}
	if r.newShard == nil {
		r.newShard = redis.NewClient
	}
	placement, err := r.ring(nodes)
	if err != nil {
		return nil, err
	}
	var old []ring.Node // a migration resumed: its old nodes are shards too
	if m := opts.MigrateFrom; m != nil && m.Placement != nil {
		old = m.Placement.Nodes()
	} else if m != nil {
		old = m.Nodes
	}
	r.shards = map[string]*redis.Client{}
	ro := opts.Ring
	ro.Addrs = shardAddrs(placement.Nodes(), old)
	ro.NewConsistentHash = func([]string) redis.ConsistentHash { return ringHash{r} }
	ro.NewClient = func(o *redis.Options) *redis.Client {
		c := r.newShard(o)
		r.mu.Lock()
		if r.template == nil {
			t := *o
			r.template = &t
		}
		r.shards[o.Addr] = c
		r.mu.Unlock()
		return c
	}
	r.Ring = redis.NewRing(&ro)
	r.c, err = client.New(client.Options{
		Backend:          client.Redis,
		Placement:        placement,
		Vnodes:           opts.Vnodes,
		MigrateFrom:      opts.MigrateFrom,
		NewRedisClient:   r.nodeClient,
		KeepRedisClients: true,
	})
	if err != nil {
		r.Ring.Close()
		return nil, err
	}
	r.Ring.AddHook(hook{r})
	r.reshard.Lock()
	r.widened()
	r.reshard.Unlock()
	return r, nil
}

// nodeClient returns the go-redis client of node n for the client.Client:
// the Ring's shard of its address, whose pool the two share. The Ring has
// one for every node the client lists; should it not, a client of the
// shards' options is made (opt holds the client's own defaults, not what
// the user gave) and closed by Close.
func (r *Ring) nodeClient(n ring.Node, _ *redis.Options) *redis.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.shards[n.Addr]; ok {
		return c
	}
	o := *r.template
	o.Addr = n.Addr
	c := r.newShard(&o)
	r.orphans = append(r.orphans, c)
	return c
}

// shardAddrs returns the Ring's shards for the nodes cur and, during a
// window, the old nodes: cur by name, then each old node at an address cur
// lacks, under a name no placement gives (the hash never names it).
func shardAddrs(cur, old []ring.Node) map[string]string {
	m := addrs(cur)
	have := make(map[string]bool, len(cur))
	for _, n := range cur {
		have[n.Addr] = true
	}
	for _, n := range old {
		if !have[n.Addr] {
			have[n.Addr] = true
			m["\x00old:"+n.Addr] = n.Addr
		}
	}
	return m
}

// setAddrs gives the Ring the shards of addrs (see shardAddrs), closing
// the others, and forgets those it closed.
func (r *Ring) setAddrs(addrs map[string]string) {
	r.Ring.SetAddrs(addrs)
	keep := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		keep[a] = true
	}
	r.mu.Lock()
	for a := range r.shards {
		if !keep[a] {
			delete(r.shards, a)
		}
	}
	r.mu.Unlock()
}

// widened follows a change of the client's placements, r.reshard held:
// while a window is open the shards stay those of both placements, and a
// timer narrows them once it is over; otherwise they are narrowed now.
func (r *Ring) widened() {
	if !r.c.Migrating() {
		r.narrowLocked()
		return
	}
	r.wide.Store(true)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.narrowAt != nil {
		r.narrowAt.Stop()
	}
	r.narrowAt = time.AfterFunc(time.Until(r.c.Migration().End), r.narrowWhenOver)
}

// narrowWhenOver narrows the shards once the window is over (the client
// drops the old placement after the window's skew too), checking again
// shortly until then.
func (r *Ring) narrowWhenOver() {
	r.narrow()
	if r.wide.Load() {
		r.mu.Lock()
		if !r.closed {
			r.narrowAt.Reset(narrowRetry)
		}
		r.mu.Unlock()
	}
}

// narrowRetry is how often narrowWhenOver looks again.
const narrowRetry = 100 * time.Millisecond

// narrow drops the old placement's shards once the client has (the hook
// calls it as soon as it sees the window over); it never waits for a
// Reshard under way.
func (r *Ring) narrow() {
	if r.wide.Load() && !r.c.Migrating() && r.reshard.TryLock() {
		r.narrowLocked()
		r.reshard.Unlock()
	}
}

// narrowLocked gives the Ring the shards of the client's placement alone,
// r.reshard held, once no window is open.
func (r *Ring) narrowLocked() {
	if r.c.Migrating() {
		return
	}
	r.setAddrs(addrs(r.c.Nodes()))
	r.wide.Store(false)
}

// ring builds a ring of nodes with the Ring's options.
func (r *Ring) ring(nodes []ring.Node) (*ring.Ring, error) {
	var opts []ring.Option
	if r.vnodes > 0 {
		opts = append(opts, ring.WithVnodes(r.vnodes))
	}
	return ring.New(nodes, opts...)
}

func addrs(nodes []ring.Node) map[string]string {
	m := make(map[string]string, len(nodes))
	for _, n := range nodes {
		m[n.Name] = n.Addr
	}
	return m
}

// ringHash is the Ring's ConsistentHash: the client's current placement, by
// node name, whichever shards go-redis's heartbeat counts as up.
type ringHash struct{ r *Ring }

// Get returns the name of the node that owns key (go-redis passes the hash
// tag alone, which the ring places as it places the whole key).
func (h ringHash) Get(key string) string {
	if h.r.c == nil {
		return ""
	}
	return h.r.c.Locate(key).Name
}

// Reshard moves the Ring to a ring of nodes. For window (the longest TTL the
// application writes) the cache commands read the old owners on a miss and
// write both; the Ring's shards are those of nodes from the start. A zero
// window switches at once. It fails with client.ErrMigrationActive while an
// earlier window is open.
func (r *Ring) Reshard(nodes []ring.Node, window time.Duration) error {
	next, err := r.ring(nodes)
	if err != nil {
		return err
	}
	r.reshard.Lock()
	defer r.reshard.Unlock()
	r.narrowLocked() // the last window's old nodes, if it is over
	cur := r.c.Nodes()
	// Both placements' shards from before the switch, so that the hash
	// never names a shard the Ring lacks and every node the client lists
	// is a shard (its go-redis client the Ring's).
	r.setAddrs(shardAddrs(next.Nodes(), cur))
	if err := r.c.ReshardTo(next, window); err != nil {
		r.setAddrs(addrs(cur))
		return err
	}
	r.widened()
	return nil
}

// Migration returns the status of the latest migration, counters included.
func (r *Ring) Migration() migration.Status { return r.c.Migration() }

// Shardcache returns the client.Client that applies the migration.
func (r *Ring) Shardcache() *client.Client { return r.c }

// Close closes the Ring, its shards and the client over them.
func (r *Ring) Close() error {
	r.mu.Lock()
	r.closed = true
	if r.narrowAt != nil {
		r.narrowAt.Stop()
	}
	orphans := r.orphans
	r.mu.Unlock()
	errs := []error{r.c.Close(), r.Ring.Close()}
	for _, c := range orphans {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
