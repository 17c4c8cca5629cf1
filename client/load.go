package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/shardcache/shardcache/internal/lease"
	"github.com/shardcache/shardcache/internal/loading"
	"github.com/shardcache/shardcache/internal/node"
)

// Read-through loading. A miss is paid by the database behind the cache; when
// a hot key expires, or a resharding moves keys, many callers miss the same
// key at once. GetOrLoad protects the database three ways:
//
//   - in one process, one load per key however many callers wait
//     (golang.org/x/sync/singleflight);
//   - across processes, with Options.Lease, one load per key for the fleet
//     (lease.go);
//   - with Options.LoadLimit, a cap on loader calls per second
//     (golang.org/x/time/rate), past which loads fail fast with
//     ErrLoadThrottled and the application degrades instead of the database.
//
// Stores go through the same paths as Set and SetMulti, so during a migration
// they reach both owners, and reads fall back to the old owner before
// anything is loaded. The plumbing (the negative entry, the limiter, a
// loader's call with its panic recovered, the group of background
// refreshes) is package internal/loading's; this file decides when to load
// and what to store.

// LoadLimit caps the loader calls of GetOrLoad and GetMultiOrLoad in one
// process, so a miss storm cannot take the database down.
type LoadLimit struct {
	// PerSecond is the sustained rate of loader calls allowed, > 0.
	PerSecond float64
	// Burst is how many loader calls may start at once after a quiet
	// period. Default PerSecond rounded up, at least 1.
	Burst int
	// DuringMigration limits loads only while a migration's window is open,
	// when misses are expected to rise; the default limits them always.
	DuringMigration bool
	// MaxWait is the longest a load waits for a token, on top of the
	// caller's deadline, which always bounds the wait: a load whose token
	// comes later fails at once with ErrLoadThrottled. Default 0: the
	// caller's deadline alone (no deadline: wait for the token). Negative:
	// never wait, throttle as soon as no token is free.
	MaxWait time.Duration
}

// LoadStats counts what GetOrLoad and GetMultiOrLoad did since New, per key
// unless said otherwise.
type LoadStats struct {
	Hits         int64 // keys answered by the cache
	NegativeHits int64 // keys answered ErrNotFound by a negative entry in the cache
	Misses       int64 // keys not in the cache
	Loads        int64 // loader calls (a batch counts once)
	LoadErrors   int64 // loader calls that failed: returned, never cached
	NotFound     int64 // keys the loader reported missing (ErrNotFound, or absent from a batch)
	Throttled    int64 // loads refused by LoadLimit (ErrLoadThrottled)
	Abandoned    int64 // callers whose context ended while they waited for a load
	LeaseWaits   int64 // loads not run here because another process held the lease
	LeasesLost   int64 // loaded values not stored: the lease was gone (a Delete, or it expired)
	CacheErrors  int64 // cache reads or stores that failed around a load, which went on
	Stale        int64 // hits read in their refresh window (StaleWhileRevalidate, EarlyRefresh), answered at once
	Refreshes    int64 // background reloads this process ran for the fleet (a refresh window's lease won)
}

// loadCounters are LoadStats' counters, updated atomically.
type loadCounters struct {
	hits, negativeHits, misses, loads, loadErrors, notFound   atomic.Int64
	throttled, abandoned, leaseWaits, leasesLost, cacheErrors atomic.Int64
	stale, refreshes                                          atomic.Int64
}

// LoadStats returns a snapshot of the load counters.
func (c *Client) LoadStats() LoadStats {
	l := &c.loads
	return LoadStats{
		Hits: l.hits.Load(), NegativeHits: l.negativeHits.Load(), Misses: l.misses.Load(),
		Loads: l.loads.Load(), LoadErrors: l.loadErrors.Load(), NotFound: l.notFound.Load(),
		Throttled: l.throttled.Load(), Abandoned: l.abandoned.Load(),
		LeaseWaits: l.leaseWaits.Load(), LeasesLost: l.leasesLost.Load(), CacheErrors: l.cacheErrors.Load(),
		Stale: l.stale.Load(), Refreshes: l.refreshes.Load(),
	}
}

// newLimiter returns the limiter of Options.LoadLimit, nil without one.
func newLimiter(o *Options) (*loading.Limiter, error) {
	l := o.LoadLimit
	if l == nil {
		return nil, nil
	}
	if !(l.PerSecond > 0) || l.Burst < 1 {
		return nil, fmt.Errorf("%w: LoadLimit %v per second, burst %d", ErrBadOptions, l.PerSecond, l.Burst)
	}
	return loading.NewLimiter(l.PerSecond, l.Burst, l.MaxWait, o.Now), nil
}

