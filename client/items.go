package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/backfill"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
)

// Errors of the item operations.
var (
	// ErrCASConflict means a StoreCAS found the key changed since the read
	// that returned its CasID.
	ErrCASConflict = node.ErrCASConflict
	// ErrUnsupported means the backend cannot do what was asked, such as
	// item flags or compare-and-swap on Redis.
	ErrUnsupported = node.ErrUnsupported
)

// Item is a value with Memcached's item metadata, for the item operations
// (GetItem, GetItems, Store, GetAndTouch): what a gomemcache user keeps.
type Item struct {
	Key   string
	Value []byte
	// Flags are opaque to the cache and returned by reads. Memcached keeps
	// them; on Redis any flags but 0 are ErrUnsupported.
	Flags uint32
	// TTL is a write's expiry, 0 for none. Reads leave it 0: Memcached
	// cannot tell a remaining TTL.
	TTL time.Duration
	// CasID identifies the stored version: reads set it (Memcached), and
	// StoreCAS succeeds only if it still matches.
	CasID uint64
}

// StoreOp is the condition of a Store.
type StoreOp int

// Store operations, those of Memcached's storage commands.
const (
	StoreSet     StoreOp = iota // unconditional
	StoreAdd                    // only if absent, else ErrNotStored
	StoreReplace                // only if present, else ErrNotStored
	StoreAppend                 // Value after the present value, else ErrNotStored
	StorePrepend                // Value before the present value, else ErrNotStored
	// StoreCAS stores only if the key is unchanged since the read that
	// returned Item.CasID: ErrCASConflict if it changed, ErrCacheMiss if it
	// is gone.
	StoreCAS
)

// String returns the operation's Memcached command name.
func (op StoreOp) String() string { return node.StoreOp(op).String() }

// export returns it as an Item.
func export(it *item) Item {
	return Item{Key: it.Key, Value: it.Value, Flags: it.Flags, CasID: it.CAS}
}

// failItem is fail for the item operations, whose ErrCASConflict is an
// answer too.
func failItem(op string, n ring.Node, key string, err error) error {
	if err == ErrCASConflict {
		return err
	}
	return fail(op, n, key, err)
}

// GetItem returns key's item, flags and CAS id included, or ErrCacheMiss.
// During a migration a miss on the new owner falls back to the old owner
// and backfills the new one, as Get does; the item returned then carries
// the new owner's CAS id, so a StoreCAS after it succeeds.
func (c *Client) GetItem(ctx context.Context, key string) (Item, error) {
	r, err := c.begin(ctx, key)
	if err != nil {
		return Item{}, err
	}
	it, err := items(r.st.conn(r.New)).GetItem(ctx, key)
	if cs := r.counters(); cs != nil {
		switch {
		case err == nil:
			cs.NewHits.Add(1)
		case err == ErrCacheMiss && r.Fallback:
			return c.fallbackGetItem(ctx, r, key)
		}
	}
	if err != nil {
		return Item{}, fail("get", r.New, key, err)
	}
	return export(&it), nil
}

// fallbackGetItem brings key over from its old owner and reads it back from
// the new one, for its CAS id there; the old owner's item when no copy was
// made.
func (c *Client) fallbackGetItem(ctx context.Context, r route, key string) (Item, error) {
	old, err := c.fallback(ctx, r, key)
	if err != nil {
		return Item{}, err
	}
	if it, err := items(r.st.conn(r.New)).GetItem(ctx, key); err == nil {
		return export(&it), nil
	}
	return export(&old), nil
}

// GetItems is GetMulti returning items, flags and CAS ids included. During a
// migration the items found on old owners are read back from their new
// owners after the backfill, for the CAS ids there.
func (c *Client) GetItems(ctx context.Context, keys []string) (map[string]*Item, error) {
	hits := make(map[string]*Item, len(keys))
	err := c.GetItemsFunc(ctx, keys, func(it Item) { hits[it.Key] = &it })
	if errors.Is(err, ErrMalformedKey) || err == ErrClosed {
		return nil, err // nothing was asked
	}
	return hits, err
}

// GetItemsFunc is GetItems calling hit with each item found instead of
// building a map, on this goroutine: a program that builds a map of its own
// type saves one. During a migration a key may be reported twice; the later
// report is current.
func (c *Client) GetItemsFunc(ctx context.Context, keys []string, hit func(Item)) error {
	st, now, err := c.beginMulti(ctx, keys)
	if err != nil {
		return err
	}
	var copied []string
	err = c.collect(ctx, st, now, keys, func(it *item, fromOld bool) {
		hit(export(it))
		if fromOld {
			copied = append(copied, it.Key)
		}
	})
	if len(copied) > 0 {
		// Straight from the new owners, without falling back again.
		again := newBatches(st)
		for i, k := range copied {
			again.AddKey(st.placement.Locate(k), k, i)
		}
		backfill.ReadBack(ctx, again, func(it *item) { hit(export(it)) })
	}
	return err
}

