package client

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/shardcache/shardcache/internal/lease"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// Leases: one load per key across the fleet (Options.Lease), after "Scaling
// Memcache at Facebook" (NSDI 2013). Singleflight stops a stampede in one
// process; a fleet of processes would still send one load each. With leases,
// the process that misses first takes a lease on the key, in the cache
// itself, on the key's owner, expiring after Options.Lease. The others find
// the lease taken and re-read the key every Options.LeaseRetry until the
// value lands, or the lease is gone (released after a failed load, or
// expired with its holder) and they take it. GetMultiOrLoad does the same
// per key, with one round trip per node for each step: it takes the leases
// of its misses, loads those it holds in one batch, then waits for the
// others (and loads in one more batch any whose lease it takes later).
//
// The value is stored only if the lease is still held, and Delete (and
// DeleteMulti) clear the lease before they delete the key, so a Delete during
// a load means the value loaded before it is not stored: the stale set the
// paper's leases prevent. A value loaded under a lease that expired is not
// stored either. A lease taken then finds the key present if the value
// landed meanwhile: a store sets the value before it clears the lease. How
// each backend keeps, stores under and releases a lease, the batches that
// do it one round trip per owner, one key's wait for its lease or its
// value (lease.Waiter) and a multi-key load's round (lease.Taker), are
// package internal/lease's; the client decides when to take a lease, on
// which node, how the keys are read, and what to do with the answer.
// During a migration the copy to the old owner is written first and
// deleted again if the lease was lost (storeUnderLease), so a Delete that
// clears the lease, then the old owner, then the new owner leaves neither.
//
// Every process sharing the cache must agree on Lease: a Delete from a
// process without leases does not clear them. Processes that disagree on the
// placement (half-way through a rollout) take their leases on different
// nodes and may load once each.

// leasing reports whether loads take leases that a Delete must clear:
// Options.Lease, or the refreshes' (refresh.go).
func (c *Client) leasing() bool { return c.opts.Lease > 0 || c.refreshWindow() > 0 }

// leaseConfig is how the client's leases are named and how long they last:
// Options.Lease, or for the refreshes of a client without leases,
// DefaultRefreshLease.
func leaseConfig(o *Options) lease.Config {
	term := o.Lease
	if term <= 0 {
		term = DefaultRefreshLease
	}
	return lease.Config{Term: term, MaxKeyLength: o.MaxKeyLength}
}

// DefaultRefreshLease is how long the lease of a background refresh
// (Options.StaleWhileRevalidate, Options.EarlyRefresh) lasts on Redis when
// Options.Lease is not set.
const DefaultRefreshLease = 30 * time.Second

// fleet is where the leases of keys live in st at now: on the node each
// key's operations ask first.
func (c *Client) fleet(st *state, now time.Time) lease.Fleet {
	return lease.Fleet{Config: c.leases, Conns: st, Owner: func(k string) ring.Node { return st.first(k, now) }}
}

// leaseWaiter is how GetOrLoad's load of key, routed by r, waits for the
// key's lease or its value (lease.Waiter): the lease on r.New, taken by the
// read itself with Options.MetaLeases, the key read as get reads it (with
// its fallback to the old owner), the waits and failures counted in
// LoadStats.
func (c *Client) leaseWaiter(r route, key string) lease.Waiter {
	return lease.Waiter{
		Config: c.leases, Conns: r.st, Owner: r.New, Every: c.opts.LeaseRetry, Meta: c.opts.MetaLeases,
		ServeStale: c.refreshWindow() > 0, Fallback: r.Fallback,
		Get:     func(ctx context.Context) ([]byte, error) { return c.get(ctx, r, key) },
		Release: func(ctx context.Context, l *lease.Lease) { c.releaseLeases(ctx, r.st, r.now, []string{key}, l) },
		Closed:  func() bool { return c.state.Load() == nil },
		Waits:   &c.loads.leaseWaits, CacheErrors: &c.loads.cacheErrors,
	}
}

