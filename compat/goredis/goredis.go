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
//     Each shard is named by its node's address. During a window, and
//     until the client is done with them, the Ring keeps the old nodes'
//     shards too (Len, ForEachShard and the heartbeat count them).
//     Shardcache().Stats() counts the shards' commands, the Ring's own
//     among them unless sent on context.Background().
package goredis

import (
	"errors"
	"fmt"
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
	// Ring's own shard clients (client.Options.ReleaseRedisClient): one
	// connection pool per node.
	c        *client.Client
	vnodes   int
	maxValue int

	// reshard serialises changes of the shards; dirty asks its holder to
	// narrow them once more (a client released while it was held).
	reshard sync.Mutex
	dirty   atomic.Bool
	mu      sync.Mutex // guards the fields below (taken inside SetAddrs, by new shards)
	// shards are the Ring's shard clients by address, one a node; each is
	// named by its address, so that a shard is found whatever the node's
	// name in either placement. held counts the nodes of c on each: the
	// Ring keeps a shard while c holds it (the old nodes of a window, until
	// c releases them), so that no client c uses is closed under it.
	shards   map[string]*redis.Client
	live     atomic.Pointer[map[string]bool] // the shards' addresses, read by ringHash without a lock
	held     map[string]int
	orphans  []*redis.Client // clients made for a node the Ring had no shard for; closed by Close
	template *redis.Options  // a shard's options
	newShard func(*redis.Options) *redis.Client
}

// New returns a Ring over nodes. It dials nothing: connections are made on
// first use.
func New(nodes []ring.Node) (*Ring, error) {
	return NewWithOptions(nodes, Options{})
}

// NewWithOptions is New with options.
func NewWithOptions(nodes []ring.Node, opts Options) (*Ring, error) {
	r := &Ring{vnodes: opts.Vnodes, newShard: opts.Ring.NewClient, maxValue: opts.MaxValueSize,
		shards: map[string]*redis.Client{}, held: map[string]int{}}
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
	all := placement.Nodes() // a migration resumed: its old nodes are shards too
	if m := opts.MigrateFrom; m != nil && m.Placement != nil {
		all = append(all, m.Placement.Nodes()...)
	} else if m != nil {
		all = append(all, m.Nodes...)
	}
	ro := opts.Ring
	ro.Addrs = shardAddrs(all, nil)
	r.setLive(ro.Addrs)
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
	dial, read, write := shardTimeouts(&ro)
	r.c, err = client.New(client.Options{
		Backend:     client.Redis,
		Placement:   placement,
		Vnodes:      opts.Vnodes,
		MigrateFrom: opts.MigrateFrom,
		// Every process calls SetAddrs: the first to add a node writes to
		// it before the others would check that it is empty.
		SkipEmptyCheck: true,
		// The client's calls run on the shards: its timeouts (how long it
		// waits before closing a node it dropped, its probes) are theirs.
		DialTimeout: dial, ReadTimeout: read, WriteTimeout: write,
		NewRedisClient:     r.nodeClient,
		ReleaseRedisClient: r.released,
	})
	if err != nil {
		r.Ring.Close()
		return nil, err
	}
	r.Ring.AddHook(hook{r})
	r.narrow() // a MigrateFrom over, or not needing every node
	return r, nil
}

// nodeClient returns the go-redis client of node n for the client.Client:
// the Ring's shard of its address, whose pool the two share. The Ring has
// one for every node the client sets up; should it not, a client of the
// shards' options is made (opt holds the client's own defaults, not what
// the user gave) and closed by Close.
func (r *Ring) nodeClient(n ring.Node, _ *redis.Options) *redis.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held[n.Addr]++
	if c, ok := r.shards[n.Addr]; ok {
		return c
	}
	o := *r.template
	o.Addr = n.Addr
	c := r.newShard(&o)
	r.orphans = append(r.orphans, c)
	return c
}

// released is told when the client.Client is done with node n's client:
// once it holds none on an address the Ring's placement lacks, the shard
// goes.
func (r *Ring) released(n ring.Node, _ *redis.Client) {
	r.mu.Lock()
	if r.held[n.Addr]--; r.held[n.Addr] <= 0 {
		delete(r.held, n.Addr)
	}
	r.mu.Unlock()
	r.narrow()
}

// shardTimeouts returns the dial, read and write timeouts of the Ring's
// shards: go-redis's defaults (5 s, 3 s, the read's) where ro leaves them
// unset, and where it makes them unbounded (a negative value), for the
// client, whose timeouts are bounds.
func shardTimeouts(ro *redis.RingOptions) (dial, read, write time.Duration) {
	dial, read, write = ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout
	if dial <= 0 {
		dial = 5 * time.Second
	}
	if read <= 0 {
		read = 3 * time.Second
	}
	if write <= 0 {
		write = read
	}
	return dial, read, write
}

