// Package backfill makes a migration's copies from old owners to new
// ones (the client's read fallbacks, the copies an update depends on):
// the copy of an operation's keys (Copier: the new owners asked first if
// need be, the old owners read, the copies written, the newer values that
// beat them read back), the write itself, only where the key is neither
// present nor buried, counted in the migration's counters, and the queue
// of Options.AsyncBackfill, whose worker writes the copies after the reads
// that found them and drops them when it is full. The client decides what
// to copy, from where, how (How) and when (its copy.go).
//
//	cp := backfill.Copier{Migration: mig, Conns: conns, Now: now}
//	err := cp.Copy(ctx, keys, routes, backfill.How{Reread: true}, hit)
//	stored, err := backfill.Write(ctx, mig.Counters, newOwner, copies, false, false)
//	q := backfill.NewQueue(backfill.QueueConfig{Size: 4096, Timeout: time.Second, Now: time.Now, Logger: logger})
//	q.Add(mig, conns, n, copies) // written later, or dropped and counted
//	q.Close()
package backfill

import (
	"context"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/migration"
)

// Write writes copies read from old owners to their new owner n, each
// only if its key is neither present nor buried (Redis a script of SET NX
// or RESTORE without REPLACE, Memcached add), so that a value written or a
// key deleted since the miss is never overwritten; whole copies dumped
// items of any type (node.Sweeper's Restore), else values. It reports
// which copies were stored, and the round trip's failure, counting in cs
// the copies stored, skipped (the key was there) and dropped (not stored
// for a failure). overwrite is a seeded bug (the client's
// shardcache_bug_backfillset): the copies are set, over what is there.
func Write(ctx context.Context, cs *migration.Counters, n node.Node, items []node.Item, whole, overwrite bool) ([]bool, error) {
	var stored []bool
	var err error
	switch {
	case whole:
		if sn, ok := n.(node.Sweeper); !ok {
			err = node.ErrSweepUnsupported
		} else {
			stored, err = sn.Restore(ctx, items)
		}
	case overwrite:
		if err = n.SetMulti(ctx, items); err == nil {
			stored = make([]bool, len(items))
			for i := range stored {
				stored[i] = true
			}
		}
	default:
		stored, err = n.AddMulti(ctx, items)
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

// Holds reports which keys node n holds, whatever their type.
func Holds(ctx context.Context, n node.Node, keys []string) ([]bool, error) {
	if sn, ok := n.(node.Sweeper); ok {
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
