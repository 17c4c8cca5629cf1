package client

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/shardcache/shardcache/internal/lease"
	"github.com/shardcache/shardcache/internal/loading"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/migration"
)

// Serving stale while one process refreshes (Options.StaleWhileRevalidate)
// and refreshing early (Options.EarlyRefresh). A value loaded with a TTL is
// stored for TTL+StaleWhileRevalidate (its hard TTL); its refresh window is
// the last StaleWhileRevalidate+EarlyRefresh of that. GetOrLoad's read asks
// the owner, in the same round trip, whether the value is in its window,
// and if so hands its refresh to one caller of the fleet, who reloads it in
// the background; every caller, that one included, is answered at once with
// the value read. On Memcached the window is memcached's own R flag (the
// remaining TTL under it: W for one client, Z for the others) and the store
// is conditional on the value's CAS id; on Redis a script compares the
// key's PTTL with the window and takes the lease key (lease.go), and the
// store is StoreLeased's. The soft TTL is not kept anywhere: it is the hard
// TTL less StaleWhileRevalidate, so a plain GET of the key by any client
// reads the value unchanged (and until its hard TTL, which other clients
// see as the TTL). A Delete during a refresh makes its store fail, as a
// lease's. A failed refresh is not retried until the value expires for
// good on Memcached (the server's W is given once per value), or its lease
// does on Redis.

// refreshWindow is how long before its hard expiry a value is refreshed; 0
// when neither option is set.
func (c *Client) refreshWindow() time.Duration {
	return c.opts.StaleWhileRevalidate + c.opts.EarlyRefresh
}

// hardTTL is the TTL a loaded value is stored with: ttl plus the time it is
// served stale (none for none).
func (c *Client) hardTTL(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return ttl
	}
	return ttl + c.opts.StaleWhileRevalidate
}

// readFresh is GetOrLoad's read with a refresh window: the value, and
// whether one was found; a value in its window won by this call is
// reloaded in the background (not a negative entry: see getMultiFresh). A
// copy held in the near cache answers first; a node without lease reads,
// or a miss during a migration, reads as get does (with its fallback).
func (c *Client) readFresh(ctx context.Context, r route, key string, ttl time.Duration, load func(context.Context) ([]byte, error)) ([]byte, error) {
	if v, held, err := c.nearGet(&r, key); held && (err == nil || !r.Fallback) {
		return v, err
	}
	lr := lease.Reader(r.st.conn(r.New))
	if lr == nil {
		return c.get(ctx, r, key)
	}
	token := rand.Text()
	rd := c.leases.Read([]string{key}, token, false, c.refreshWindow())
	ans, err := lr.LeaseGet(ctx, []string{key}, rd)
	switch {
	case err == ErrUnsupported:
		return c.get(ctx, r, key)
	case err != nil:
		return nil, c.open(r.st, fail("get", r.New, key, err), true)
	}
	a := ans[0]
	if !a.Found {
		if r.Fallback {
			return c.get(ctx, r, key)
		}
		return nil, ErrCacheMiss
	}
	if a.Stale {
		c.loads.stale.Add(1)
	}
	if a.Won && !loading.IsNegative(a.Value) {
		c.refresh(ctx, r, key, ttl, load, lease.Won(token, key, a))
	}
	return a.Value, nil
}

