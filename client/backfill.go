package client

import (
	"context"

	"github.com/shardcache/shardcache/ring"
)

// backfill writes copies found on old owners to their new owner n, each only
// if absent (Redis SET NX, Memcached add), so a value written since the miss
// is never overwritten. It reports which copies were stored; a failed
// round trip stores none and counts them as dropped.
func (c *Client) backfill(ctx context.Context, st *state, n ring.Node, items []item) []bool {
	cs := st.mig.Counters
	stored, err := st.conn(n).addMulti(ctx, items)
	if err != nil {
		cs.BackfillsDropped.Add(int64(len(items)))
		return make([]bool, len(items))
	}
	for _, ok := range stored {
		if ok {
			cs.Backfills.Add(1)
		} else {
			cs.BackfillsSkipped.Add(1)
		}
	}
	return stored
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
	default: // full, or closed: the worker has gone
		st.mig.Counters.BackfillsDropped.Add(int64(len(items)))
	}
}

// backfillWorker writes queued copies until Close. The queue is never
// closed, so a read racing Close cannot send on a closed channel; copies
// still queued at Close are dropped with the pools they would use.
func (c *Client) backfillWorker() {
	defer c.worker.Done()
	for {
		select {
		case <-c.done:
			return
		case p := <-c.queue:
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.ReadTimeout+c.opts.WriteTimeout)
			c.backfill(ctx, p.st, p.node, p.items)
			cancel()
		}
	}
}