// Store writes it under op's condition (see StoreOp). During a migration:
//
//   - StoreSet writes both owners, as Set does; StoreAdd counts a key still
//     on its old owner as present, as Add does.
//   - StoreReplace, StoreAppend and StorePrepend on a key only the old owner
//     holds bring it over first, so they find it as on one server. The old
//     owner then gets the replaced item; an appended or prepended key is
//     deleted there instead, as Incr does, rather than left to drift.
//   - StoreCAS on a key only the old owner holds (its CasID came from there)
//     swaps there, and the new owner gets the item swapped in.
func (c *Client) Store(ctx context.Context, op StoreOp, it Item) error {
	if op < StoreSet || op > StoreCAS {
		return fmt.Errorf("%w: store operation %v", ErrBadOptions, op)
	}
	if err := checkTTL(it.TTL); err != nil {
		return err
	}
	begin := c.beginWrite
	if op > StoreAdd { // replace, append, prepend, CAS: where the value is
		begin = c.beginUpdate
	}
	r, err := begin(ctx, it.Key)
	if err != nil {
		return err
	}
	if err := c.checkValue(it.Key, it.Value); err != nil {
		return err
	}
	in := item{Key: it.Key, Value: it.Value, Flags: it.Flags, TTL: it.TTL, CAS: it.CasID}
	name := op.String()
	store := func(op StoreOp) func(node.Node) error {
		return func(n node.Node) error { return items(n).Store(ctx, node.StoreOp(op), in) }
	}
	if !r.Dual {
		return failItem(name, r.New, in.Key, store(op)(r.st.conn(r.New)))
	}
	switch op {
	case StoreSet:
		return c.write(ctx, name, r, in.Key, store(StoreSet))
	case StoreAdd:
		if _, err := c.get(ctx, r, in.Key); err != ErrCacheMiss {
			if err == nil {
				err = ErrNotStored // present, if only on the old owner
			}
			return err
		}
		if err := store(StoreAdd)(r.st.conn(r.New)); err != nil {
			return fail(name, r.New, in.Key, err)
		}
		return c.copyToOld(ctx, name, r, in.Key, store(StoreSet))
	case StoreCAS:
		err := store(StoreCAS)(r.st.conn(r.New))
		if err == ErrCacheMiss && r.Fallback {
			// Only the old owner may have it, with the CasID the caller holds.
			if err = store(StoreCAS)(r.st.conn(r.Old)); err != nil {
				return failItem(name, r.Old, in.Key, err)
			}
			return fail(name, r.New, in.Key, store(StoreSet)(r.st.conn(r.New)))
		}
		if err != nil {
			return failItem(name, r.New, in.Key, err)
		}
		return c.copyToOld(ctx, name, r, in.Key, store(StoreSet))
	}
	// StoreReplace, StoreAppend, StorePrepend: the key must be present.
	err = store(op)(r.st.conn(r.New))
	if err == ErrNotStored && r.Fallback {
		if err := c.bringOver(ctx, r, in.Key); err != nil {
			return err
		}
		err = store(op)(r.st.conn(r.New))
	}
	if err != nil {
		return fail(name, r.New, in.Key, err)
	}
	if op == StoreReplace {
		return c.copyToOld(ctx, name, r, in.Key, store(StoreSet))
	}
	return c.copyToOld(ctx, name, r, in.Key, func(n node.Node) error { return n.Delete(ctx, in.Key) })
}

// GetAndTouch reads key's item and sets its TTL (0: no expiry) in one
// command (Memcached gat, Redis GETEX), or returns ErrCacheMiss. The item
// has no CAS id. During a migration a key only the old owner holds is
// brought over first, and the old owner's copy is touched too.
func (c *Client) GetAndTouch(ctx context.Context, key string, ttl time.Duration) (Item, error) {
	if err := checkTTL(ttl); err != nil {
		return Item{}, err
	}
	r, err := c.beginUpdate(ctx, key)
	if err != nil {
		return Item{}, err
	}
	it, err := items(r.st.conn(r.New)).GetAndTouch(ctx, key, ttl)
	if err == ErrCacheMiss && r.Fallback {
		if err := c.bringOver(ctx, r, key); err != nil {
			return Item{}, err
		}
		it, err = items(r.st.conn(r.New)).GetAndTouch(ctx, key, ttl)
	}
	if err != nil {
		return Item{}, fail("gat", r.New, key, err)
	}
	if r.Dual {
		if err := c.copyToOld(ctx, "gat", r, key, func(n node.Node) error { return n.Touch(ctx, key, ttl) }); err != nil {
			return Item{}, err
		}
	}
	return export(&it), nil
}

