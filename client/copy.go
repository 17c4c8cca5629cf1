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
// copy an Incr or a Touch depends on, RedisDo's copy of any type), whose
// reads and writes are package internal/backfill's (backfill.Copier: at
// once, or through its queue with Options.AsyncBackfill), or through the
// sweep's restore (internal/sweep). This file decides how each copies.
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
	if before || bugTombReplaceable { // a seeded bug (seeded.go)
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

var (
	// copyRead is a read's fallback and backfill (Get, GetMulti, GetItem).
	copyRead = backfill.How{Reread: true}
	// copyStrict brings a key over before an operation that depends on its
	// value (Incr, Touch, Store of an existing key, GetAndTouch).
	copyStrict = backfill.How{Check: true, Sync: true, Strict: true}
	// copyWhole brings a key of any type over for RedisDo, whose caller
	// asked the new owner already; strict, since the command then runs on
	// the new owner and would read, or update, nothing.
	copyWhole = backfill.How{Sync: true, Whole: true, Strict: true}
)

// fromOld copies keys, key i routed by routes[i] (all dual), from their
// old owners to their new ones as how says (backfill.Copier.Copy), one
// round trip per node for each step: with the queue of
// Options.AsyncBackfill unless how is Sync, the copies replacing the
// tombstones of writes when their reads begin past the handover. hit, when
// set, is told of each value found on an old owner and, with Reread, of
// the newer value found on a new one instead; a key may be reported twice,
// the later report current.
func (c *Client) fromOld(ctx context.Context, st *state, now time.Time, keys []string, routes []migration.Route, how backfill.How, hit func(*item)) error {
	cp := backfill.Copier{Migration: st.mig, Conns: st, Now: now, OverWritten: c.replacesWritten(st, now),
		Queue: c.queue, Overwrite: bugBackfillSet, Wrap: nodeErr}
	return cp.Copy(ctx, keys, routes, how, hit)
}