// admit takes a token for one loader call (loading.Limiter.Admit), or
// returns ErrLoadThrottled. st is the state the load runs in, for
// LoadLimit.DuringMigration. The limiter reads the client's clock, as
// migration windows do.
func (c *Client) admit(ctx context.Context, st *state, key string) error {
	if c.limiter == nil {
		return nil
	}
	now := c.opts.Now()
	if c.opts.LoadLimit.DuringMigration && (st.mig == nil || !st.mig.Active(now)) {
		return nil
	}
	err := c.limiter.Admit(ctx, now, key)
	if err != nil {
		c.loads.throttled.Add(1)
	}
	return err
}

// GetOrLoad returns the value of key from the cache or, on a miss, from load,
// storing it with ttl (0: no expiry) for the next callers.
//
// However many callers miss the same key at once in this process, load runs
// once (golang.org/x/sync/singleflight) and its value goes to all of them: the
// returned slice is shared between them and must not be modified. load gets a
// context with the values of the first caller's but not its deadline or
// cancellation: a caller whose context ends stops waiting and gets its
// context's error, and the load goes on for the others and is stored; bound
// load yourself if it can hang.
//
// During a migration a miss on the new owner falls back to the old owner
// before anything is loaded, and the value is stored on both owners, as Set
// does. A cache that cannot be read does not stop the load: the value is
// loaded (and counted in LoadStats.CacheErrors).
//
// An error from load is returned to every caller waiting for that load and
// is never cached: the next call loads again. When load returns an error
// that is ErrNotFound, GetOrLoad returns ErrNotFound, and with
// Options.NegativeTTL the answer is cached for that long. With
// Options.Lease, one process of the fleet loads the key and the others wait
// for its value (see Options.Lease). With Options.LoadLimit, a load that
// cannot start within the caller's deadline returns ErrLoadThrottled. A
// panic in load is returned as ErrLoadPanic to every waiter.
func (c *Client) GetOrLoad(ctx context.Context, key string, ttl time.Duration, load func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	start := time.Now()
	r, err := c.beginTTL(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	if load == nil {
		return nil, fmt.Errorf("%w: GetOrLoad without a loader", ErrBadOptions)
	}
	var v []byte
	var won *lease.Lease // taken by the first read (MetaLeases)
	switch {
	case c.refreshWindow() > 0:
		v, err = c.readFresh(ctx, r, key, ttl, load)
	case c.opts.Lease > 0 && c.opts.MetaLeases:
		v, won, err = c.readLeased(ctx, r, key)
	default:
		v, err = c.get(ctx, r, key)
	}
	if err == nil {
		return c.answer(v)
	}
	if err != ErrCacheMiss {
		if ctx.Err() != nil {
			return nil, err
		}
		c.loads.cacheErrors.Add(1)
	}
	lctx := context.WithoutCancel(ctx)
	deadline, hasDeadline := ctx.Deadline()
	flight := func() (any, error) {
		// The first caller's deadline bounds the wait for a token: it is
		// the one whose call started the load.
		actx := lctx
		if hasDeadline {
			var cancel context.CancelFunc
			actx, cancel = context.WithDeadline(lctx, deadline)
			defer cancel()
		}
		if won != nil {
			return c.loadUnder(lctx, actx, r, key, ttl, load, won)
		}
		return c.loadKey(lctx, actx, key, ttl, load)
	}
	// Counted once the caller waits on a load (DoChan joins or starts one
	// before it returns), so a count of n misses means n waiters.
	c.loads.misses.Add(1)
	for joined := 0; ; joined++ {
		var wait <-chan singleflight.Result
		switch {
		case joined > 0:
			wait = c.flight.DoChan(key, flight)
		case won != nil:
			wait = c.winners.load(key, flight)
		default:
			if wait = c.winners.join(key); wait == nil {
				wait = c.flight.DoChan(key, flight)
			}
		}
		select {
		case res := <-wait:
			won = nil // a second flight, if any, reads again
			if res.Err != nil {
				return nil, res.Err
			}
			f := res.Val.(flown)
			// A flight that found the value in the cache before this call
			// began may hold one that a write or a delete since replaced,
			// and so may one that loaded it before and lost its lease to
			// such a delete: once, ask a flight of its own (the one
			// joined is over).
			if f.readAt.IsZero() || !f.readAt.Before(start) || joined > 0 {
				return f.v, nil
			}
		case <-ctx.Done():
			c.loads.abandoned.Add(1)
			return nil, ctx.Err()
		}
	}
}

// winners are the loads of GetOrLoad calls whose first read took the key's
// lease (Options.MetaLeases), by key: at most one a key in a process. The
// process's other callers of the key, whose reads found the lease held,
// take the value from it rather than wait on the lease in the cache; a
// winner never joins a flight of the key's, which may be waiting on the
// winner's own lease. A caller whose read found the lease an instant before
// its winner registered waits on the lease, as another process would.
type winners struct{ m sync.Map } // key → *wonLoad

// wonLoad is one winner's load: its result once done is closed.
type wonLoad struct {
	done chan struct{}
	res  singleflight.Result
}

// load runs load as key's winner, on a goroutine of its own (it outlives a
// caller that stops waiting, as a flight does), and returns its result's
// channel.
func (w *winners) load(key string, load func() (any, error)) <-chan singleflight.Result {
	l := &wonLoad{done: make(chan struct{})}
	w.m.Store(key, l)
	go func() {
		v, err := load()
		l.res = singleflight.Result{Val: v, Err: err}
		w.m.CompareAndDelete(key, l)
		close(l.done)
	}()
	return l.result()
}

// join returns the result's channel of key's winner's load, nil if none runs.
func (w *winners) join(key string) <-chan singleflight.Result {
	l, ok := w.m.Load(key)
	if !ok {
		return nil
	}
	return l.(*wonLoad).result()
}

// result returns a channel that receives l's result once it is done.
func (l *wonLoad) result() <-chan singleflight.Result {
	ch := make(chan singleflight.Result, 1)
	go func() {
		<-l.done
		ch <- l.res
	}()
	return ch
}

// readLeased is GetOrLoad's first read with Options.MetaLeases: the read
// that takes a miss's lease (node.LeaseReader), one round trip, after the
// key's near copy. It returns the value, or ErrCacheMiss with the lease
// when the read took it (the value not on the old owner either, in a
// migration), without one when another process holds it or the key is a
// tombstone, for the flight to wait or load. A node without lease reads
// is read as Get reads it.
func (c *Client) readLeased(ctx context.Context, r route, key string) ([]byte, *lease.Lease, error) {
	if v, held, err := c.nearGet(&r, key); held && (err == nil || !r.Fallback) {
		return v, nil, err
	}
	lr := lease.Reader(r.st.conn(r.New))
	if lr == nil {
		v, err := c.get(ctx, r, key)
		return v, nil, err
	}
	token := rand.Text()
	ans, err := lr.LeaseGet(ctx, []string{key}, c.leases.Read([]string{key}, token, true, 0))
	switch {
	case err == ErrUnsupported:
		v, err := c.get(ctx, r, key)
		return v, nil, err
	case err != nil:
		return nil, nil, c.open(r.st, fail("get", r.New, key, err), true)
	}
	switch a := ans[0]; {
	case a.Won:
		l := lease.Won(token, key, a)
		if r.Fallback {
			// The value may be on the old owner (the copy to the new one
			// stops at the placeholder): read it there, as lease.Waiter does.
			if v, err := c.get(ctx, r, key); err == nil {
				c.releaseLease(ctx, r, l, key)
				return v, nil, nil
			}
		}
		return nil, l, ErrCacheMiss
	case a.Found && !a.Held:
		return a.Value, nil, nil
	}
	return nil, nil, ErrCacheMiss
}

// flown is what a flight of loadKey found: a value loaded, or read from the
// cache by a read that began at readAt; for a value loaded under a
// lease found lost at the store, readAt is when the load began.
type flown struct {
	v      []byte
	readAt time.Time
}

// answer returns a cached value, or ErrNotFound for a negative entry, and
// counts it.
func (c *Client) answer(v []byte) ([]byte, error) {
	if loading.IsNegative(v) {
		c.loads.negativeHits.Add(1)
		return nil, ErrNotFound
	}
	c.loads.hits.Add(1)
	return v, nil
}

// cached is answer for a load that found the value in the cache after all,
// by a read that began at at: its callers were counted as misses.
func cached(v []byte, at time.Time) (any, error) {
	if loading.IsNegative(v) {
		return nil, ErrNotFound
	}
	return flown{v: v, readAt: at}, nil
}

// loadKey is one load of key, run by singleflight for every caller waiting
// on it: it reads the cache once more (a load that finished just before this
// one started has stored the value), takes the lease if leases are on,
// loads and stores. A nil value is stored as an empty one, as Set does. ctx is the load's; admitCtx adds the first caller's
// deadline, for the wait for a token.
func (c *Client) loadKey(ctx, admitCtx context.Context, key string, ttl time.Duration, load func(context.Context) ([]byte, error)) (any, error) {
	r, err := c.begin(ctx, key) // the route now: a migration may have ended meanwhile
	if err != nil {
		return nil, err
	}
	var l *lease.Lease
	if c.opts.Lease > 0 {
		got, err := c.leaseWaiter(r, key).Wait(ctx, key) // ctx has no end: the load's outlives its callers
		if err != nil {
			return nil, err
		}
		if got.Hit {
			return cached(got.Value, got.At)
		}
		l = got.Lease
	} else if !r.st.heldDown(r.New) { // a node held down was just read as a miss (FailOpen) or failed
		at := time.Now()
		v, err := c.get(ctx, r, key)
		if err == nil {
			return cached(v, at)
		}
		if err != ErrCacheMiss {
			c.loads.cacheErrors.Add(1)
		}
	}
	return c.loadUnder(ctx, admitCtx, r, key, ttl, load, l)
}

// loadUnder is loadKey once the cache has been read: it loads key, under
// lease l if not nil, and stores the value.
func (c *Client) loadUnder(ctx, admitCtx context.Context, r route, key string, ttl time.Duration, load func(context.Context) ([]byte, error), l *lease.Lease) (any, error) {
	if err := c.admit(admitCtx, r.st, key); err != nil {
		c.releaseLease(ctx, r, l, key)
		return nil, err
	}
	began := time.Now()
	v, err := loading.Call(ctx, key, load)
	c.loads.loads.Add(1)
	switch {
	case errors.Is(err, ErrNotFound):
		c.loads.notFound.Add(1)
		if c.opts.NegativeTTL > 0 {
			c.store(ctx, r, l, key, []byte(loading.Negative), c.opts.NegativeTTL)
		} else {
			c.releaseLease(ctx, r, l, key)
		}
		return nil, err
	case err != nil:
		c.loads.loadErrors.Add(1)
		c.releaseLease(ctx, r, l, key)
		return nil, err
	}
	if v == nil {
		v = []byte{}
	}
	if c.store(ctx, r, l, key, v, c.hardTTL(ttl)) {
		// The lease was lost (a Delete or a write of the key cleared it
		// during the load), or its store failed and nobody knows. The value
		// may be what a Delete deleted, so a caller that began after the
		// load did asks a flight of its own.
		return flown{v: v, readAt: began}, nil
	}
	return flown{v: v}, nil
}

// store writes a loaded value (or a negative entry) as Set does, both owners
// during a migration; with a lease, only if the lease is still held (see
// lease.go). A failure is counted: the value has been loaded and is
// returned all the same. lost reports a lease found lost or not known to be
// held (storeUnderLease).
func (c *Client) store(ctx context.Context, r route, l *lease.Lease, key string, v []byte, ttl time.Duration) (lost bool) {
	if l != nil {
		return c.storeUnderLease(ctx, r.st, r.now, []item{{Key: key, Value: v, TTL: ttl}}, l)
	}
	if _, over := c.storable([]item{{Key: key, Value: v}}); len(over) > 0 {
		return false
	}
	// Routed now, not when the load began: a load may outlast a phase of
	// the migration (before its start, a write reaches the old owner alone,
	// which must not happen after the handover: copy.go).
	if now, err := c.beginWrite(ctx, key); err == nil {
		r = now
	}
	// As Set: a node FailOpen holds down drops the write, counted in Health.
	err := c.open(r.st, c.write(ctx, "set", r, key, func(n node.Node) error { return n.Set(ctx, key, v, ttl) }), false)
	if err != nil {
		c.loads.cacheErrors.Add(1)
	}
	return false
}

// releaseLease gives up lease l on key, if any, after a load that stores
// nothing.
func (c *Client) releaseLease(ctx context.Context, r route, l *lease.Lease, key string) {
	if l != nil {
		c.releaseLeases(ctx, r.st, r.now, []string{key}, l)
	}
}

// GetMultiOrLoad returns the values of keys: those in the cache from one
// bulk read (GetMulti, with its fallback to old owners during a migration),
// the others from one call of load with exactly the missing keys, in the
// order given and without duplicates. The loaded values are stored with ttl
// in one bulk store (SetMulti's, both owners during a migration) and
// returned with the hits.
//
// A key absent from load's map is not found: it is absent from the result
// and, with Options.NegativeTTL, cached as such, as are keys that are
// negative entries already. An error from load is returned with the hits and
// nothing loaded is stored. With Options.LoadLimit each call of load takes
// one token, and fails with ErrLoadThrottled (with the hits) when none comes
// within the caller's deadline. Nodes that cannot be read count their keys
// as missing, to be loaded (LoadStats.CacheErrors).
//
// With Options.Lease the misses are loaded under leases, as GetOrLoad's
// are: one batch load of the misses whose lease this call takes, then a wait
// for the values of the others, which other processes are loading (and one
// more batch for any whose lease comes free in the meantime); with
// Options.MetaLeases each owner's leases are taken by its read, one round
// trip. With Options.StaleWhileRevalidate or EarlyRefresh, the hits in
// their refresh window whose refresh this call wins are answered at once
// and reloaded together by one more call of load, with those keys, on a
// goroutine of the client's, once this call's own call of load has
// returned (never two at once), possibly after this call returns: such a
// load must not use what belongs to the caller's request (its transaction,
// its buffers). Unlike GetOrLoad,
// a batch does not share its loads with other calls in the process, except
// through leases. A panic in load is returned as ErrLoadPanic.
func (c *Client) GetMultiOrLoad(ctx context.Context, keys []string, ttl time.Duration, load func(ctx context.Context, missing []string) (map[string][]byte, error)) (map[string][]byte, error) {
	if err := checkTTL(ttl); err != nil {
		return nil, err
	}
	if load == nil {
		return nil, fmt.Errorf("%w: GetMultiOrLoad without a loader", ErrBadOptions)
	}
	var found map[string][]byte
	var err error
	byLease := false // the first read is the leases' (loadLeased)
	switch {
	case c.refreshWindow() > 0:
		var refresh func()
		found, refresh, err = c.getMultiFresh(ctx, keys, ttl, load)
		if refresh != nil {
			defer refresh() // once this call's own load, if any, has returned
		}
	case c.opts.Lease > 0 && c.opts.MetaLeases:
		// As GetOrLoad: the reads that take the misses' leases are the
		// first, one round trip per owner before the load.
		byLease = true
		found, err = c.nearGets(ctx, keys)
	default:
		found, err = c.getMulti(ctx, keys)
	}
	if found == nil {
		return nil, err
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		c.loads.cacheErrors.Add(1)
	}
	// found becomes the answer: negative entries out, loaded values in.
	hits := found
	var missing []string
	// Keys seen and not in hits (missing, or negative entries), made on the
	// first: a key may be asked for twice.
	var seen map[string]bool
	for _, k := range keys {
		v, ok := hits[k]
		switch {
		case ok && !loading.IsNegative(v):
			c.loads.hits.Add(1)
			continue
		case seen[k]:
			continue
		case ok:
			c.loads.negativeHits.Add(1)
			delete(hits, k)
		default:
			missing = append(missing, k)
		}
		if seen == nil {
			seen = make(map[string]bool)
		}
		seen[k] = true
	}
	if len(missing) == 0 {
		return hits, nil
	}
	c.loads.misses.Add(int64(len(missing)))
	st, now := c.load()
	if st == nil {
		return hits, ErrClosed
	}
	if c.opts.Lease > 0 {
		return hits, c.loadLeased(ctx, st, now, hits, missing, ttl, load, byLease)
	}
	return hits, c.loadBatch(ctx, st, now, hits, missing, ttl, load, nil)
}

// loadBatch loads keys with one call of load and stores what it returns,
// with a negative entry for each key it leaves out when
// Options.NegativeTTL is set, adding the values to hits. With l, the keys'
// leases are held with l's token: the store is conditional on them, and they
// are released when nothing is stored.
func (c *Client) loadBatch(ctx context.Context, st *state, now time.Time, hits map[string][]byte, keys []string, ttl time.Duration,
	load func(context.Context, []string) (map[string][]byte, error), l *lease.Lease) error {
	// The store and the leases' release outlive the caller's context: a
	// caller gone while its loader ran must not leave the keys leased (the
	// fleet would wait Options.Lease for them), nor its values unstored.
	// Each is bounded by the nodes' timeouts.
	sctx := context.WithoutCancel(ctx)
	release := func(keys []string) {
		if l != nil && len(keys) > 0 {
			c.releaseLeases(sctx, st, now, keys, l)
		}
	}
	if err := c.admit(ctx, st, keys[0]); err != nil {
		release(keys)
		return err
	}
	loaded, err := loading.CallBatch(ctx, keys, load)
	c.loads.loads.Add(1)
	if err != nil {
		c.loads.loadErrors.Add(1)
		release(keys)
		return err
	}
	items := make([]item, 0, len(keys))
	var unstored []string
	for _, k := range keys {
		v, ok := loaded[k]
		switch {
		case ok:
			if v == nil {
				v = []byte{}
			}
			hits[k] = v
			items = append(items, item{Key: k, Value: v, TTL: c.hardTTL(ttl)})
		case c.opts.NegativeTTL > 0:
			c.loads.notFound.Add(1)
			items = append(items, item{Key: k, Value: []byte(loading.Negative), TTL: c.opts.NegativeTTL})
		default:
			c.loads.notFound.Add(1)
			unstored = append(unstored, k)
		}
	}
	release(unstored)
	switch {
	case len(items) == 0:
	case l != nil:
		c.storeUnderLease(sctx, st, now, items, l)
	default:
		items, _ = c.storable(items)
		keys := make([]string, len(items))
		for i, it := range items {
			keys[i] = it.Key
		}
		err := c.multiWrite(sctx, "set_multi", keys, func(i int) item { return items[i] },
			func(b *batch) error { return b.Conn.SetMulti(sctx, b.Items) })
		if err != nil {
			c.loads.cacheErrors.Add(1)
		}
	}
	return nil
}

// loadLeased is GetMultiOrLoad's load with leases: it takes the leases of
// the missing keys and reads them again (takeLeases: one round trip per
// owner with Options.MetaLeases, two without), loads in one batch those
// whose lease it holds (and, in another, those whose owner could not be
// asked), then waits for the values of the keys whose lease another process
// holds, taking and loading any whose lease comes free. firstRead: no read
// came before it (MetaLeases), so the values its first round finds, counted
// as misses, are hits.
func (c *Client) loadLeased(ctx context.Context, st *state, now time.Time, hits map[string][]byte, missing []string, ttl time.Duration,
	load func(context.Context, []string) (map[string][]byte, error), firstRead bool) error {
	l := &lease.Lease{Token: rand.Text()}
	if c.opts.MetaLeases {
		l.Meta = make(map[string]node.LeaseAnswer, len(missing))
	}
	retry := lease.Retry{Every: c.opts.LeaseRetry}
	defer retry.Stop()
	for waited := false; ; waited = true {
		found, got, failed, err := c.takeLeases(ctx, st, now, missing, l)
		if found == nil {
			return err // closed
		}
		if err != nil {
			c.loads.cacheErrors.Add(1)
		}
		var mine, unleased, waiting, landed []string
		for i, k := range missing {
			v, ok := found[k]
			switch {
			case ok:
				negative := loading.IsNegative(v)
				if !negative {
					hits[k] = v
				}
				if firstRead && !waited {
					c.loads.misses.Add(-1)
					if negative {
						c.loads.negativeHits.Add(1)
					} else {
						c.loads.hits.Add(1)
					}
				}
				if got[i] {
					landed = append(landed, k)
				}
			case got[i]:
				mine = append(mine, k)
			case failed[i]:
				unleased = append(unleased, k)
			default:
				waiting = append(waiting, k)
			}
		}
		if len(landed) > 0 {
			c.releaseLeases(ctx, st, now, landed, l)
		}
		if !waited {
			c.loads.leaseWaits.Add(int64(len(waiting)))
		}
		// Load what this process holds before waiting for the others, so
		// that two processes holding each other's keys both go on.
		if len(mine) > 0 {
			if err := c.loadBatch(ctx, st, now, hits, mine, ttl, load, l); err != nil {
				return err
			}
		}
		if len(unleased) > 0 {
			if err := c.loadBatch(ctx, st, now, hits, unleased, ttl, load, nil); err != nil {
				return err
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		if err := retry.Wait(ctx); err != nil {
			return err
		}
		if st, now = c.load(); st == nil {
			return ErrClosed
		}
		missing = waiting
	}
}
