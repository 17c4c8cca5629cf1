package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/murmur3"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/migration"
)

// Leases: one load per key across the fleet (Options.Lease), after "Scaling
// Memcache at Facebook" (NSDI 2013). Singleflight stops a stampede in one
// process; a fleet of processes would still send one load each. With leases,
// the process that misses first takes a lease on the key, in the cache
// itself, on the key's owner: a lease key holding a random token, set only if
// absent (Redis SET NX PX, Memcached add) and expiring after Options.Lease.
// The others find the lease taken and re-read the key every
// Options.LeaseRetry until the value lands, or the lease is gone (released
// after a failed load, or expired with its holder) and they take it.
// GetMultiOrLoad does the same per key, with one round trip per node for each
// step: it takes the leases of its misses, loads those it holds in one batch,
// then waits for the others (and loads in one more batch any whose lease it
// takes later).
//
// The value is stored only if the lease is still held, and Delete (and
// DeleteMulti) clear the lease before they delete the key, so a Delete during
// a load means the value loaded before it is not stored: the stale set the
// paper's leases prevent. A value loaded under a lease that expired is not
// stored either. A lease taken then finds the key present if the value
// landed meanwhile: a store sets the value before it clears the lease.
//
// On Redis the store is one Lua script: if the lease holds our token and
// the key is as the lease found it (absent, or for a refresh the value
// read), SET the value and DEL the lease, atomically. Memcached's text
// protocol has no conditional store on another key, so the store is an add
// (never over a value written meanwhile, nor a tombstone), then a check of
// the lease, then a delete of that value again if the lease was lost (md
// C<cas> where the server has the meta commands): a reader can see such a
// value for that one round trip before it is withdrawn. Nor has it a
// compare-and-delete: releasing a lease reads it and deletes it if it holds
// our token, so a lease that expired and was taken by another process in
// between can be deleted (at worst, one more load), and a lease lasts whole
// seconds, at least one. During a migration the copy to the old owner is
// written first and deleted again if the lease was lost, so a Delete that
// clears the lease, then the old owner, then the new owner leaves neither.
//
// Every process sharing the cache must agree on Lease: a Delete from a
// process without leases does not clear them. Processes that disagree on the
// placement (half-way through a rollout) take their leases on different
// nodes and may load once each.

// lease is a lease this process holds on keys, on their owners.
type lease struct {
	token string // what the lease key holds while it is ours
	// meta holds, by key, the leases won by reads (Options.MetaLeases, and
	// the refreshes of StaleWhileRevalidate and EarlyRefresh), stored and
	// released through node.LeaseReader; nil for leases taken with Add.
	meta map[string]node.LeaseAnswer
}

// metaLease returns the lease of one key won by a read.
func metaLease(token, key string, a node.LeaseAnswer) *lease {
	return &lease{token: token, meta: map[string]node.LeaseAnswer{key: a}}
}

// leaseRead is what a read of keys takes beside them: with vivify the
// leases of misses, with refresh the refresh of values in its window.
func (c *Client) leaseRead(keys []string, token string, vivify bool, refresh time.Duration) node.LeaseRead {
	return node.LeaseRead{Vivify: vivify, Lease: c.leaseTerm(), Refresh: refresh, LeaseKeys: c.leaseKeys(keys), Token: token}
}

// leasing reports whether loads take leases that a Delete must clear:
// Options.Lease, or the refreshes' (refresh.go).
func (c *Client) leasing() bool { return c.opts.Lease > 0 || c.refreshWindow() > 0 }

// leaseTerm is how long a lease lasts: Options.Lease, or for the refreshes
// of a client without leases, DefaultRefreshLease.
func (c *Client) leaseTerm() time.Duration {
	if c.opts.Lease > 0 {
		return c.opts.Lease
	}
	return DefaultRefreshLease
}