// Increment adds delta to the unsigned counter stored under key and returns
// the new value, wrapping at 2^64; Decrement subtracts, stopping at 0. Both
// have Memcached's semantics: a missing key is ErrCacheMiss, not created
// (Incr creates it). Redis answers ErrUnsupported. During a migration they
// bring the counter over and delete the old owner's copy, as Incr does.
func (c *Client) Increment(ctx context.Context, key string, delta uint64) (uint64, error) {
	return c.incrDecr(ctx, key, delta, false)
}

// Decrement is Increment subtracting delta; the counter stops at 0.
func (c *Client) Decrement(ctx context.Context, key string, delta uint64) (uint64, error) {
	return c.incrDecr(ctx, key, delta, true)
}

func (c *Client) incrDecr(ctx context.Context, key string, delta uint64, decr bool) (uint64, error) {
	r, err := c.beginUpdate(ctx, key)
	if err != nil {
		return 0, err
	}
	if r.Fallback {
		if err := c.bringOver(ctx, r, key); err != nil { // as Incr does
			return 0, err
		}
	}
	op := "incr"
	if decr {
		op = "decr"
	}
	v, err := items(r.st.conn(r.New)).IncrDecr(ctx, key, delta, decr)
	if err != nil {
		return 0, fail(op, r.New, key, err)
	}
	if r.Dual {
		if err := c.copyToOld(ctx, op, r, key, func(n node.Node) error { return n.Delete(ctx, key) }); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// DeleteFound is Delete that also reports whether any owner held key.
func (c *Client) DeleteFound(ctx context.Context, key string) (found bool, err error) {
	r, err := c.beginWrite(ctx, key)
	if err != nil {
		return false, err
	}
	if c.leasing() { // first: a load under the lease must not store (lease.go)
		if err := c.clearLease(ctx, r, key); err != nil {
			return false, err
		}
	}
	if !r.Dual {
		found, err = items(r.st.conn(r.New)).DeleteFound(ctx, key)
		return found, fail("delete", r.New, key, err)
	}
	// Both at once: the new owner buries the key, so that no copy from the
	// old one brings it back (copy.go); before the start it is r.Old.
	tombAt, plainAt := r.New, r.Old
	if r.Before {
		tombAt, plainAt = r.Old, r.New
	}
	var plainFound bool
	var plainErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		if !bugNoDualDelete { // a seeded bug (seeded.go)
			plainFound, plainErr = items(r.st.conn(plainAt)).DeleteFound(ctx, key)
		}
	})
	tombFound, tombErr := c.bury(ctx, r.st.conn(tombAt), []string{key}, tombTTL(r.st, r.now), tombKind(r.Before))
	wg.Wait()
	r.counters().DualDeletes.Add(1)
	if err := fail("delete", tombAt, key, tombErr); err != nil {
		return false, err
	}
	if plainErr != nil && (r.st.goneFailed(plainAt.Addr, plainErr) || bugHalfAck) { // bugHalfAck: a seeded bug (seeded.go)
		plainErr = nil // a node gone: nothing there to come back (failopen.go)
	}
	return plainFound || len(tombFound) == 1 && tombFound[0], fail("delete", plainAt, key, plainErr)
}

// Flush deletes every key on every node, those of a migration's old
// placement included (Memcached flush_all, Redis FLUSHDB).
func (c *Client) Flush(ctx context.Context) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	return c.eachNode("flush", func(n node.Node) error { return items(n).Flush(ctx) })
}

// Ping checks that every node answers, those of a migration's old placement
// included. The error joins one *NodeError per node that did not.
func (c *Client) Ping(ctx context.Context) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	return c.eachNode("ping", func(n node.Node) error { return n.Ping(ctx) })
}

// eachNode runs fn on every node of the current state (state.listed), in
// parallel.
func (c *Client) eachNode(op string, fn func(node.Node) error) error {
	st, _ := c.load()
	if st == nil {
		return ErrClosed
	}
	nodes := st.listed()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			if err := fn(st.conn(n.Node)); err != nil {
				errs[i] = &NodeError{Op: op, Node: n.Node, Err: err}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
