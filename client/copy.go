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
// copy an Incr or a Touch depends on, RedisDo's copy of any type) and
// backfill, or through the sweep's restore.
//
// A copy must never be seen by another reader once a Delete or a newer
// write of its key has been acknowledged. Three rules make it so, for
// every copy (read-path backfills, asynchronous ones and the sweep's):
//
//   - A copy stores only where the key is absent (Redis SET NX or RESTORE
//     without REPLACE, Memcached add): a write that reached the new owner
//     first wins.
//   - A Delete of a moved key buries it on its new owner (node.Bury): a
//     tombstone, until the window's end and tombMargin, that no copy
//     stores over, atomically on the server (a Redis script, Memcached's
//     add refusing the key). A reader who read the value from the old
//     owner before the Delete, and writes its copy after, is refused.
//   - A write of a moved key is acknowledged only once both owners have
//     it (write), so that a read falling back to the old owner after the
//     new one lost the key (a restart) finds the newer value, not the one
//     it replaced. With FailOpen, a write a node held down drops is
//     acknowledged all the same: the boundary doc.go states.
//
// So a copy is either refused or made before the Delete or the write
// that supersedes it reaches the new owner, which then removes or
// replaces it; nothing is revoked after the fact.

// tombMargin is how long a tombstone outlasts its migration's window: a
// copy queued or in flight when the window ends, and the clocks of other
// processes in the same migration, a little behind.
const tombMargin = time.Minute

// bury buries keys on their new owner n, for ttl, with tombstones of
// kind: node.TombDeleted for a Delete's, node.TombWritten for a write
// routed to the old owner alone (before the start), which a copy made
// after the handover replaces.
func (c *Client) bury(ctx context.Context, n node.Node, keys []string, ttl time.Duration, kind node.TombKind) ([]bool, error) {
	if bugNoTomb { // a seeded bug (seeded.go)
		found := make([]bool, len(keys))
		return found, n.DeleteMulti(ctx, keys)
	}
	return n.Bury(ctx, keys, ttl, kind)
}

// tombKind is the kind of a tombstone: node.TombWritten for one left by an
// operation routed to the old owner alone (before the start), a Delete's
// included, node.TombDeleted for a Delete's in the window. Before the
// start the old owner holds the truth, whatever it is, and every copy that
// may replace such a tombstone reads it after the handover: a Delete then
// has left nothing there to copy. A Delete's tombstone of the window is
// never replaced: a copy that read the old owner before that Delete could
// land after it.
func tombKind(before bool) node.TombKind {
	if before {
		return node.TombWritten
	}
	return node.TombDeleted
}

// tombTTL is the life of a tombstone left at now: to the window's end, the
// skew after it (while others may still copy) and tombMargin.
func tombTTL(st *state, now time.Time) time.Duration {
	return max(st.mig.End().Add(st.mig.Skew()).Sub(now), 0) + tombMargin
}

// The handover. Before a migration's start, and until start+skew for an
// update that depends on the key's value (migration.RouteUpdate), a write
// goes to the old owner alone and leaves the new owner a tombstone of kind
// node.TombWritten, which refuses the copies of readers who may have read
// the old owner before that write. Every such write began before
// start+skew by its process's clock, so before start+2×skew by any other,
// and was over within the network timeouts. A copy whose read of the old
// owner began later than that, at the handover, read every such write: it
// may replace a TombWritten tombstone (node.Item.OverWritten), and that is
// how a key written before the start, a counter included, reaches its new
// owner. Between start+skew and the handover an update that depends on a
// moved key's value waits (beginUpdate): one that went to the old owner
// then could follow a copy made at the handover, and be lost.

// replacesWritten reports whether a copy whose read began at now may replace
// a TombWritten tombstone: the migration is announced (its start is the
// fleet's) and now is past the handover.
func (c *Client) replacesWritten(st *state, now time.Time) bool {
	return st.announced && !now.Before(c.handover(st))
}

// handover returns when copies may replace TombWritten tombstones: start +
// 3×skew + writeBound.
func (c *Client) handover(st *state) time.Time {
	return st.mig.Start().Add(3*st.mig.Skew() + c.writeBound())
}