// refresh reloads key in the background under l, a refresh's lease, and
// stores the value if the lease still holds.
func (c *Client) refresh(ctx context.Context, r route, key string, ttl time.Duration, load func(context.Context) ([]byte, error), l *lease.Lease) {
	lctx, done, ok := c.refreshes.Start(ctx)
	if !ok {
		return
	}
	c.loads.refreshes.Add(1)
	go func() {
		defer done()
		if err := c.admit(lctx, r.st, key); err != nil {
			c.releaseLeases(lctx, r.st, r.now, []string{key}, l)
			return
		}
		v, err := loading.Call(lctx, key, load)
		c.loads.loads.Add(1)
		st, now := c.load() // the placement now: a migration may have ended meanwhile
		if st == nil {
			return
		}
		switch {
		case errors.Is(err, ErrNotFound) && c.opts.NegativeTTL > 0:
			c.loads.notFound.Add(1)
			c.storeUnderLease(lctx, st, now, []item{{Key: key, Value: []byte(loading.Negative), TTL: c.opts.NegativeTTL}}, l)
		case err != nil:
			c.loads.loadErrors.Add(1)
			c.releaseLeases(lctx, st, now, []string{key}, l)
		default:
			if v == nil {
				v = []byte{}
			}
			c.storeUnderLease(lctx, st, now, []item{{Key: key, Value: v, TTL: c.hardTTL(ttl)}}, l)
		}
	}()
}

// getMultiFresh is GetMultiOrLoad's read with a refresh window: the values
// found, as getMulti's (the near cache's first, then one lease read per
// owner; during a migration the misses of moved keys from their old
// owners), and refresh, nil or the background reload of the keys in their
// window whose refresh this call won, for GetMultiOrLoad to start once its
// own load, if any, has returned. A negative entry is not refreshed: it
// lives NegativeTTL, inside the window, and its lease expires unused.
// Keys whose owner has no lease reads are read as getMulti reads them.
func (c *Client) getMultiFresh(ctx context.Context, keys []string, ttl time.Duration,
	load func(context.Context, []string) (map[string][]byte, error)) (hits map[string][]byte, refresh func(), err error) {
	st, now, err := c.beginMulti(ctx, keys)
	if err != nil {
		return nil, nil, err
	}
	hits = make(map[string][]byte, len(keys))
	keys = c.nearMulti(st, now, keys, func(k string, v []byte) { hits[k] = v })
	token := rand.Text()
	ans, plain, _, err := c.leaseGets(ctx, st, now, keys, token, false, c.refreshWindow())
	errs := []error{err}
	var again, moved, won []string
	var routes []migration.Route
	l := &lease.Lease{Token: token, Meta: map[string]node.LeaseAnswer{}}
	for i, k := range keys {
		switch a := ans[i]; {
		case plain[i]:
			again = append(again, k)
		case a.Found:
			hits[k] = a.Value
			if st.mig != nil {
				st.mig.Counters.NewHits.Add(1)
			}
			if a.Stale {
				c.loads.stale.Add(1)
			}
			if _, dup := l.Meta[k]; a.Won && !dup && !loading.IsNegative(a.Value) {
				l.Meta[k] = a
				won = append(won, k)
			}
		case st.mig != nil:
			if r := st.mig.Route(k, now); r.Fallback {
				moved, routes = append(moved, k), append(routes, r)
			}
		}
	}
	if len(moved) > 0 {
		c.fromOld(ctx, st, now, moved, routes, copyRead, func(it *item) { hits[it.Key] = it.Value })
	}
	if len(again) > 0 {
		more, err := c.getMulti(ctx, again)
		if more == nil {
			return nil, nil, err
		}
		errs = append(errs, err)
		for k, v := range more {
			hits[k] = v
		}
	}
	if len(won) > 0 {
		refresh = func() { c.refreshMulti(ctx, won, ttl, load, l) }
	}
	return hits, refresh, errors.Join(errs...)
}

// refreshMulti reloads keys in the background under l, their refreshes'
// leases, with one call of load, and stores the values whose lease still
// holds (loadBatch).
func (c *Client) refreshMulti(ctx context.Context, keys []string, ttl time.Duration,
	load func(context.Context, []string) (map[string][]byte, error), l *lease.Lease) {
	lctx, done, ok := c.refreshes.Start(ctx)
	if !ok {
		return
	}
	c.loads.refreshes.Add(int64(len(keys)))
	go func() {
		defer done()
		st, now := c.load()
		if st == nil {
			return
		}
		c.loadBatch(lctx, st, now, make(map[string][]byte, len(keys)), keys, ttl, load, l)
	}()
}
