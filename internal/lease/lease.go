// Package lease is the mechanism of the client's fleet leases
// (Options.Lease, Options.MetaLeases, and the refreshes of
// StaleWhileRevalidate and EarlyRefresh): the lease keys, the token a
// process holds its leases with, the wait between looks at a lease
// another process holds, one key's wait for its lease or its value
// (Waiter), a multi-key load's round of them (Taker), and the batches that
// take, read, store under, release and clear leases, one round trip per
// owner (internal/node/fanout), over node.Leaser and node.LeaseReader. The
// client decides when a load takes a lease, on which node (Fleet.Owner,
// Waiter.Owner), how it reads the keys and where else they may be, and
// what to count.
//
// A lease taken with Add is a lease key on the key's owner holding a
// random token, set only if absent (Redis SET NX PX, Memcached add) and
// expiring after Config.Term. A lease taken by the read itself
// (node.LeaseReader, Fleet.Gets) is decided by the server atomically with
// the read: on Memcached a placeholder in the key's own item, on Redis
// the same lease key taken by a script.
//
// On Redis the store (Config.Store) is one Lua script: if the lease holds
// our token and the key is as the lease found it (absent, or for a
// refresh the value read), SET the value and DEL the lease, atomically.
// Memcached's text protocol has no conditional store on another key, so
// the store is an add (never over a value written meanwhile, nor a
// tombstone), then a check of the lease, then a delete of that value
// again if the lease was lost (md C<cas> where the server has the meta
// commands): a reader can see such a value for that one round trip before
// it is withdrawn. Nor has it a compare-and-delete: releasing a lease
// (Fleet.Release) reads it and deletes it if it holds our token, so a
// lease that expired and was taken by another process in between can be
// deleted (at worst, one more load), and a lease lasts whole seconds, at
// least one.
//
//	got, err := lease.Waiter{Config: cfg, Conns: conns, Owner: n, Get: get, ...}.Wait(ctx, key)
//	f := lease.Fleet{Config: cfg, Conns: conns, Owner: owner}
//	l := &lease.Lease{Token: rand.Text()}
//	got, failed, _ := f.Acquire(ctx, keys, l.Token)
//	// load the keys got, then store them under l, batched by owner:
//	bs.Run(func(b *fanout.Batch) error { return cfg.Store(ctx, b, l, kept) })
package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/murmur3"

	"github.com/shardcache/shardcache/internal/node"
)

// Prefix starts every lease key.
const Prefix = "shardcache:lease:"

// Lease is a lease a process holds on keys, on their owners.
type Lease struct {
	// Token is what the lease keys hold while the lease is ours.
	Token string
	// Meta holds, by key, the leases won by reads (Fleet.Gets with vivify,
	// and the refreshes), stored and released through node.LeaseReader;
	// nil for leases taken with Add.
	Meta map[string]node.LeaseAnswer
}

// Won returns the lease of one key won by a read with token.
func Won(token, key string, a node.LeaseAnswer) *Lease {
	return &Lease{Token: token, Meta: map[string]node.LeaseAnswer{key: a}}
}

// has reports whether l's lease of key was won by a read.
func (l *Lease) has(key string) bool {
	_, ok := l.Meta[key]
	return ok
}

// answers returns the answers that won l's leases of keys.
func (l *Lease) answers(keys []string) []node.LeaseAnswer {
	leases := make([]node.LeaseAnswer, len(keys))
	for j, k := range keys {
		leases[j] = l.Meta[k]
	}
	return leases
}

// Config is how a client names and takes its leases.
type Config struct {
	// Term is how long a lease lasts if its holder neither stores nor
	// releases it.
	Term time.Duration
	// MaxKeyLength is the longest key the nodes take (the client's
	// Options.MaxKeyLength): a lease key that would be longer is named by
	// a hash of the key.
	MaxKeyLength int
}

// Key returns the key of key's lease: Prefix and the key, or, when that
// would be longer than MaxKeyLength, Prefix, "#" and 32 hex digits of the
// key's 128-bit murmur3 hash.
func (c Config) Key(key string) string {
	if len(Prefix)+len(key) <= c.MaxKeyLength {
		return Prefix + key
	}
	h1, h2 := murmur3.StringSum128(key)
	return fmt.Sprintf("%s#%016x%016x", Prefix, h1, h2)
}

// Keys returns the lease keys of keys.
func (c Config) Keys(keys []string) []string {
	lkeys := make([]string, len(keys))
	for i, k := range keys {
		lkeys[i] = c.Key(k)
	}
	return lkeys
}

// Read is what a read of keys with token takes beside them: with vivify
// the leases of misses, with refresh > 0 the refresh of values in that
// window.
func (c Config) Read(keys []string, token string, vivify bool, refresh time.Duration) node.LeaseRead {
	return node.LeaseRead{Vivify: vivify, Lease: c.Term, Refresh: refresh, LeaseKeys: c.Keys(keys), Token: token}
}

// Reader returns n's lease reads, nil without them (a node held down).
func Reader(n node.Node) node.LeaseReader {
	lr, _ := n.(node.LeaseReader)
	return lr
}

// Retry waits between looks at a lease another process holds, on one
// timer made on first use. Stop it when done.
type Retry struct {
	// Every is the wait (the client's Options.LeaseRetry).
	Every time.Duration
	t     *time.Timer
}

// Wait waits Every, or until ctx is done, and returns ctx's error then.
func (r *Retry) Wait(ctx context.Context) error { return r.wait(ctx, r.Every) }

// Backoff waits after the attempt-th look (from 0): Every, doubled each
// time up to 4 times it, or until ctx is done.
func (r *Retry) Backoff(ctx context.Context, attempt int) error {
	return r.wait(ctx, r.Every<<min(attempt, 2))
}

func (r *Retry) wait(ctx context.Context, d time.Duration) error {
	if r.t == nil {
		r.t = time.NewTimer(d)
	} else {
		r.t.Reset(d)
	}
	select {
	case <-r.t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop stops the timer, if one was made.
func (r *Retry) Stop() {
	if r.t != nil {
		r.t.Stop()
	}
}
