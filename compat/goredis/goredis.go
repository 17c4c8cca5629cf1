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
package goredis

import (
	"errors"
	"sync"
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

	// c applies the migration, with clients of its own for the nodes, made
	// with the same options as the Ring's shards.
	c        *client.Client
	vnodes   int
	maxValue int

	reshard  sync.Mutex     // serialises Reshard
	mu       sync.Mutex     // guards template (taken inside Reshard, by new shards)
	template *redis.Options // a shard's options, for the client's node clients
	newShard func(*redis.Options) *redis.Client
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
	ro := opts.Ring
	ro.Addrs = addrs(placement.Nodes())
	ro.NewConsistentHash = func([]string) redis.ConsistentHash { return ringHash{r} }
	ro.NewClient = func(o *redis.Options) *redis.Client {
		r.mu.Lock()
		if r.template == nil {
			t := *o
			r.template = &t
		}
		r.mu.Unlock()
		return r.newShard(o)
	}
	r.Ring = redis.NewRing(&ro)
	r.c, err = client.New(client.Options{
		Backend:        client.Redis,
		Placement:      placement,
		Vnodes:         opts.Vnodes,
		MigrateFrom:    opts.MigrateFrom,
		NewRedisClient: r.nodeClient,
	})
	if err != nil {
		r.Ring.Close()
		return nil, err
	}
	r.Ring.AddHook(hook{r})
	return r, nil
}

// nodeClient makes the client.Client's go-redis client for node n, with the
// options of the Ring's shards (what the user gave, not the client's own
// defaults, which opt holds).
func (r *Ring) nodeClient(n ring.Node, _ *redis.Options) *redis.Client {
	r.mu.Lock()
	o := *r.template
	r.mu.Unlock()
	o.Addr = n.Addr
	return r.newShard(&o)
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
	cur := r.c.Nodes()
	// Both placements' shards while the placement switches, so the hash
	// never names a shard the Ring lacks.
	union := addrs(cur)
	for name, addr := range addrs(next.Nodes()) {
		union[name] = addr
	}
	r.Ring.SetAddrs(union)
	if err := r.c.ReshardTo(next, window); err != nil {
		r.Ring.SetAddrs(addrs(cur))
		return err
	}
	r.Ring.SetAddrs(addrs(next.Nodes()))
	return nil
}

// Migration returns the status of the latest migration, counters included.
func (r *Ring) Migration() migration.Status { return r.c.Migration() }

// Shardcache returns the client.Client that applies the migration.
func (r *Ring) Shardcache() *client.Client { return r.c }

// Close closes the Ring and the migration's clients.
func (r *Ring) Close() error {
	return errors.Join(r.Ring.Close(), r.c.Close())
}