// DefaultRefreshLease is how long the lease of a background refresh
// (Options.StaleWhileRevalidate, Options.EarlyRefresh) lasts on Redis when
// Options.Lease is not set.
const DefaultRefreshLease = 30 * time.Second

// leaseReader returns n's lease reads, nil without them (a node down).
func (c *Client) leaseReader(n node.Node) node.LeaseReader {
	lr, _ := n.(node.LeaseReader)
	return lr
}

// waitBackoff waits after the attempt-th look at a lease held by another
// process: Options.LeaseRetry, doubled each time up to 4 times it, or
// until ctx is done.
func (c *Client) waitBackoff(ctx context.Context, t **time.Timer, attempt int) error {
	d := c.opts.LeaseRetry << min(attempt, 2)
	if *t == nil {
		*t = time.NewTimer(d)
	} else {
		(*t).Reset(d)
	}
	select {
	case <-(*t).C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// metaLeaseOrValue is leaseOrValue with the lease taken by the read
// (node.LeaseReader), one round trip: the owner's add of a placeholder and
// its read on Memcached, a script on Redis. A node without lease reads
// takes leaseOrValue's.
func (c *Client) metaLeaseOrValue(ctx context.Context, r route, key string) (l *lease, v []byte, hit bool, at time.Time, err error) {
	lr := c.leaseReader(r.st.conn(r.New))
	if lr == nil {
		return c.leaseOrValue(ctx, r, key)
	}
	token := rand.Text()
	rd := c.leaseRead([]string{key}, token, true, 0)
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	serveStale := c.opts.StaleWhileRevalidate > 0 || c.opts.EarlyRefresh > 0
	for attempt := 0; ; attempt++ {
		if c.state.Load() == nil {
			return nil, nil, false, at, ErrClosed
		}
		at = time.Now()
		ans, err := lr.LeaseGet(ctx, []string{key}, rd)
		switch {
		case err == node.ErrUnsupported:
			return c.leaseOrValue(ctx, r, key)
		case err != nil:
			c.loads.cacheErrors.Add(1)
			return nil, nil, false, at, nil // loaded without a lease
		}
		a := ans[0]
		switch {
		case a.Won:
			l := metaLease(token, key, a)
			if !a.Found && r.Fallback {
				// The value may be on the old owner: read it there (the
				// copy to the new owner stops at the placeholder).
				if v, err := c.get(ctx, r, key); err == nil {
					c.releaseLeases(ctx, r.st, r.now, []string{key}, l)
					return nil, v, true, at, nil
				}
			}
			return l, nil, false, at, nil
		case a.Found && (!a.Held || serveStale):
			return nil, a.Value, true, at, nil
		case !a.Held:
			return nil, nil, false, at, nil // a tombstone: loaded without a lease
		}
		if attempt == 0 {
			c.loads.leaseWaits.Add(1)
		}
		c.waitBackoff(ctx, &retry, attempt) // ctx has no end: the load's outlives its callers
	}
}

// leasePrefix starts every lease key.
const leasePrefix = "shardcache:lease:"

// leaseKey returns the key of key's lease: "shardcache:lease:" and the key,
// or, when that would be longer than Options.MaxKeyLength, "shardcache:lease:#"
// and 32 hex digits of the key's 128-bit murmur3 hash.
func (c *Client) leaseKey(key string) string {
	if len(leasePrefix)+len(key) <= c.opts.MaxKeyLength {
		return leasePrefix + key
	}
	h1, h2 := murmur3.StringSum128(key)
	return fmt.Sprintf("%s#%016x%016x", leasePrefix, h1, h2)
}

// leaseKeys returns the lease keys of keys.
func (c *Client) leaseKeys(keys []string) []string {
	lkeys := make([]string, len(keys))
	for i, k := range keys {
		lkeys[i] = c.leaseKey(k)
	}
	return lkeys
}

// waitRetry waits Options.LeaseRetry on t, made on first use, or until ctx
// is done.
func (c *Client) waitRetry(ctx context.Context, t **time.Timer) error {
	if *t == nil {
		*t = time.NewTimer(c.opts.LeaseRetry)
	} else {
		(*t).Reset(c.opts.LeaseRetry)
	}
	select {
	case <-(*t).C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leaseOrValue takes the lease on key, or waits for the value that the
// holder of the lease loads. It returns the value when it is in the cache
// (hit), or the lease to load under. A nil lease without a hit means the
// lease could not be taken for a failure of the cache: the load goes on
// without one.
func (c *Client) leaseOrValue(ctx context.Context, r route, key string) (l *lease, v []byte, hit bool, at time.Time, err error) {
	cand := &lease{token: rand.Text()}
	lkey := c.leaseKey(key)
	var lerr error
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for waited := false; ; waited = true {
		if c.state.Load() == nil {
			return nil, nil, false, at, ErrClosed // no load for a closed client
		}
		got := false
		if lerr == nil {
			switch lerr = r.st.conn(r.New).Add(ctx, lkey, []byte(cand.token), c.opts.Lease); lerr {
			case nil:
				got = true
			case ErrNotStored:
				lerr = nil
			}
		}
		// Read after the attempt: a store sets the value before it clears
		// the lease, so a lease just taken finds a value that just landed.
		at = time.Now()
		v, err := c.get(ctx, r, key)
		switch {
		case err == nil:
			if got {
				c.releaseLeases(ctx, r.st, r.now, []string{key}, cand)
			}
			return nil, v, true, at, nil
		case err != ErrCacheMiss:
			c.loads.cacheErrors.Add(1)
		}
		if got {
			return cand, nil, false, at, nil
		}
		if lerr != nil {
			c.loads.cacheErrors.Add(1)
			return nil, nil, false, at, nil
		}
		if !waited {
			c.loads.leaseWaits.Add(1)
		}
		c.waitRetry(ctx, &retry) // ctx has no end: the load's outlives its callers
	}
}

// acquireLeases takes the leases of keys with token, one round trip per
// owner: got[i] when key i's lease is ours, failed[i] when its owner could
// not be asked.
func (c *Client) acquireLeases(ctx context.Context, st *state, now time.Time, keys []string, token string) (got, failed []bool) {
	got, failed = make([]bool, len(keys)), make([]bool, len(keys))
	bs := newBatches(st)
	for i, k := range keys {
		bs.Add(st.first(k, now), item{Key: c.leaseKey(k), Value: []byte(token), TTL: c.opts.Lease}, i, false)
	}
	bs.Run(func(b *batch) (err error) {
		stored, err := b.Conn.AddMulti(ctx, b.Items)
		for j, ok := range stored {
			got[b.Idx[j]] = ok
		}
		return err
	})
	for _, b := range bs.List {
		if b.Err != nil {
			c.loads.cacheErrors.Add(1)
			for _, i := range b.Idx {
				failed[i] = true
			}
		}
	}
	return got, failed
}

// storeUnderLease stores loaded items whose leases this process holds with
// token, one round trip per node for each step. During a migration the
// copies to old owners are written first, as dual writes, and deleted again
// where the lease was lost, so that a Delete that clears the lease, then the
// old owner, then the new owner leaves neither (see above).
func (c *Client) storeUnderLease(ctx context.Context, st *state, now time.Time, items []item, l *lease) {
	for _, it := range items {
		c.follower.Wrote(it.Key) // before the state is looked at again: see beginWrite
	}
	if cur := c.state.Load(); cur != st && cur != nil {
		st, now = c.load() // a topology applied since the lease: route as it says
	}
	for st != nil && st.hold {
		if waitRelease(ctx, st) != nil {
			return
		}
		st, now = c.load()
	}
	if st == nil {
		return
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
	news.Run(func(b *batch) error {
		// Each key by the kind of lease it holds: one kind per node, but
		// a topology applied since may have brought keys of two together.
		var errs []error
		for meta, part := range b.Split(func(k string) bool { _, ok := l.meta[k]; return ok }) {
			var stored []bool
			var err error
			switch {
			case part == nil:
				continue
			case meta == 1:
				stored, err = c.storeMeta(ctx, part, l)
			default:
				stored, err = leaser(b.Conn).StoreLeased(ctx, part.Items, c.leaseKeys(part.Keys), l.token)
			}
			for j, s := range stored {
				kept[part.Idx[j]] = s
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
	for _, b := range news.List {
		if b.Err != nil {
			c.loads.cacheErrors.Add(1) // its items may or may not be stored
			continue
		}
		for _, i := range b.Idx {
			if !kept[i] {
				c.loads.leasesLost.Add(1)
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
}

// storeMeta stores a batch's items under leases won by reads.
func (c *Client) storeMeta(ctx context.Context, b *batch, l *lease) ([]bool, error) {
	lr := c.leaseReader(b.Conn)
	if lr == nil {
		return make([]bool, len(b.Items)), ErrUnsupported
	}
	leases := make([]node.LeaseAnswer, len(b.Keys))
	for j, k := range b.Keys {
		leases[j] = l.meta[k]
	}
	return lr.LeaseStore(ctx, b.Items, leases, c.leaseRead(b.Keys, l.token, false, 0))
}

// releaseLeases gives up l's leases of keys, after loads that store
// nothing: one round trip per owner.
func (c *Client) releaseLeases(ctx context.Context, st *state, now time.Time, keys []string, l *lease) {
	metas, keyed := newBatches(st), newBatches(st) // leases won by reads, lease keys
	for i, k := range keys {
		if _, ok := l.meta[k]; ok {
			metas.AddKey(st.first(k, now), k, i)
		} else {
			keyed.AddKey(st.first(k, now), c.leaseKey(k), i)
		}
	}
	keyed.Run(func(b *batch) error { return leaser(b.Conn).ReleaseLeases(ctx, b.Keys, l.token) })
	metas.Run(func(b *batch) error {
		lr := c.leaseReader(b.Conn)
		if lr == nil {
			return ErrUnsupported
		}
		leases := make([]node.LeaseAnswer, len(b.Keys))
		for j, k := range b.Keys {
			leases[j] = l.meta[k]
		}
		return lr.LeaseRelease(ctx, b.Keys, leases, c.leaseRead(b.Keys, l.token, false, 0))
	})
	for _, b := range slices.Concat(keyed.List, metas.List) {
		if b.Err != nil {
			c.loads.cacheErrors.Add(1) // the leases expire after Options.Lease
		}
	}
}

// clearLease deletes key's lease, whoever holds it, for Delete: a load under
// it will not store its value.
func (c *Client) clearLease(ctx context.Context, r route, key string) error {
	err := r.st.conn(r.New).Delete(ctx, c.leaseKey(key))
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
	bs := newBatches(st)
	for i, k := range keys {
		bs.AddKey(st.first(k, now), c.leaseKey(k), i)
	}
	bs.Run(func(b *batch) error { return b.Conn.DeleteMulti(ctx, b.Keys) })
	var errs []error
	for _, b := range bs.List {
		if b.Err != nil && !st.goneFailed(b.Node.Addr, b.Err) {
			errs = append(errs, nodeErr("delete_multi", b.Node, b.Keys, b.Err))
		}
	}
	return errors.Join(errs...)
}

// leaseGets reads keys on their owners with the leases that vivify and
// refresh take (node.LeaseReader), one round trip per owner, in parallel:
// ans[i] is key i's answer; plain[i] when its owner has no lease reads (a
// Memcached without the meta commands, a node held down), failed[i] when
// it could not be read, err then joining one *NodeError per owner that
// failed, those FailOpen forgives left out (counted).
func (c *Client) leaseGets(ctx context.Context, st *state, now time.Time, keys []string, token string, vivify bool, refresh time.Duration) (ans []node.LeaseAnswer, plain, failed []bool, err error) {
	ans, plain, failed = make([]node.LeaseAnswer, len(keys)), make([]bool, len(keys)), make([]bool, len(keys))
	bs := newBatches(st)
	for i, k := range keys {
		bs.AddKey(st.first(k, now), k, i)
	}
	bs.Run(func(b *batch) error {
		lr := c.leaseReader(b.Conn)
		if lr == nil {
			return ErrUnsupported
		}
		got, err := lr.LeaseGet(ctx, b.Keys, c.leaseRead(b.Keys, token, vivify, refresh))
		for j, a := range got {
			ans[b.Idx[j]] = a
		}
		return err
	})
	var errs []error
	for _, b := range bs.List {
		switch {
		case b.Err == nil:
		case b.Err == ErrUnsupported:
			for _, i := range b.Idx {
				plain[i] = true
			}
		default:
			for _, i := range b.Idx {
				failed[i] = true
			}
			if !c.openBatch(st, b, len(b.Keys), true) {
				errs = append(errs, nodeErr("get_multi", b.Node, b.Keys, b.Err))
			}
		}
	}
	return ans, plain, failed, errors.Join(errs...)
}

// takeLeases is a round of GetMultiOrLoad's leases (loadLeased): it takes
// the leases of keys under l and reads them, with Options.MetaLeases in
// the reads themselves (one round trip per owner), otherwise, and on
// owners without lease reads, with acquireLeases and then a read. found
// holds the values read, got[i] is set when key i's lease is l's, failed[i]
// when the key is to be loaded without a lease (its owner could not be
// asked, or holds a migration's tombstone); a key in none is another's to
// load. A nil found means the client is closed.
func (c *Client) takeLeases(ctx context.Context, st *state, now time.Time, keys []string, l *lease) (found map[string][]byte, got, failed []bool, err error) {
	got, failed = make([]bool, len(keys)), make([]bool, len(keys))
	classic := keys
	var pos []int // classic[j] is keys[pos[j]]; nil: the same
	var errs []error
	found = make(map[string][]byte, len(keys))
	if c.opts.MetaLeases {
		ans, plain, unread, err := c.leaseGets(ctx, st, now, keys, l.token, true, 0)
		errs = append(errs, err)
		serveStale := c.refreshWindow() > 0
		var elsewhere []string // won misses of moved keys: the value may be on the old owner
		var routes []migration.Route
		classic, pos = nil, []int{}
		for i, k := range keys {
			switch a := ans[i]; {
			case plain[i]:
				classic, pos = append(classic, k), append(pos, i)
			case unread[i]:
				failed[i] = true
			case a.Won:
				got[i] = true
				l.meta[k] = a
				if !a.Found && st.mig != nil {
					if r := st.mig.Route(k, now); r.Fallback {
						elsewhere, routes = append(elsewhere, k), append(routes, r)
					}
				}
			case a.Found && (!a.Held || serveStale):
				found[k] = a.Value
			case !a.Held:
				failed[i] = true // a tombstone: loaded without a lease
			}
		}
		if len(elsewhere) > 0 {
			// The copy to the new owner stops at the placeholder: a value
			// found on an old owner is answered, and its lease released.
			c.fromOld(ctx, st, now, elsewhere, routes, copyRead, func(it *item) { found[it.Key] = it.Value })
		}
	}
	if len(classic) > 0 {
		cgot, cfailed := c.acquireLeases(ctx, st, now, classic, l.token)
		// Read after the attempt, as GetOrLoad does (leaseOrValue).
		more, err := c.getMulti(ctx, classic)
		if more == nil {
			return nil, nil, nil, err
		}
		errs = append(errs, err)
		for k, v := range more {
			found[k] = v
		}
		for j := range classic {
			i := j
			if pos != nil {
				i = pos[j]
			}
			got[i], failed[i] = cgot[j], cfailed[j]
		}
	}
	return found, got, failed, errors.Join(errs...)
}