// storeUnderLease stores loaded items whose leases this process holds with
// l, one round trip per node for each step. During a migration the
// copies to old owners are written first, as dual writes, and deleted again
// where the lease was lost, so that a Delete that clears the lease, then the
// old owner, then the new owner leaves neither (see above). lost reports
// that a lease was found lost (a Delete or a write cleared it meanwhile),
// or is not known to be held (the store failed, or never ran): that value
// must not be served to a read that began after the load.
func (c *Client) storeUnderLease(ctx context.Context, st *state, now time.Time, items []item, l *lease.Lease) (lost bool) {
	items, over := c.storable(items)
	if len(over) > 0 {
		c.releaseLeases(ctx, st, now, over, l)
		if lost = true; len(items) == 0 {
			return true
		}
	}
	for _, it := range items {
		c.follower.Wrote(it.Key) // before the state is looked at again: see beginWrite
	}
	if cur := c.state.Load(); cur != st && cur != nil {
		st, now = c.load() // a topology applied since the lease: route as it says
	}
	for st != nil && st.hold {
		if waitRelease(ctx, st) != nil {
			return true
		}
		st, now = c.load()
	}
	if st == nil {
		return true
	}
	routes := make([]migration.Route, len(items))
	news, olds, tombs := newBatches(st), newBatches(st), newBatches(st)
	for i, it := range items {
		if st.mig == nil {
			routes[i].New = st.placement.Locate(it.Key)
		} else {
			routes[i] = st.mig.Route(it.Key, now)
		}
		news.Add(routes[i].New, it, i, false)
		switch {
		case routes[i].Before: // the new owner takes no value yet (onOld)
			tombs.Add(routes[i].Old, it, i, false)
		case routes[i].Dual:
			olds.Add(routes[i].Old, it, i, false)
		}
	}
	olds.Run(func(b *batch) error { return b.Conn.SetMulti(ctx, b.Items) })
	if len(tombs.List) > 0 {
		ttl := tombTTL(st, now)
		tombs.Run(func(b *batch) error {
			_, err := c.bury(ctx, b.Conn, b.Keys, ttl, node.TombWritten)
			return err
		})
	}
	for _, b := range slices.Concat(olds.List, tombs.List) {
		for range b.Items {
			countCopy(route{st: st}, b.Err)
		}
	}
	kept := make([]bool, len(items))
	news.Run(func(b *batch) error { return c.leases.Store(ctx, b, l, kept) })
	for _, b := range news.List {
		if b.Err != nil {
			c.loads.cacheErrors.Add(1) // its items may or may not be stored
			lost = true                // nor is it known whether a Delete cleared the lease
			continue
		}
		for _, i := range b.Idx {
			if !kept[i] {
				c.loads.leasesLost.Add(1)
				lost = true
			}
		}
	}
	// A copy on an old owner is kept only beside a value kept on the new one.
	revoke := newBatches(st)
	for i, it := range items {
		if routes[i].Dual && !routes[i].Before && !kept[i] {
			revoke.AddKey(routes[i].Old, it.Key, i)
		}
	}
	revoke.Run(func(b *batch) error { return b.Conn.DeleteMulti(ctx, b.Keys) })
	for _, b := range revoke.List {
		if b.Err != nil {
			c.loads.cacheErrors.Add(1)
		}
	}
	return lost
}

// releaseLeases gives up l's leases of keys, after loads that store
// nothing: one round trip per owner. A failure is counted; the leases
// expire after Options.Lease.
func (c *Client) releaseLeases(ctx context.Context, st *state, now time.Time, keys []string, l *lease.Lease) {
	c.loads.cacheErrors.Add(int64(c.fleet(st, now).Release(ctx, keys, l)))
}

// clearLease deletes key's lease, whoever holds it, for Delete: a load under
// it will not store its value.
func (c *Client) clearLease(ctx context.Context, r route, key string) error {
	err := r.st.conn(r.New).Delete(ctx, c.leases.Key(key))
	if err != nil && r.st.goneFailed(r.New.Addr, err) {
		return nil // a node gone holds no lease to keep (failopen.go)
	}
	return fail("delete", r.New, key, err)
}

// clearLeases is clearLease for DeleteMulti: one round trip per owner, in
// parallel.
func (c *Client) clearLeases(ctx context.Context, keys []string) error {
	st, now := c.load()
	if st == nil {
		return ErrClosed
	}
	var errs []error
	for _, b := range c.fleet(st, now).Clear(ctx, keys) {
		if !st.goneFailed(b.Node.Addr, b.Err) {
			errs = append(errs, nodeErr("delete_multi", b.Node, b.Keys, b.Err))
		}
	}
	return errors.Join(errs...)
}

// leaseGets reads keys on their owners with the leases that vivify and
// refresh take (lease.Fleet.Gets): ans[i] is key i's answer; plain[i] when
// its owner has no lease reads, failed[i] when it could not be read, err
// then joining one *NodeError per owner that failed, those FailOpen
// forgives left out (counted).
func (c *Client) leaseGets(ctx context.Context, st *state, now time.Time, keys []string, token string, vivify bool, refresh time.Duration) (ans []node.LeaseAnswer, plain, failed []bool, err error) {
	ans, plain, failed, down := c.fleet(st, now).Gets(ctx, keys, token, vivify, refresh)
	var errs []error
	for _, b := range down {
		if !c.openBatch(st, b, len(b.Keys), true) {
			errs = append(errs, nodeErr("get_multi", b.Node, b.Keys, b.Err))
		}
	}
	return ans, plain, failed, errors.Join(errs...)
}

// takeLeases is a round of GetMultiOrLoad's leases (loadLeased): it takes
// the leases of keys under l and reads them (lease.Taker), with
// Options.MetaLeases in the reads themselves (one round trip per owner,
// FailOpen applied as leaseGets does; a won miss of a moved key read on its
// old owner), otherwise, and on owners without lease reads, with
// lease.Fleet.Acquire and then getMulti. found holds the values read,
// got[i] is set when key i's lease is l's, failed[i] when the key is to be
// loaded without a lease; a key in none is another's to load. A nil found
// means the client is closed.
func (c *Client) takeLeases(ctx context.Context, st *state, now time.Time, keys []string, l *lease.Lease) (found map[string][]byte, got, failed []bool, err error) {
	t := lease.Taker{Fleet: c.fleet(st, now), Meta: c.opts.MetaLeases, ServeStale: c.refreshWindow() > 0,
		Gets: func(ctx context.Context, keys []string, token string) ([]node.LeaseAnswer, []bool, []bool, error) {
			return c.leaseGets(ctx, st, now, keys, token, true, 0)
		},
		Read: c.getMulti, CacheErrors: &c.loads.cacheErrors}
	if st.mig != nil {
		t.Elsewhere = func(ctx context.Context, keys []string, found func(*item)) {
			var moved []string
			var routes []migration.Route
			for _, k := range keys {
				if r := st.mig.Route(k, now); r.Fallback {
					moved, routes = append(moved, k), append(routes, r)
				}
			}
			if len(moved) > 0 {
				c.fromOld(ctx, st, now, moved, routes, copyRead, found)
			}
		}
	}
	return t.Take(ctx, keys, l)
}
