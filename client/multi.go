package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/loading"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// item is a key with its value and metadata, going to or coming from a
// node.
type item = node.Item

// batch is the part of a multi-key operation that goes to one node, and
// batches a set of them (internal/node/fanout).
type (
	batch   = fanout.Batch
	batches = fanout.Batches
)

// newBatches returns no batches yet, over the nodes of st.
func newBatches(st *state) *batches { return fanout.New(st) }

// readBatches groups keys for a read round, key i going to node owner(i).
func readBatches(st *state, keys []string, owner func(i int) ring.Node) *batches {
	return fanout.Read(st, keys, owner)
}

// Conn is the client of node n in st (state.conn), for fanout.
func (st *state) Conn(n ring.Node) node.Node { return st.conn(n) }

// GetMulti returns the values of the keys that are present; a key missing
// from the map is a miss. Keys are sent one round trip per node, every
// node's request written before any answer is read (see the package doc on
// multi-gets). When a node fails, the hits of the others are returned with
// an error that joins one *NodeError per failed node. During a migration
// the new owners' misses are looked up on their old owners in a second
// round, and backfilled in a third; an old owner that fails there is a
// failed node too. The values of one node's answer may
// share a buffer: a value kept keeps it alive, so copy the few kept for
// long.
func (c *Client) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	return c.gets(ctx, keys, false)
}

// getMulti is GetMulti with negative entries among the hits.
func (c *Client) getMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	return c.gets(ctx, keys, true)
}

// gets is GetMulti, with or without the negative entries of GetOrLoad's
// "not found" (see ErrNotFound) among the hits.
func (c *Client) gets(ctx context.Context, keys []string, negatives bool) (map[string][]byte, error) {
	st, now, err := c.beginMulti(ctx, keys)
	if err != nil {
		return nil, err
	}
	hits := make(map[string][]byte, len(keys))
	put := func(k string, v []byte) {
		if !negatives && loading.IsNegative(v) {
			delete(hits, k) // a later report is current
			return
		}
		hits[k] = v
	}
	keys = c.nearMulti(st, now, keys, put) // the keys held near (nearcache.go)
	return hits, c.collect(ctx, st, now, keys, func(it *item, _ bool) { put(it.Key, it.Value) })
}

// nearGets is getMulti for the keys their near copies hold (negative
// entries among the hits), nothing sent to a node: for a caller whose
// next read of the others takes their leases.
func (c *Client) nearGets(ctx context.Context, keys []string) (map[string][]byte, error) {
	st, now, err := c.beginMulti(ctx, keys)
	if err != nil {
		return nil, err
	}
	hits := make(map[string][]byte)
	c.nearMulti(st, now, keys, func(k string, v []byte) { hits[k] = v })
	return hits, nil
}

// beginMulti validates ctx and keys and loads the state to route them
// with.
func (c *Client) beginMulti(ctx context.Context, keys []string) (*state, time.Time, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, time.Time{}, err
	}
	for _, k := range keys {
		if err := c.checkKey(k); err != nil {
			return nil, time.Time{}, err
		}
	}
	st, now := c.load()
	if st == nil {
		return nil, time.Time{}, ErrClosed
	}
	return st, now, nil
}

// collect is GetMulti's mechanism: it calls hit for every key found, on
// this goroutine, with copied set for a value found on an old owner; a key
// may be reported twice, the later report current.
func (c *Client) collect(ctx context.Context, st *state, now time.Time, keys []string, hit func(it *item, copied bool)) error {
	if len(keys) == 0 {
		return nil
	}
	var routes []migration.Route
	var first *batches
	if st.mig == nil {
		first = readBatches(st, keys, func(i int) ring.Node { return st.placement.Locate(keys[i]) })
	} else {
		routes = make([]migration.Route, len(keys))
		first = readBatches(st, keys, func(i int) ring.Node {
			routes[i] = st.mig.Route(keys[i], now)
			return routes[i].New
		})
	}
	first.Gets(ctx, false)
	var errs []error
	var scratch item
	var missed []int // keys to look up on their old owners
	for _, b := range first.List {
		if b.Err != nil {
			if !c.openBatch(st, b, len(b.Keys), true) {
				errs = append(errs, nodeErr("get_multi", b.Node, b.Keys, b.Err))
			}
			continue
		}
		for i := range b.Answered() {
			switch it, k := b.Answer(i, &scratch), b.Idx[i]; {
			case it.Found:
				hit(it, false)
				if routes != nil {
					st.mig.Counters.NewHits.Add(1)
				}
			case routes != nil && routes[k].Fallback && !bugGetMultiNoFallback: // a seeded bug (seeded.go)
				missed = append(missed, k)
			}
		}
	}
	if len(missed) > 0 {
		ks := make([]string, len(missed))
		rs := make([]migration.Route, len(missed))
		for i, k := range missed {
			ks[i], rs[i] = keys[k], routes[k]
		}
		err := c.fromOld(ctx, st, now, ks, rs, copyRead, func(it *item) { hit(it, true) })
		errs = append(errs, c.openAll(st, err)) // the old owners' failures, as the new ones'
	}
	return errors.Join(errs...)
}

