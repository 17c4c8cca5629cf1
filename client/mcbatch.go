package client

import (
	"context"
	"slices"
	"sync"

	"github.com/bradfitz/gomemcache/memcache"
)

// Natural batching of Memcached Gets (Options.AutoPipeline): gomemcache has
// no pipelining, so while a Get or a batch to a node is in flight, the Gets
// that arrive for that node wait, and go together in the next multi-get when
// it ends. There is no timer: a Get that finds none in flight is sent at
// once, alone, as without batching.

// maxMCBatch is the most keys one batch's multi-get asks for; the waiters
// beyond it go in the next one.
const maxMCBatch = 256

// mcBatcher batches one node's Gets.
type mcBatcher struct {
	mu      sync.Mutex
	busy    bool        // a Get or a batch is in flight
	pending []*mcWaiter // the Gets waiting for the next batch, in arrival order
}

// mcWaiter is one Get waiting for a batch: done is closed when it, err
// (the raw gomemcache error) are set.
type mcWaiter struct {
	key  string
	it   *memcache.Item
	err  error
	done chan struct{}
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
		if w.err != nil {
			return nil, mcErr(w.err)
		}
		return w.it.Value, nil
	case <-ctx.Done():
		return nil, ctx.Err() // the batch still runs; nobody reads this answer
	}
}

// alone sends one Get, which found none in flight, as mcNode.get does
// without batching; when its round trip ends, the Gets that arrived
// meanwhile go.
func (b *mcBatcher) alone(ctx context.Context, n mcNode, key string) ([]byte, error) {
	if ctx.Done() == nil { // call's fast path, without allocating the closures
		start := n.h.begin()
		it, err := n.mc.Get(key)
		b.next(n)
		n.h.observe(nil, opGet, start, err)
		if err != nil {
			return nil, mcErr(err)
		}
		return it.Value, nil
	}
	// Once: call may return on ctx before it runs the Get, or while the Get
	// goes on in the background; either way the next batch starts once.
	var once sync.Once
	over := func() { once.Do(func() { b.next(n) }) }
	it, err := call(ctx, n.h, opGet, func() (*memcache.Item, error) {
		it, err := n.mc.Get(key)
		over()
		return it, err
	})
	if err != nil {
		over()
		return nil, err
	}
	return it.Value, nil
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
// Get is reported to the node's health as one Get: the node's error, if the
// multi-get failed, counts once per waiter, as the same Gets sent one by one
// would count.
func (b *mcBatcher) run(n mcNode, batch []*mcWaiter) {
	for batch != nil {
		keys := make([]string, 0, len(batch))
		seen := make(map[string]bool, len(batch))
		for _, w := range batch {
			if !seen[w.key] {
				seen[w.key] = true
				keys = append(keys, w.key)
			}
		}
		start := n.h.begin()
		found, err := n.mc.GetMulti(keys)
		for _, w := range batch {
			switch it, ok := found[w.key]; {
			case err != nil:
				w.err = err
			case !ok:
				w.err = memcache.ErrCacheMiss
			case seen[w.key]:
				w.it = it
				seen[w.key] = false // the first waiter of a key gets the item, the others a copy
			default:
				c := *it
				c.Value = slices.Clone(it.Value)
				w.it = &c
			}
			n.h.observe(nil, opGet, start, w.err)
			close(w.done)
		}
		batch = b.take()
	}
}