// writeBound is how long a write routed at one instant may take to land:
// the wait for a pooled connection (ReadTimeout and a second, the pool's
// default) and two round trips (an update that looks first, Memcached's
// replace over a possible tombstone), each a dial, a write and a read. A
// write delivered later than that (a server paused longer, holding the
// request in its socket) is not covered by the handover's argument.
func (c *Client) writeBound() time.Duration {
	o := &c.opts
	return 2*(o.DialTimeout+o.WriteTimeout+o.ReadTimeout) + o.ReadTimeout + time.Second
}

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
			news.AddKey(routes[i].New, k, i)
		}
		news.Run(func(b *batch) error {
			found, err := holds(ctx, b.Conn, b.Keys)
			for j, f := range found {
				want[b.Idx[j]] = !f
			}
			return err
		})
		for _, b := range news.List {
			if b.Err != nil {
				return nodeErr("get", b.Node, b.Keys, b.Err)
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
			olds.AddKey(routes[i].Old, k, i)
		}
	}
	if how.whole {
		olds.Run(func(b *batch) (err error) {
			sn := sweeper(b.Conn)
			if sn == nil {
				return ErrSweepUnsupported
			}
			in := make([]item, len(b.Keys))
			for j, k := range b.Keys {
				in[j].Key = k
			}
			b.Got, err = sn.Dump(ctx, in)
			return err
		})
	} else {
		olds.Gets(ctx, true)
	}
	copies := newBatches(st)
	for _, b := range olds.List {
		if b.Err != nil {
			cs.FallbackErrors.Add(int64(len(b.Keys)))
			if how.strict {
				return nodeErr("get", b.Node, b.Keys, b.Err)
			}
			continue
		}
		for j := range b.Got {
			it := &b.Got[j]
			if !it.Found {
				cs.FallbackMisses.Add(1)
				continue
			}
			cs.FallbackHits.Add(1)
			if hit != nil {
				hit(it)
			}
			i := b.Idx[j]
			var ok bool
			if it.TTL, ok = st.mig.BackfillTTL(it.Key, now, it.TTL, it.TTLKnown); ok && routes[i].Backfill {
				it.OverWritten = c.replacesWritten(st, now) // read after every write the old owner alone took
				copies.Add(routes[i].New, *it, i, false)
			}
		}
	}
	if c.queue != nil && !how.sync {
		for _, b := range copies.List {
			c.enqueue(st, b.Node, b.Items)
		}
		return nil
	}
	newer := newBatches(st)
	for _, b := range copies.List {
		stored, err := c.backfill(ctx, st, b.Node, b.Items, how.whole)
		if err != nil && how.strict {
			return nodeErr("backfill", b.Node, b.Keys, err)
		}
		if err == nil && how.reread {
			for j, s := range stored {
				if !s {
					newer.AddKey(b.Node, b.Keys[j], b.Idx[j])
				}
			}
		}
	}
	if len(newer.List) > 0 {
		newer.Gets(ctx, false)
		var scratch item
		for _, b := range newer.List {
			for j := range b.Answered() {
				if it := b.Answer(j, &scratch); it.Found {
					hit(it)
				}
			}
		}
	}
	return nil
}

// backfill writes copies read from old owners to their new owner n, each
// only if its key is neither present nor buried (Redis a script of SET NX
// or RESTORE without REPLACE, Memcached add), so that a value written or a
// key deleted since the miss is never overwritten. It reports which
// copies were stored, and the round trip's failure, counting the copies
// it did not store as dropped.
func (c *Client) backfill(ctx context.Context, st *state, n ring.Node, items []item, whole bool) ([]bool, error) {
	cs := st.mig.Counters
	var stored []bool
	var err error
	switch {
	case whole:
		if sn := sweeper(st.conn(n)); sn == nil {
			err = ErrSweepUnsupported
		} else {
			stored, err = sn.Restore(ctx, items)
		}
	case bugBackfillSet: // a seeded bug (seeded.go): overwrites what is there
		if err = st.conn(n).SetMulti(ctx, items); err == nil {
			stored = make([]bool, len(items))
			for i := range stored {
				stored[i] = true
			}
		}
	default:
		stored, err = st.conn(n).AddMulti(ctx, items)
	}
	if stored == nil {
		cs.BackfillsDropped.Add(int64(len(items)))
		return make([]bool, len(items)), err
	}
	for _, ok := range stored {
		switch {
		case ok:
			cs.Backfills.Add(1)
		case err != nil: // refused, or newer: the failure does not say which
			cs.BackfillsDropped.Add(1)
		default:
			cs.BackfillsSkipped.Add(1)
		}
	}
	return stored, err
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
}

// enqueue hands copies to the backfill worker, or drops and counts them when
// its queue is full: a read must not wait for a copy.
func (c *Client) enqueue(st *state, n ring.Node, items []item) {
	select {
	case c.queue <- pendingBackfill{st, n, items}:
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
			if !p.st.mig.Backfilling(c.opts.Now()) { // past the window: its tombstones may be gone
				p.st.mig.Counters.BackfillsDropped.Add(int64(len(p.items)))
				continue
			}
			ctx, cancel := context.WithTimeout(ctx, c.opts.ReadTimeout+c.opts.WriteTimeout)
			c.backfill(ctx, p.st, p.node, p.items, false)
			cancel()
		}
	}
}