// SetMulti stores every item with the same TTL, one round trip per node,
// all nodes in parallel. When a node fails, the others' items are stored
// and the error joins one *NodeError per failed node, naming its keys.
func (c *Client) SetMulti(ctx context.Context, items map[string][]byte, ttl time.Duration) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	keys := make([]string, 0, len(items))
	for k, v := range items {
		if err := c.checkKey(k); err != nil {
			return err
		}
		if err := c.checkValue(k, v); err != nil {
			return err
		}
		keys = append(keys, k)
	}
	return c.multiWrite(ctx, "set_multi", keys, func(i int) item {
		return item{Key: keys[i], Value: items[keys[i]], TTL: ttl}
	}, func(b *batch) error { return b.Conn.SetMulti(ctx, b.Items) })
}

// DeleteMulti deletes the keys, one round trip per node, all nodes in
// parallel. During a migration it deletes from old owners too, and a failure
// there is an error like any other.
func (c *Client) DeleteMulti(ctx context.Context, keys []string) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	for _, k := range keys {
		if err := c.checkKey(k); err != nil {
			return err
		}
	}
	if c.leasing() && len(keys) > 0 { // first, as Delete does
		if err := c.clearLeases(ctx, keys); err != nil {
			return err
		}
	}
	return c.multiWrite(ctx, "delete_multi", keys, func(i int) item {
		return item{Key: keys[i]}
	}, func(b *batch) error { return b.Conn.DeleteMulti(ctx, b.Keys) })
}

// multiWrite sends item(i) for every key to its owner and, during a
// migration, to its old owner too, all nodes at once: a failure on either
// owner is an error (write, in ops.go). A migration's deletes bury the
// moved keys on their new owners (copy.go).
func (c *Client) multiWrite(ctx context.Context, op string, keys []string, mk func(i int) item, send func(*batch) error) error {
	c.follower.WroteAll(keys) // before the state is loaded: see beginWrite
	st, now := c.load()
	for st != nil && st.hold {
		if err := waitRelease(ctx, st); err != nil {
			return err
		}
		st, now = c.load()
	}
	if st == nil {
		return ErrClosed
	}
	del := op == "delete_multi"
	bs := newBatches(st)
	tombs := newBatches(st) // deletes of moved keys, on their new owners
	copies := 0
	for i, k := range keys {
		if st.mig == nil {
			bs.Add(st.placement.Locate(k), mk(i), i, false)
			continue
		}
		r := st.mig.Route(k, now)
		// The new owner buries; before the start it is r.Old, and a write
		// reaches it as a tombstone too (onOld).
		tombAt, plainAt := r.New, r.Old
		if r.Before {
			tombAt, plainAt = r.Old, r.New
		}
		switch {
		case !r.Dual:
			bs.Add(r.New, mk(i), i, false)
			continue
		case del:
			tombs.Add(tombAt, mk(i), i, false)
			if !bugNoDualDelete { // a seeded bug (seeded.go)
				bs.Add(plainAt, mk(i), i, true)
			}
		case r.Before:
			bs.Add(r.New, mk(i), i, false)
			tombs.Add(r.Old, mk(i), i, false)
		default:
			bs.Add(r.New, mk(i), i, false)
			bs.Add(r.Old, mk(i), i, true)
		}
		copies++
	}
	if copies > 0 {
		if del {
			st.mig.Counters.DualDeletes.Add(int64(copies))
		} else {
			st.mig.Counters.DualWrites.Add(int64(copies))
		}
	}
	var wg sync.WaitGroup
	if len(tombs.List) > 0 {
		ttl := tombTTL(st, now)
		// Before the start every tombstone is a write's, a Delete's
		// included; in the window a Delete's.
		kind := tombKind(!del || now.Before(st.mig.Start()))
		wg.Go(func() {
			tombs.Run(func(b *batch) error {
				_, err := c.bury(ctx, b.Conn, b.Keys, ttl, kind)
				return err
			})
		})
	}
	bs.Run(send)
	wg.Wait()
	var errs []error
	for _, b := range append(bs.List, tombs.List...) {
		if b.Err == nil {
			continue
		}
		halves := 0
		for i := range b.Items {
			if b.Old != nil && b.Old[i] {
				st.mig.Counters.DualWriteErrors.Add(1)
				halves++
			}
		}
		if bugHalfAck && halves == len(b.Items) { // a seeded bug (seeded.go)
			continue
		}
		if del && !st.goneFailed(b.Node.Addr, b.Err) || !del && !c.openBatch(st, b, len(b.Items), false) {
			errs = append(errs, nodeErr(op, b.Node, b.Keys, b.Err))
		}
	}
	return errors.Join(errs...)
}
