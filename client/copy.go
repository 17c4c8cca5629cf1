package client

import (
	"context"
	"time"

	"github.com/shardcache/shardcache/internal/backfill"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/migration"
)

// Copies from old owners to new ones, during a migration. Every copy the
// client makes goes through fromOld (a read's fallback and backfill, the
// copy an Incr or a Touch depends on, RedisDo's copy of any type), which
// writes them with package internal/backfill (at once, or through its queue
// with Options.AsyncBackfill), or through the sweep's restore
// (internal/sweep).
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
			found, err := backfill.Holds(ctx, b.Conn, b.Keys)
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
			sn := node.SweeperOf(b.Conn)
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
			c.queue.Add(st.mig, st, b.Node, b.Items)
		}
		return nil
	}
	newer := newBatches(st)
	for _, b := range copies.List {
		stored, err := backfill.Write(ctx, cs, st.conn(b.Node), b.Items, how.whole, bugBackfillSet)
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
