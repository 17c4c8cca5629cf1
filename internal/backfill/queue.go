package backfill

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// QueueConfig is what a Queue is made with.
type QueueConfig struct {
	// Size is how many batches of copies may wait; more are dropped.
	Size int
	// Timeout bounds each batch's write.
	Timeout time.Duration
	// Now is the clock of the migrations' windows.
	Now func() time.Time
	// Logger gets the queue's events: full, and accepting copies again.
	Logger *slog.Logger
	// Overwrite is Write's seeded bug.
	Overwrite bool
}

// Queue holds copies for a worker that writes them (Write) after the reads
// that found them: a read must not wait for a copy.
type Queue struct {
	cfg  QueueConfig
	ch   chan pending
	done chan struct{}      // closed by Close: stops the worker
	stop context.CancelFunc // cancels the worker's write under way
	wg   sync.WaitGroup
	full atomic.Bool // the queue dropped a copy, and none was queued since (logs once)
}

// pending is a batch of copies waiting for the worker.
type pending struct {
	mig   *migration.Migration
	conns fanout.Conns
	node  ring.Node
	items []node.Item
}

// NewQueue returns a queue and starts its worker, which runs until Close.
func NewQueue(cfg QueueConfig) *Queue {
	ctx, cancel := context.WithCancel(context.Background())
	q := &Queue{cfg: cfg, ch: make(chan pending, cfg.Size), done: make(chan struct{}), stop: cancel}
	q.wg.Add(1)
	go q.work(ctx)
	return q
}

// Add queues copies of mig to new owner n, whose client conns gives when
// they are written, or drops and counts them when the queue is full or
// closed.
func (q *Queue) Add(mig *migration.Migration, conns fanout.Conns, n ring.Node, items []node.Item) {
	select {
	case q.ch <- pending{mig, conns, n, items}:
		q.accepts(n)
	default: // full, or closed: the worker has gone
		mig.Counters.BackfillsDropped.Add(int64(len(items)))
		q.dropping(n)
	}
}

// Close stops the worker, ending a write under way, and waits for it.
// Copies still queued are dropped with the pools they would use.
func (q *Queue) Close() {
	q.stop()
	close(q.done)
	q.wg.Wait()
}

// work writes queued copies until Close. The queue is never closed, so an
// Add racing Close cannot send on a closed channel. Each write is bounded
// by Timeout and ends when Close cancels ctx; a node held down fails it at
// once. Copies past their window are dropped: their tombstones may be gone.
func (q *Queue) work(ctx context.Context) {
	defer q.wg.Done()
	for {
		select {
		case <-q.done:
			return
		case p := <-q.ch:
			if !p.mig.Backfilling(q.cfg.Now()) {
				p.mig.Counters.BackfillsDropped.Add(int64(len(p.items)))
				continue
			}
			ctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
			Write(ctx, p.mig.Counters, p.conns.Conn(p.node), p.items, false, q.cfg.Overwrite)
			cancel()
		}
	}
}

// dropping logs, once until the queue accepts a copy again, that it
// dropped copies for node n.
func (q *Queue) dropping(n ring.Node) {
	if q.full.Load() || !q.full.CompareAndSwap(false, true) {
		return
	}
	q.cfg.Logger.Warn("shardcache: backfill queue full, dropping copies", slog.String("node", n.Name),
		slog.String("addr", n.Addr), slog.Int("queue", q.cfg.Size))
}

// accepts logs that the queue, full before, took a copy again.
func (q *Queue) accepts(n ring.Node) {
	if !q.full.Load() || !q.full.CompareAndSwap(true, false) {
		return
	}
	q.cfg.Logger.Info("shardcache: backfill queue accepting copies again", slog.String("node", n.Name),
		slog.String("addr", n.Addr))
}
