package client

import (
	"context"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// Copies from old owners to new ones, during a migration. Every copy the
// client makes goes through fromOld (a read's fallback and backfill, the
// copy an Incr or a Touch depends on, RedisDo's copy of any type), and
// through backfill and confirm, which the sweep shares.
//
// A copy from an old owner to a new one must never bring back a key
// deleted meanwhile. A Delete that lands between the read of the old owner
// and the write of the copy would otherwise be undone: the copy recreates
// on the new owner the value the Delete had just removed there. Two rules
// close it, for every copy the client makes (read-path backfills and the
// sweep alike):
//
//   - Delete removes the old owner's copy first, then the new owner's.
//   - After a copy is stored, confirm asks its source whether it still
//     holds the key, and deletes the copy if not.
//
// If a Delete's removal from the old owner comes before confirm's read,
// confirm sees the key gone and deletes the copy; if it comes after, the
// Delete's removal from the new owner comes after the copy too, and
// removes it. Either way the key stays deleted. The price is one extra
// round trip per copy batch; copies are rare, once per moved key.

// copyHow says how fromOld copies.
type copyHow struct {
	// check asks the new owners first which keys they hold: those are not
	// copied (they are current).
	check bool
	// sync copies synchronously whatever Options.AsyncBackfill says.
	sync bool
	// strict returns a failure to read the old owner or to write the copy:
	// the caller's operation depends on the copy and would otherwise start
	// from nothing. Otherwise a failure is counted and the key reads as a
	// miss.
	strict bool
	// whole copies any type with its remaining TTL, as the sweep does
	// (node.Sweeper's Dump and Restore), rather than a value.
	whole bool
	// reread: where a newer value beat the copy to the new owner, read it
	// and report it, for a read that must return the current value.
	reread bool
}

var (
	// copyRead is a read's fallback and backfill (Get, GetMulti, GetItem).
	copyRead = copyHow{reread: true}
	// copyStrict brings a key over before an operation that depends on its
	// value (Incr, Touch, Store of an existing key, GetAndTouch).
	copyStrict = copyHow{check: true, sync: true, strict: true}
	// copyWhole brings a key of any type over for RedisDo, whose caller
	// asked the new owner already.
	copyWhole = copyHow{sync: true, whole: true}
)

// fromOld copies keys, key i routed by routes[i] (all dual), from their
// old owners to their new ones as how says, one round trip per node for
// each step. hit, when set, is told of each value found on an old owner
// and, with reread, of the newer value found on a new one instead; a key
// may be reported twice, the later report current. Values keep their
// remaining TTL where the server tells it (none stays none), cut to the
// migration's window (migration.BackfillTTL).
func (c *Client) fromOld(ctx context.Context, st *state, now time.Time, keys []string, routes []migration.Route, how copyHow, hit func(*item)) error {
	cs := st.mig.Counters
	want := make([]bool, len(keys))
	for i := range want {
		want[i] = true
	}
	if how.check {
		news := newBatches(st)
		for i, k := range keys {
			news.addKey(routes[i].New, k, i)
		}
		news.run(func(b *batch) error {
			found, err := holds(ctx, b.conn, b.keys)
			for j, f := range found {
				want[b.idx[j]] = !f
			}
			return err
		})
		for _, b := range news.list {
			if b.err != nil {
				return nodeErr("get", b.node, b.keys, b.err)
			}
		}
		for _, w := range want {
			if !w {
				cs.NewHits.Add(1)
			}
		}
	}
	olds := newBatches(st)
	for i, k := range keys {
		if want[i] {
			olds.addKey(routes[i].Old, k, i)
		}
	}
	if how.whole {
		olds.run(func(b *batch) (err error) {
			sn := sweeper(b.conn)
			if sn == nil {
				return ErrSweepUnsupported
			}
			in := make([]item, len(b.keys))
			for j, k := range b.keys {
				in[j].Key = k
			}
			b.got, err = sn.Dump(ctx, in)
			return err
		})
	} else {
		olds.gets(ctx, true)
	}
	copies := newBatches(st)
	for _, b := range olds.list {
		if b.err != nil {
			cs.FallbackErrors.Add(int64(len(b.keys)))
			if how.strict {
				return nodeErr("get", b.node, b.keys, b.err)
			}
			continue
		}
		for j := range b.got {
			it := &b.got[j]
			if !it.Found {
				cs.FallbackMisses.Add(1)
				continue
			}
			cs.FallbackHits.Add(1)
			if hit != nil {
				hit(it)
			}
			i := b.idx[j]
			var ok bool
			if it.TTL, ok = st.mig.BackfillTTL(it.Key, now, it.TTL, it.TTLKnown); ok {
				copies.add(routes[i].New, *it, i, false)
			}
		}
	}
	srcs := func(b *batch) []ring.Node {
		s := make([]ring.Node, len(b.idx))
		for j, i := range b.idx {
			s[j] = routes[i].Old
		}
		return s
	}
	if c.queue != nil && !how.sync {
		for _, b := range copies.list {
			c.enqueue(st, b.node, b.items, srcs(b))
		}
		return nil
	}
	newer := newBatches(st)
	for _, b := range copies.list {
		stored, err := c.backfill(ctx, st, b.node, b.items, srcs(b), how.whole)
		if err != nil && how.strict {
			return nodeErr("backfill", b.node, b.keys, err)
		}
		if err == nil && how.reread {
			for j, s := range stored {
				if !s {
					newer.addKey(b.node, b.keys[j], b.idx[j])
				}
			}
		}
	}
	if len(newer.list) > 0 {
		newer.gets(ctx, false)
		var scratch item
		for _, b := range newer.list {
			for j := range b.answered() {
				if it := b.answer(j, &scratch); it.Found {
					hit(it)
				}
			}
		}
	}
	return nil
}

// backfill writes copies read from old owners (srcs[i] is items[i]'s) to
// their new owner n, each only if absent (Redis SET NX or RESTORE without
// REPLACE, Memcached add), so a value written since the miss is never
// overwritten, then confirms them. It reports which copies were stored,
// and the round trip's failure, counting the copies it did not store as
// dropped.
func (c *Client) backfill(ctx context.Context, st *state, n ring.Node, items []item, srcs []ring.Node, whole bool) ([]bool, error) {
	cs := st.mig.Counters
	var stored []bool
	var err error
	if whole {
		if sn := sweeper(st.conn(n)); sn == nil {
			err = ErrSweepUnsupported
		} else {
			stored, err = sn.Restore(ctx, items)
		}
	} else {
		stored, err = st.conn(n).AddMulti(ctx, items)
	}
	if stored == nil {
		cs.BackfillsDropped.Add(int64(len(items)))
		return make([]bool, len(items)), err
	}
	var copied []item
	var from []ring.Node
	for i, ok := range stored {
		switch {
		case ok:
			cs.Backfills.Add(1)
			copied, from = append(copied, items[i]), append(from, srcs[i])
		case err != nil: // refused, or newer: the failure does not say which
			cs.BackfillsDropped.Add(1)
		default:
			cs.BackfillsSkipped.Add(1)
		}
	}
	if len(copied) > 0 { // confirmed even beside a failure: they are stored
		c.confirm(ctx, st, n, copied, from)
	}
	return stored, err
}

// confirm checks that the source of each copy just stored on dst
// (srcs[i] is copies[i]'s) still holds its key, and deletes from dst the
// copies whose source lost it: a Delete ran in between (see above). It
// asks whether the source holds the key whatever its type (Redis EXISTS),
// since a sweep copies hashes and lists too. A source that cannot be read
// counts as having lost the key, since a copy that cannot be confirmed is
// not safe to keep: the next read simply falls back again. It returns how
// many copies were revoked, counted in BackfillsRevoked.
func (c *Client) confirm(ctx context.Context, st *state, dst ring.Node, copies []item, srcs []ring.Node) int {
	bySrc := newBatches(st)
	for i, it := range copies {
		bySrc.addKey(srcs[i], it.Key, i)
	}
	bySrc.run(func(b *batch) error {
		found, err := holds(ctx, b.conn, b.keys)
		b.got = make([]item, len(found))
		for i, f := range found {
			b.got[i].Found = f
		}
		return err
	})
	var lost []string
	for _, b := range bySrc.list {
		for i, k := range b.keys {
			if b.err != nil || !b.got[i].Found {
				lost = append(lost, k)
			}
		}
	}
	if len(lost) == 0 {
		return 0
	}
	st.mig.Counters.BackfillsRevoked.Add(int64(len(lost)))
	if err := st.conn(dst).DeleteMulti(ctx, lost); err != nil {
		st.mig.Counters.BackfillsDropped.Add(int64(len(lost)))
	}
	return len(lost)
}

// holds reports which keys node n holds, whatever their type.
func holds(ctx context.Context, n node.Node, keys []string) ([]bool, error) {
	if sn := sweeper(n); sn != nil {
		return sn.Exists(ctx, keys)
	}
	items, err := n.GetMulti(ctx, keys, false)
	if err != nil {
		return nil, err
	}
	found := make([]bool, len(items))
	for i, it := range items {
		found[i] = it.Found
	}
	return found, nil
}

// pendingBackfill is a backfill waiting for the asynchronous worker.
type pendingBackfill struct {
	st    *state
	node  ring.Node
	items []item
	srcs  []ring.Node
}

// enqueue hands copies to the backfill worker, or drops and counts them when
// its queue is full: a read must not wait for a copy.
func (c *Client) enqueue(st *state, n ring.Node, items []item, srcs []ring.Node) {
	select {
	case c.queue <- pendingBackfill{st, n, items, srcs}:
		c.queueAccepts(n)
	default: // full, or closed: the worker has gone
		st.mig.Counters.BackfillsDropped.Add(int64(len(items)))
		c.queueFull(n)
	}
}

// backfillWorker writes queued copies until Close. The queue is never
// closed, so a read racing Close cannot send on a closed channel; copies
// still queued at Close are dropped with the pools they would use. Each copy
// is bounded by the network timeouts and ends when Close cancels ctx; a node
// held down fails it at once.
func (c *Client) backfillWorker(ctx context.Context) {
	defer c.worker.Done()
	for {
		select {
		case <-c.done:
			return
		case p := <-c.queue:
			ctx, cancel := context.WithTimeout(ctx, c.opts.ReadTimeout+c.opts.WriteTimeout)
			c.backfill(ctx, p.st, p.node, p.items, p.srcs, false)
			cancel()
		}
	}
}
