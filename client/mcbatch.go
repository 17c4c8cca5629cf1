package client

import (
	"context"
	"slices"
	"sync"
)

// Natural batching of Memcached Gets (Options.AutoPipeline): while a Get or
// a batch to a node is in flight, the Gets that arrive for that node wait,
// and go together in the next multi-get when it ends. There is no timer: a
// Get that finds none in flight is sent at once, alone, as without
// batching. Both go over the node's raw connections (mcget.go), the batch
// as one "gets" of its keys.

// maxMCBatch is the most keys one batch's multi-get asks for; the waiters
// beyond it go in the next one.
const maxMCBatch = 256

// mcBatcher batches one node's Gets.
type mcBatcher struct {
	mu      sync.Mutex
	busy    bool        // a Get or a batch is in flight
	pending []*mcWaiter // the Gets waiting for the next batch, in arrival order
}

// mcWaiter is one Get waiting for a batch: done is closed when value and
// err are set.
type mcWaiter struct {
	key   string
	value []byte
	err   error
	done  chan struct{}
}

// get is mcNode.get through the batcher.
func (b *mcBatcher) get(ctx context.Context, n mcNode, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		return b.alone(ctx, n, key)
	}
	w := &mcWaiter{key: key, done: make(chan struct{})}
	b.pending = append(b.pending, w)
	b.mu.Unlock()
	select {
	case <-w.done:
		return w.value, w.err
	case <-ctx.Done():
		return nil, ctx.Err() // the batch still runs; nobody reads this answer
	}
}

// alone sends one Get, which found none in flight, as mcNode.get does
// without batching; when it ends, the Gets that arrived meanwhile go.
func (b *mcBatcher) alone(ctx context.Context, n mcNode, key string) ([]byte, error) {
	it, err := n.raw.getItem(ctx, key)
	b.next(n)
	return it.value, err
}

// next is called when the call in flight to the node has ended: it starts
// the batch of the Gets that waited meanwhile, or marks the node idle.
func (b *mcBatcher) next(n mcNode) {
	if batch := b.take(); batch != nil {
		go b.run(n, batch)
	}
}

// take returns the next batch of waiters and leaves the batcher busy, or
// returns nil and marks it idle.
func (b *mcBatcher) take() []*mcWaiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		b.busy = false
		return nil
	}
	k := min(len(b.pending), maxMCBatch)
	batch := b.pending[:k:k]
	b.pending = slices.Clone(b.pending[k:])
	return batch
}

// run sends batches, one multi-get each, until no Get waits. Each waiter's
// Get is reported to the node's health as one Get: the round as its first
// waiter's, through the call's end, the others' beside it. The node's
// error, if the multi-get failed, counts once per waiter, as the same Gets
// sent one by one would count.
func (b *mcBatcher) run(n mcNode, batch []*mcWaiter) {
	for batch != nil {
		keys := make([]string, 0, len(batch))
		first := make(map[string]int, len(batch)) // a key's index in keys
		for _, w := range batch {
			if _, ok := first[w.key]; !ok {
				first[w.key] = len(keys)
				keys = append(keys, w.key)
			}
		}
		out := make([]answer, len(keys))
		given := make([]bool, len(keys)) // the first waiter of a key gets its value, the others a copy
		start := n.h.begin()
		c, err := n.raw.ask(context.Background(), opGet, keys, out)
		if err == ErrCacheMiss { // none found: each waiter's miss, below
			err = nil
		}
		for _, w := range batch {
			switch i := first[w.key]; {
			case err != nil:
				w.err = err
			case !out[i].found:
				w.err = ErrCacheMiss
			case !given[i]:
				w.value, given[i] = out[i].value, true
			default:
				w.value = slices.Clone(out[i].value)
			}
		}
		if c.rawConn != nil {
			if e := c.end(batch[0].err); err != nil {
				err = e // the round failed: its error as end gives it
			}
		}
		if err != nil {
			err = authErr(err)
			for _, w := range batch {
				w.err = err
			}
		}
		for i, w := range batch {
			if i > 0 {
				n.h.observe(nil, opGet, start, w.err)
			}
			close(w.done)
		}
		batch = b.take()
	}
}
