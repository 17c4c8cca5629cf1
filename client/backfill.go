package client

import (
	"context"

	"github.com/shardcache/shardcache/ring"
)

// A copy from an old owner to a new one must never bring back a key deleted
// meanwhile. A Delete that lands between the read of the old owner and the
// write of the copy would otherwise be undone: the copy recreates on the new
// owner the value the Delete had just removed there. Two rules close it, for
// every copy the client makes (read-path backfills and the sweep alike):
//
//   - Delete removes the old owner's copy first, then the new owner's.
//   - After a copy is stored, confirm asks its source whether it still holds
//     the key, and deletes the copy if not.
//
// If a Delete's removal from the old owner comes before confirm's read, confirm
// sees the key gone and deletes the copy; if it comes after, the Delete's
// removal from the new owner comes after the copy too, and removes it. Either
// way the key stays deleted. The price is one extra round trip per copy batch;
// copies are rare, once per moved key.

// backfill writes copies found on old owners to their new owner n, each only
// if absent (Redis SET NX, Memcached add), so a value written since the miss
// is never overwritten, then confirms them. It reports which copies were
// stored, and the round trip's failure, counting the copies it did not
// store as dropped.
func (c *Client) backfill(ctx context.Context, st *state, n ring.Node, items []item) ([]bool, error) {
	cs := st.mig.Counters
	stored, err := st.conn(n).addMulti(ctx, items)
	if stored == nil {
		cs.BackfillsDropped.Add(int64(len(items)))
		return make([]bool, len(items)), err
	}
	var copied []item
	for i, ok := range stored {
		switch {
		case ok:
			cs.Backfills.Add(1)
			copied = append(copied, items[i])
		case err != nil: // refused, or newer: the failure does not say which
			cs.BackfillsDropped.Add(1)
		default:
			cs.BackfillsSkipped.Add(1)
		}
	}
	if len(copied) > 0 { // confirmed even beside a failure: they are stored
		c.confirm(ctx, st, n, copied)
	}
	return stored, err
}

// confirm checks that the source of each copy just stored on dst still holds
// its key, and deletes from dst the copies whose source lost it: a Delete
// ran in between (see the rules above). It asks whether the source holds
// the key whatever its type (Redis EXISTS), since a sweep copies hashes and
// lists too. A source that cannot be read counts
// as having lost the key, since a copy that cannot be confirmed is not
// safe to keep: the next read simply falls back again. It returns how many
// copies were revoked, counted in BackfillsRevoked.
func (c *Client) confirm(ctx context.Context, st *state, dst ring.Node, copies []item) int {
	bySrc := newBatches(st)
	for i, it := range copies {
		bySrc.addKey(it.src, it.key, i)
	}
	bySrc.run(func(b *batch) error {
		found, err := holds(ctx, b.conn, b.keys)
		b.got = make([]item, len(found))
		for i, f := range found {
			b.got[i].found = f
		}
		return err
	})
	var gone []string
	for _, b := range bySrc.list {
		for i, k := range b.keys {
			if b.err != nil || !b.got[i].found {
				gone = append(gone, k)
			}
		}
	}
	if len(gone) == 0 {
		return 0
	}
	st.mig.Counters.BackfillsRevoked.Add(int64(len(gone)))
	if err := st.conn(dst).deleteMulti(ctx, gone); err != nil {
		st.mig.Counters.BackfillsDropped.Add(int64(len(gone)))
	}
	return len(gone)
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
			ctx, cancel := context.WithTimeout(ctx, c.opts.ReadTimeout+c.opts.WriteTimeout)
			c.backfill(ctx, p.st, p.node, p.items)
			cancel()
		}
	}
}
