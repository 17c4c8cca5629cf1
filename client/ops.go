package client

import (
	"context"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/loading"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// route is where one key's operation goes: the owner in the current
// placement and, during a migration, the old owner (r.Dual).
type route struct {
	migration.Route
	st  *state
	now time.Time
}

// begin validates ctx and key and routes the key.
func (c *Client) begin(ctx context.Context, key string) (route, error) {
	if ctx == nil {
		return route{}, ErrNilContext
	}
	if err := c.checkKey(key); err != nil {
		return route{}, err
	}
	st, now := c.load()
	if st == nil {
		return route{}, ErrClosed
	}
	if st.mig == nil {
		return route{Route: migration.Route{New: st.placement.Locate(key)}, st: st}, nil
	}
	return route{Route: st.mig.Route(key, now), st: st, now: now}, nil
}

// beginWrite is begin for a write: it records key in the write log
// (internal/follow) before it routes it, so that a repair that reads the log
// once a late topology's state is in place sees every write routed
// before; and while that state is held (a repair under way) it waits for
// the hold's end, within ctx, since a write routed as before the start
// then would leave a tombstone that a copy made after the handover
// replaces (copy.go).
func (c *Client) beginWrite(ctx context.Context, key string) (route, error) {
	if ctx == nil {
		return route{}, ErrNilContext
	}
	if err := c.checkKey(key); err != nil {
		return route{}, err
	}
	c.follower.Wrote(key)
	for {
		r, err := c.begin(ctx, key)
		if err != nil || !r.st.hold {
			return r, err
		}
		if err := waitRelease(ctx, r.st); err != nil {
			return route{}, err
		}
	}
}

// waitRelease waits for a held state's hold to end, within ctx.
func waitRelease(ctx context.Context, st *state) error {
	select {
	case <-st.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// beginUpdate is beginWrite for an operation that needs the key's present
// value where it runs (migration.RouteUpdate). For a moved key of a
// migration announced before its start it waits, between start+skew and
// the handover, for the handover (copy.go), within ctx.
func (c *Client) beginUpdate(ctx context.Context, key string) (route, error) {
	for {
		r, err := c.beginWrite(ctx, key)
		if err != nil || r.st.mig == nil {
			return r, err
		}
		r.Route = r.st.mig.RouteUpdate(key, r.now)
		if !r.Dual || !r.st.announced || r.now.Before(r.st.mig.Start().Add(r.st.mig.Skew())) {
			return r, nil
		}
		wait := c.handover(r.st).Sub(r.now)
		if wait <= 0 {
			return r, nil
		}
		if err := sleep(ctx, wait); err != nil {
			return route{}, err
		}
	}
}

// sleep waits for d, or returns ctx's error if ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// beginTTL is begin for writes that take a TTL, which must not be negative.
func (c *Client) beginTTL(ctx context.Context, key string, ttl time.Duration) (route, error) {
	if err := checkTTL(ttl); err != nil {
		return route{}, err
	}
	return c.begin(ctx, key)
}

// counters returns the running migration's counters, nil when none runs.
func (r *route) counters() *migration.Counters {
	if r.st.mig == nil {
		return nil
	}
	return r.st.mig.Counters
}

// Get returns the value of key, or ErrCacheMiss. During a migration a miss
// on the new owner falls back to the old owner; a value found there is
// returned and copied to the new owner, and a failure there is the call's
// *NodeError (a miss under FailOpen), as the new owner's would be.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	r, err := c.begin(ctx, key)
	if err != nil {
		return nil, err
	}
	v, err := c.get(ctx, r, key)
	if err == nil && loading.IsNegative(v) {
		return nil, ErrCacheMiss // GetOrLoad's "not found" (see ErrNotFound)
	}
	return v, err
}

func (c *Client) get(ctx context.Context, r route, key string) ([]byte, error) {
	v, err := c.getNew(ctx, &r, key) // its near copy, if one is held (nearcache.go)
	if cs := r.counters(); cs != nil {
		switch {
		case err == nil:
			cs.NewHits.Add(1)
		case err == ErrCacheMiss && r.Fallback && !bugGetNoFallback: // a seeded bug (seeded.go)
			it, err := c.fallback(ctx, r, key)
			return it.Value, err
		}
	}
	if err != nil {
		return nil, c.open(r.st, fail("get", r.New, key, err), true)
	}
	return v, nil
}

// fallback reads key from its old owner after a miss on the new one, and
// backfills the new owner with what it finds (copy.go): the item, flags
// included, or ErrCacheMiss. A failure of the old owner is the read's
// error (a *NodeError naming it), which FailOpen turns into a miss as it
// does a new owner's: the key may be there, and a miss would tell the
// caller the cache had lost it.
func (c *Client) fallback(ctx context.Context, r route, key string) (it item, err error) {
	found := false
	err = c.fromOld(ctx, r.st, r.now, []string{key}, []migration.Route{r.Route}, copyRead, func(got *item) {
		it, found = *got, true
	})
	switch {
	case found:
		return it, nil
	case err != nil:
		return item{}, c.open(r.st, err, true)
	}
	return item{}, ErrCacheMiss
}

// bringOver copies key from its old owner to its new one, if only the old
// owner has it, before an operation that depends on the value (Incr,
// Touch): synchronously whatever Options.AsyncBackfill says, and a failure
// to read the old owner or to write the copy is returned, since the
// operation would otherwise start from nothing.
func (c *Client) bringOver(ctx context.Context, r route, key string) error {
	return c.fromOld(ctx, r.st, r.now, []string{key}, []migration.Route{r.Route}, copyStrict, nil)
}

// fail wraps err from a single-key operation on node n; it allocates only
// for a real failure.
func fail(op string, n ring.Node, key string, err error) error {
	if !failed(err) {
		return err
	}
	return nodeErr(op, n, []string{key}, err)
}

// both runs op on the new owner and, when the route is dual, oldOp on the
// old owner at the same time. It returns the two errors.
func both(r route, op, oldOp func(node.Node) error) (newErr, oldErr error) {
	var wg sync.WaitGroup
	if r.Dual {
		wg.Add(1)
		go func() {
			defer wg.Done()
			oldErr = oldOp(r.st.conn(r.Old))
		}()
	}
	newErr = op(r.st.conn(r.New))
	wg.Wait()
	return newErr, oldErr
}

// onOld is what a write does on the route's other owner: op, or before
// the migration's start a tombstone, since that owner is then the new
// placement's, which must hold no value yet (package migration).
func (c *Client) onOld(ctx context.Context, r route, key string, op func(node.Node) error) func(node.Node) error {
	if !r.Before {
		return op
	}
	return func(n node.Node) error {
		_, err := c.bury(ctx, n, []string{key}, tombTTL(r.st, r.now), node.TombWritten)
		return err
	}
}

// write runs a write on the new owner and, during a migration, on the old
// owner at the same time. It fails if either fails (the old owner's
// failure counted in DualWriteErrors too): a write the old owner missed
// would be undone for every reader falling back to it once the new owner
// lost the key (copy.go).
func (c *Client) write(ctx context.Context, opName string, r route, key string, op func(node.Node) error) error {
	newErr, oldErr := both(r, op, c.onOld(ctx, r, key, op))
	if err := fail(opName, r.New, key, newErr); err != nil || !r.Dual {
		return err
	}
	return c.copied(opName, r, key, oldErr)
}

// copyToOld runs op on the old owner alone (onOld), after the new owner's
// write, and returns its failure as write does.
func (c *Client) copyToOld(ctx context.Context, opName string, r route, key string, op func(node.Node) error) error {
	return c.copied(opName, r, key, c.onOld(ctx, r, key, op)(r.st.conn(r.Old)))
}

// copied counts a write's copy to the old owner and returns its failure,
// which FailOpen forgives for a node held down, as it does the new
// owner's.
func (c *Client) copied(opName string, r route, key string, err error) error {
	if err == ErrCacheMiss {
		err = nil // a Touch of a key the old owner lacks: nothing there to undo it
	}
	countCopy(r, err)
	if bugHalfAck { // a seeded bug (seeded.go)
		err = nil
	}
	return c.open(r.st, fail(opName, r.Old, key, err), false)
}

// countCopy counts a write copied to the old owner, and its failure.
func countCopy(r route, err error) {
	cs := r.counters()
	cs.DualWrites.Add(1)
	if failed(err) {
		cs.DualWriteErrors.Add(1)
	}
}

// Set stores value under key for ttl (0: no expiry). A nil value stores an
// empty one.
func (c *Client) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := c.checkValue(key, value); err != nil {
		return err
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	r, err := c.beginWrite(ctx, key)
	if err != nil {
		return err
	}
	if !r.Dual { // no closure, no goroutine: the common case costs nothing extra
		return c.open(r.st, fail("set", r.New, key, r.st.conn(r.New).Set(ctx, key, value, ttl)), false)
	}
	return c.open(r.st, c.write(ctx, "set", r, key, func(n node.Node) error { return n.Set(ctx, key, value, ttl) }), false)
}

// Add stores value under key only if the key is absent; otherwise it returns
// ErrNotStored. During a migration a key still on its old owner counts as
// present.
func (c *Client) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := c.checkValue(key, value); err != nil {
		return err
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	r, err := c.beginWrite(ctx, key)
	if err != nil {
		return err
	}
	return c.open(r.st, c.add(ctx, r, key, value, ttl), false)
}

func (c *Client) add(ctx context.Context, r route, key string, value []byte, ttl time.Duration) error {
	if !r.Dual {
		return fail("add", r.New, key, r.st.conn(r.New).Add(ctx, key, value, ttl))
	}
	if _, err := c.get(ctx, r, key); err != ErrCacheMiss {
		if err == nil {
			err = ErrNotStored // present, if only on the old owner
		}
		return err
	}
	if err := r.st.conn(r.New).Add(ctx, key, value, ttl); err != nil {
		return fail("add", r.New, key, err)
	}
	// Stored: copy to the old owner, for processes still reading there.
	return c.copyToOld(ctx, "add", r, key, func(n node.Node) error { return n.Set(ctx, key, value, ttl) })
}

// Delete removes key. It returns nil whether or not the key existed. During
// a migration it deletes from both owners, the old one first, and a failure
// on either is an error: a stale value must never come back.
func (c *Client) Delete(ctx context.Context, key string) error {
	_, err := c.DeleteFound(ctx, key)
	return err
}

// Incr adds delta to the integer stored under key and returns the new value.
// A missing key is created with the value delta and no expiry, on both
// backends. On Memcached counters are unsigned: a decrement stops at 0 and a
// missing key decremented is created at 0. A value that is not an integer is
// an error from the server.
//
// During a migration the counter is first brought to the new owner if only
// the old owner has it, synchronously even with AsyncBackfill and keeping
// its expiry (none stays none), and the old owner's copy is deleted rather
// than incremented, so that it cannot drift. If the old owner cannot be
// read, or the copy not written, Incr returns that error and increments
// nothing: it would otherwise restart the counter from delta.
func (c *Client) Incr(ctx context.Context, key string, delta int64) (int64, error) {
	r, err := c.beginUpdate(ctx, key)
	if err != nil {
		return 0, err
	}
	if r.Fallback {
		if err := c.bringOver(ctx, r, key); err != nil {
			return 0, err
		}
	}
	v, err := r.st.conn(r.New).Incr(ctx, key, delta)
	if err != nil {
		return 0, fail("incr", r.New, key, err)
	}
	if r.Dual {
		if err := c.copyToOld(ctx, "incr", r, key, func(n node.Node) error { return n.Delete(ctx, key) }); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// Touch sets a new TTL on key (0: no expiry), or returns ErrCacheMiss.
// During a migration a key only the old owner has is first brought to the
// new owner, as for Incr, then touched on both.
func (c *Client) Touch(ctx context.Context, key string, ttl time.Duration) error {
	if err := checkTTL(ttl); err != nil {
		return err
	}
	r, err := c.beginUpdate(ctx, key)
	if err != nil {
		return err
	}
	if r.Fallback {
		if err := c.bringOver(ctx, r, key); err != nil {
			return err
		}
	}
	return c.open(r.st, c.write(ctx, "touch", r, key, func(n node.Node) error { return n.Touch(ctx, key, ttl) }), true)
}
