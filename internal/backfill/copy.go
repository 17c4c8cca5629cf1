package backfill

import (
	"context"
	"errors"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// How says how Copier.Copy copies.
type How struct {
	// Check asks the new owners first which keys they hold: those are not
	// copied (they are current).
	Check bool
	// Sync copies synchronously, even with a Queue.
	Sync bool
	// Strict returns at once a failure to read an old owner or to write a
	// copy: the caller's operation depends on the copy and would otherwise
	// start from nothing. Otherwise the other keys are still copied, a
	// failure to write a copy is counted and dropped (the value was read),
	// and a failure to read an old owner is returned with the rest: those
	// keys may be there, and a miss would send the caller to its database
	// believing the cache had lost them (the caller decides, as for a
	// failed new owner, whether FailOpen makes it a miss).
	Strict bool
	// Whole copies any type with its remaining TTL, as the sweep does
	// (node.Sweeper's Dump and Restore), rather than a value.
	Whole bool
	// Reread: where a newer value beat the copy to the new owner, read it
	// and report it, for a read that must return the current value.
	Reread bool
}

// Copier copies keys of a migration from their old owners to their new
// ones, for one operation of the client's (a read's fallback and
// backfill, the copy an update depends on, RedisDo's copy of any type).
// The client decides when to copy, and how (How).
type Copier struct {
	// Migration is the migration the keys move in: its counters count the
	// reads and the copies, and its window cuts their TTLs
	// (migration.Migration.BackfillTTL).
	Migration *migration.Migration
	// Conns gives the node clients of both placements.
	Conns fanout.Conns
	// Now is when the reads of the old owners begin, on the migration's
	// clock.
	Now time.Time
	// OverWritten: those reads begin past the handover, after every write
	// the old owner took alone, so the copies may replace the tombstones
	// such writes left (node.Item.OverWritten, node.TombWritten).
	OverWritten bool
	// Queue, when set, takes the copies of a Copy that is not How.Sync,
	// for its worker to write (the client's Options.AsyncBackfill).
	Queue *Queue
	// Overwrite is Write's seeded bug.
	Overwrite bool
	// Wrap makes the error returned for a failed step, op "get" or
	// "backfill", of keys on node n (the client's *NodeError). Nil: the
	// error itself.
	Wrap func(op string, n ring.Node, keys []string, err error) error
}

// Copy copies keys, key i routed by routes[i] (all dual), from their old
// owners to their new ones as how says, one round trip per node for each
// step; it returns the failures How.Strict describes, one error (Wrap's)
// per failed node, joined. hit, when set (always, with How.Reread), is told of each value
// found on an old owner and, with Reread, of the newer value found on a
// new one instead; a key may be reported twice, the later report current.
// Values keep their remaining TTL where the server tells it (none stays
// none), cut to the migration's window (migration.BackfillTTL).
func (c Copier) Copy(ctx context.Context, keys []string, routes []migration.Route, how How, hit func(*node.Item)) error {
	cs := c.Migration.Counters
	want := make([]bool, len(keys))
	for i := range want {
		want[i] = true
	}
	if how.Check {
		news := fanout.New(c.Conns)
		for i, k := range keys {
			news.AddKey(routes[i].New, k, i)
		}
		news.Run(func(b *fanout.Batch) error {
			found, err := Holds(ctx, b.Conn, b.Keys)
			for j, f := range found {
				want[b.Idx[j]] = !f
			}
			return err
		})
		for _, b := range news.List {
			if b.Err != nil {
				return c.wrap("get", b.Node, b.Keys, b.Err)
			}
		}
		for _, w := range want {
			if !w {
				cs.NewHits.Add(1)
			}
		}
	}
	olds := fanout.New(c.Conns)
	for i, k := range keys {
		if want[i] {
			olds.AddKey(routes[i].Old, k, i)
		}
	}
	if how.Whole {
		olds.Run(func(b *fanout.Batch) (err error) {
			sn := node.SweeperOf(b.Conn)
			if sn == nil {
				return node.ErrSweepUnsupported
			}
			in := make([]node.Item, len(b.Keys))
			for j, k := range b.Keys {
				in[j].Key = k
			}
			b.Got, err = sn.Dump(ctx, in)
			return err
		})
	} else {
		olds.Gets(ctx, true)
	}
	copies := fanout.New(c.Conns)
	var readErrs []error
	for _, b := range olds.List {
		if b.Err != nil {
			cs.FallbackErrors.Add(int64(len(b.Keys)))
			if how.Strict {
				return c.wrap("get", b.Node, b.Keys, b.Err)
			}
			readErrs = append(readErrs, c.wrap("get", b.Node, b.Keys, b.Err))
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
			if it.TTL, ok = c.Migration.BackfillTTL(it.Key, c.Now, it.TTL, it.TTLKnown); ok && routes[i].Backfill {
				it.OverWritten = c.OverWritten
				copies.Add(routes[i].New, *it, i, false)
			}
		}
	}
	if c.Queue != nil && !how.Sync {
		for _, b := range copies.List {
			c.Queue.Add(c.Migration, c.Conns, b.Node, b.Items)
		}
		return errors.Join(readErrs...)
	}
	newer := fanout.New(c.Conns)
	for _, b := range copies.List {
		stored, err := Write(ctx, cs, c.Conns.Conn(b.Node), b.Items, how.Whole, c.Overwrite)
		if err != nil && how.Strict {
			return c.wrap("backfill", b.Node, b.Keys, err)
		}
		if err == nil && how.Reread {
			for j, s := range stored {
				if !s {
					newer.AddKey(b.Node, b.Keys[j], b.Idx[j])
				}
			}
		}
	}
	if len(newer.List) > 0 {
		ReadBack(ctx, newer, hit)
	}
	return errors.Join(readErrs...)
}

// ReadBack reads the keys of bs, batches of new owners, after their copies
// were written or refused, and calls hit with each key found there: for a
// read that must answer with the new owner's item (the newer value that
// beat a copy, or a copy's CAS id there).
func ReadBack(ctx context.Context, bs *fanout.Batches, hit func(*node.Item)) {
	bs.Gets(ctx, false)
	var scratch node.Item
	for _, b := range bs.List {
		for j := range b.Answered() {
			if it := b.Answer(j, &scratch); it.Found {
				hit(it)
			}
		}
	}
}

// wrap is Wrap's error, err itself without one.
func (c Copier) wrap(op string, n ring.Node, keys []string, err error) error {
	if c.Wrap == nil {
		return err
	}
	return c.Wrap(op, n, keys, err)
}
