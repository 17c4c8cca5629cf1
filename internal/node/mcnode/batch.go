package mcnode

import (
	"context"
	"slices"
	"sync"

	"github.com/shardcache/shardcache/internal/node"
)

// Natural batching of Gets (Config.Batch): while a Get or a batch to the
// node is in flight, the Gets that arrive wait, and go together in the
// next multi-get when it ends. There is no timer: a Get that finds none in
// flight is sent at once, alone, as without batching; and no goroutine
// but while a batch runs.

// maxBatch is the most keys one batch's multi-get asks for; the waiters
// beyond it go in the next one.
const maxBatch = 256

// batcher batches one node's Gets.
type batcher struct {
	mu      sync.Mutex
	busy    bool      // a Get or a batch is in flight
	pending []*waiter // the Gets waiting for the next batch, in arrival order
}

// waiter is one Get waiting for a batch: done is closed when value and
// err are set.
type waiter struct {
	key   string
	value []byte
	err   error
	done  chan struct{}
}

// get is Node.Get through the batcher.
func (b *batcher) get(ctx context.Context, n *Node, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		v, err := n.get(ctx, key)
		b.next(n)
		return v, err
	}
	w := &waiter{key: key, done: make(chan struct{})}
	b.pending = append(b.pending, w)
	b.mu.Unlock()
	select {
	case <-w.done:
		return w.value, w.err
	case <-ctx.Done():
		return nil, ctx.Err() // the batch still runs; nobody reads this answer
	}
}

// waiting returns the number of Gets waiting for a batch.
func (b *batcher) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// next is called when the call in flight has ended: it starts the batch
// of the Gets that waited meanwhile, or marks the node idle.
func (b *batcher) next(n *Node) {
	if batch := b.take(); batch != nil {
		go b.run(n, batch)
	}
}

// take returns the next batch of waiters and leaves the batcher busy, or
// returns nil and marks it idle.
func (b *batcher) take() []*waiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		b.busy = false
		return nil
	}
	k := min(len(b.pending), maxBatch)
	batch := b.pending[:k:k]
	b.pending = slices.Clone(b.pending[k:])
	return batch
}

// run sends batches, one multi-get of their distinct keys each, until no
// Get waits. Each waiter is observed as one Get (without a caller's
// context: the batch has none); the node's error, if the multi-get
// failed, counts once per waiter, as the same Gets sent one by one would.
func (b *batcher) run(n *Node, batch []*waiter) {
	for batch != nil {
		b.round(n, batch)
		batch = b.take()
	}
}

func (b *batcher) round(n *Node, batch []*waiter) {
	keys := make([]string, 0, len(batch))
	first := make(map[string]int, len(batch)) // a key's index in keys
	for _, w := range batch {
		if _, ok := first[w.key]; !ok {
			first[w.key] = len(keys)
			keys = append(keys, w.key)
		}
	}
	out := make([]node.Answer, len(keys))
	given := make([]bool, len(keys)) // the first waiter of a key gets its value, the others a copy
	start := n.obs.Begin()
	_, err := n.mc.GetMulti(context.Background(), keys, out)
	err = nodeErr(err)
	for _, w := range batch {
		switch i := first[w.key]; {
		case err != nil:
			w.err = err
		case !out[i].Found || isHidden(out[i].Value, out[i].Flags):
			w.err = node.ErrCacheMiss
		case !given[i]:
			w.value, given[i] = out[i].Value, true
		default:
			w.value = slices.Clone(out[i].Value)
		}
	}
	for _, w := range batch {
		n.obs.Done(nil, node.OpGet, start, w.err)
		close(w.done)
	}
}