// shardAddrs returns the Ring's shards of nodes and addresses, each named
// by its address.
func shardAddrs(nodes []ring.Node, addrs []string) map[string]string {
	m := make(map[string]string, len(nodes)+len(addrs))
	for _, n := range nodes {
		m[n.Addr] = n.Addr
	}
	for _, a := range addrs {
		m[a] = a
	}
	return m
}

// setAddrs gives the Ring the shards of addrs (shardAddrs), r.reshard held,
// closing the others, and forgets those it closed.
func (r *Ring) setAddrs(addrs map[string]string) {
	r.Ring.SetAddrs(addrs)
	r.setLive(addrs)
	r.mu.Lock()
	for a := range r.shards {
		if _, ok := addrs[a]; !ok {
			delete(r.shards, a)
		}
	}
	r.mu.Unlock()
}

// setLive records the addresses of the Ring's shards for ringHash.
func (r *Ring) setLive(addrs map[string]string) {
	live := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		live[a] = true
	}
	r.live.Store(&live)
}

// narrow gives the Ring the shards of the client's placement and of every
// node the client still holds (narrowLocked), now or, while a change of
// the shards is under way, by the one making it.
func (r *Ring) narrow() {
	r.dirty.Store(true)
	for r.dirty.Load() && r.reshard.TryLock() {
		r.narrowLocked()
		r.reshard.Unlock()
	}
}

// narrowLocked is narrow with r.reshard held. Before NewWithOptions has
// its client (one failing releases the nodes it set up) it does nothing:
// the Ring is closed then.
func (r *Ring) narrowLocked() {
	r.dirty.Store(false)
	if r.c == nil {
		return
	}
	r.mu.Lock()
	held := make([]string, 0, len(r.held))
	for a := range r.held {
		held = append(held, a)
	}
	r.mu.Unlock()
	r.setAddrs(shardAddrs(r.c.Nodes(), held))
}

// unlockReshard releases r.reshard, then narrows if a release asked to
// while it was held.
func (r *Ring) unlockReshard() {
	r.reshard.Unlock()
	if r.dirty.Load() {
		r.narrow()
	}
}

// ring builds a ring of nodes with the Ring's options.
func (r *Ring) ring(nodes []ring.Node) (*ring.Ring, error) {
	var opts []ring.Option
	if r.vnodes > 0 {
		opts = append(opts, ring.WithVnodes(r.vnodes))
	}
	return ring.New(nodes, opts...)
}

// ringHash is the Ring's ConsistentHash: the client's current placement, by
// node address (the shards' names), whichever shards go-redis's heartbeat
// counts as up.
type ringHash struct{ r *Ring }

// Get returns the address of the node that owns key (go-redis passes the
// hash tag alone, which the ring places as it places the whole key); ""
// for a node the Ring has no shard for (resharded through Shardcache(), not
// Reshard), which go-redis fails as a shard down.
func (h ringHash) Get(key string) string {
	if h.r.c == nil {
		return ""
	}
	if a := h.r.c.Locate(key).Addr; (*h.r.live.Load())[a] {
		return a
	}
	return ""
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
	defer r.unlockReshard()
	if r.c.Migrating() { // refused before the shards change
		return fmt.Errorf("%w: it ends at %v", client.ErrMigrationActive, r.c.Migration().End.Format(time.RFC3339))
	}
	// Both placements' shards from before the switch, so that the hash
	// never names a shard the Ring lacks and every node the client sets up
	// is a shard; the old nodes' go once the client releases them.
	r.mu.Lock()
	prev := make([]string, 0, len(r.shards))
	for a := range r.shards {
		prev = append(prev, a)
	}
	r.mu.Unlock()
	r.setAddrs(shardAddrs(next.Nodes(), prev))
	err = r.c.ReshardTo(next, window)
	r.narrowLocked() // to the placement the client has now, and the nodes it holds
	return err
}

// SetAddrs moves the Ring to the nodes of addrs (name to address) at once,
// as Reshard with a zero window does: go-redis's SetAddrs would close the
// shards the client still uses. Where Reshard would fail (an address
// refused, no address, a window open) SetAddrs changes nothing, and says
// nothing: go-redis's has no error. Use Reshard, which returns the error
// and, with a window, keeps the hit rate.
func (r *Ring) SetAddrs(addrs map[string]string) {
	nodes := make([]ring.Node, 0, len(addrs))
	for name, addr := range addrs {
		nodes = append(nodes, ring.Node{Name: name, Addr: addr})
	}
	r.Reshard(nodes, 0)
}

// Migration returns the status of the latest migration, counters included.
func (r *Ring) Migration() migration.Status { return r.c.Migration() }

// Shardcache returns the client.Client that applies the migration, for
// its statistics and status: reshard with Reshard, not through it (its
// Reshard would move keys to nodes the Ring has no shard for), and close
// the Ring, not it.
func (r *Ring) Shardcache() *client.Client { return r.c }

// Close closes the client over the Ring, the Ring and its shards.
func (r *Ring) Close() error {
	errs := []error{r.c.Close(), r.Ring.Close()}
	r.mu.Lock()
	orphans := r.orphans
	r.mu.Unlock()
	for _, c := range orphans {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
