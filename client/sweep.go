package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/sweep"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// The sweep: while a migration's window is open, walk every old node and copy
// each key whose owner changed to its new owner, with its value, its type
// and its remaining expiry, never over a value the new owner already has.
// Without it the dual-ring only carries over the keys that are read during
// the window, and the window has to last the longest TTL; keys without
// expiry would be lost at its end. With it the window only has to cover the
// rollout of the new configuration and the sweep. The walk and the copies of
// each old node's pages are package internal/sweep's; this file decides
// when a sweep may copy, which nodes it sweeps and how many at once, and
// holds their connections meanwhile.

// DefaultSweepRate is the default of SweepOptions.Rate: listed keys
// handled per second on each old node.
const DefaultSweepRate = 10000

var (
	// ErrNoMigration means Sweep was called with no migration's window open.
	ErrNoMigration = sweep.ErrNoMigration
	// ErrSweepUnsupported means a node cannot list its keys: Memcached
	// older than 1.4.31 (no lru_crawler metadump), or one started with the
	// LRU crawler disabled.
	ErrSweepUnsupported = node.ErrSweepUnsupported
	// ErrSweepBusy means a Memcached node could not list its keys for the
	// sweep: another listing ran for 30 s, or its hash table expanded for
	// 5 minutes. Sweep again later.
	ErrSweepBusy = node.ErrSweepBusy
	// ErrSweepSpool means a Memcached node's sweep could not write its key
	// listing to a file in SweepOptions.SpoolDir, or read it back: the
	// directory is missing, read-only or full. The node is not at fault,
	// and nothing of that node's listing was copied.
	ErrSweepSpool = node.ErrSpool
)

// SweepOptions configures a Sweep. The zero value is usable.
type SweepOptions struct {
	// Rate is the most listed keys handled per second on each old node
	// (each moved one read there and written to its new owner), so that
	// the nodes keep serving traffic. 0, the zero value, is the default,
	// DefaultSweepRate, never "no limit": a sweep at full speed takes
	// reads from the old nodes' traffic. Negative (-1): no limit, asked
	// for. SweepStatus.Rate says the limit a sweep ran under, as
	// `shardcache sweep --rate` takes it too. On Memcached it paces the
	// work through the spooled listing, which is itself read at the
	// server's pace (see Sweep).
	Rate int
	// Concurrency is how many old nodes are swept at once. Default all of
	// them.
	Concurrency int
	// Progress, when set, is called with the totals so far after each page
	// of keys, by one goroutine at a time (on Memcached, not while a node's
	// listing is being spooled: see Sweep).
	Progress func(SweepStatus)
	// Prefix, when set, limits the sweep to the keys that start with it
	// (Redis SCAN MATCH; Memcached filters its listing): one application's
	// keys on shared servers.
	Prefix string
	// SpoolDir is where a Memcached node's key listing is written before
	// it is copied, about len(key)+6 bytes a key. Default os.TempDir(); it
	// must be writable, and on disk for the sweep's memory to stay flat.
	SpoolDir string

	// beforeCopy, for tests, is called with the keys of each page after
	// they are read from the old owner and before they are copied.
	beforeCopy func(keys []string)
}

// SweepStatus is the progress, then the totals, of one Sweep call: old
// nodes to sweep and swept, keys listed, copied, already copied, skipped
// (newer, unmoved), gone and failed (migration.SweepStatus).
type SweepStatus = migration.SweepStatus

// Sweep copies every key whose owner changes in the running migration from
// its old owner to its new one, keeping its value, its type (every Redis
// type) and its remaining TTL, and never overwriting a key the new owner
// already has: Redis DUMP, PTTL and RESTORE without REPLACE; Memcached
// lru_crawler metadump, mg and add (see the package README for versions).
// A key deleted meanwhile stays deleted: its tombstone on the new owner
// refuses the copy, as it does a read's backfill (copy.go).
//
// Sweep is idempotent: a second run, or a run from another process at the
// same time, finds the copies present and skips them (AlreadyCopied: a key
// the new owner refuses is read there again, one round trip per batch, and
// counted so when it holds the same value; SkippedNewer otherwise). It
// returns the totals of this call, counted in Migration() too, and an error
// joining one *NodeError per node that failed, beside the totals of the
// others; ctx's error if it was cancelled; ErrNoMigration without a
// migration, or when the window ends before the sweep does. The window must
// cover the sweep: at its end the old nodes are dropped.
//
// On Memcached each old node's listing (lru_crawler metadump) is read whole
// into a file in SpoolDir before any of its keys is copied, as fast as the
// server sends it: a listing left unread holds the server's crawler, and,
// before memcached 1.6.39, an item lock that other clients' commands wait
// on. Rate then paces the work through the spooled keys, and Scanned counts
// them as they are handled. A listing that fails partway still copies the
// keys it listed, then the node's error is returned; an old node that no
// longer answers ends its sweep after 3 pages in a row fail to be read. A
// SpoolDir that cannot be written (missing, read-only) fails each Memcached
// node's sweep before it lists anything; one that fills up fails it
// partway, and nothing it listed is copied.
func (c *Client) Sweep(ctx context.Context, opts SweepOptions) (SweepStatus, error) {
	if err := checkCtx(ctx); err != nil {
		return SweepStatus{}, err
	}
	if opts.Concurrency < 0 {
		return SweepStatus{}, fmt.Errorf("%w: sweep Concurrency %d", ErrBadOptions, opts.Concurrency)
	}
	// Hold the nodes of both placements for the sweep, so that the end of
	// the window cannot close them under it.
	c.mu.Lock()
	st := c.state.Load()
	if st == nil {
		c.mu.Unlock()
		return SweepStatus{}, ErrClosed
	}
	now := c.opts.Now()
	if st.mig == nil || !now.Before(st.mig.End()) {
		c.mu.Unlock()
		return SweepStatus{}, ErrNoMigration
	}
	if st.hold {
		c.mu.Unlock()
		return SweepStatus{}, ErrRepairing
	}
	held := append(st.mig.Old().Nodes(), st.mig.New().Nodes()...)
	_, err := c.pools.Acquire(held)
	c.mu.Unlock()
	if err != nil {
		return SweepStatus{}, err
	}
	defer c.pools.Release(held)
	// Copies wait for the start and the skew after it (migration.Backfilling)
	// and, when writes before the start may have left tombstones on the new
	// owners, for the handover, from which its copies replace them
	// (copy.go), so that those values are copied too.
	from := st.mig.Start().Add(st.mig.Skew())
	if st.announced {
		from = c.handover(st) // its copies then replace writes' tombstones
	}
	if wait := from.Sub(now); wait > 0 {
		if err := sleep(ctx, wait); err != nil {
			return SweepStatus{}, err
		}
	}

	var olds []ring.Node
	seen := map[string]bool{}
	for _, n := range st.mig.Old().Nodes() {
		if !seen[n.Addr] {
			seen[n.Addr] = true
			olds = append(olds, n)
		}
	}
	if opts.Rate == 0 {
		opts.Rate = DefaultSweepRate // the zero value is the safe default
	}
	if opts.Concurrency == 0 || opts.Concurrency > len(olds) {
		opts.Concurrency = len(olds)
	}
	sw := sweep.New(sweep.Config{
		Migration: st.mig, Conns: st, Now: c.opts.Now, Rate: opts.Rate, Prefix: opts.Prefix, SpoolDir: opts.SpoolDir,
		OverWritten: func(now time.Time) bool { return c.replacesWritten(st, now) },
		Redis:       c.opts.Backend == Redis, Progress: opts.Progress, BeforeCopy: opts.beforeCopy,
		Wrap: func(op string, n ring.Node, keys []string, err error) error {
			return sweepErr(n, nodeErr(op, n, keys, err))
		},
	})
	sw.Estimate(ctx, olds)

	sem := make(chan struct{}, opts.Concurrency)
	var wg sync.WaitGroup
	for _, n := range olds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				return
			}
			if err := sw.Node(ctx, n); err == nil {
				sw.Done()
			} else {
				sw.Fail(n, sweepErr(n, err))
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return sw.Status(), err
	}
	var errs []error
	for _, n := range olds {
		if err := sw.Err(n); err != nil {
			errs = append(errs, err)
		}
	}
	return sw.Status(), errors.Join(errs...)
}

// sweepErr is the error of old node n's sweep: a *NodeError, unless it is
// one, or the window's end, or a cancellation.
func sweepErr(n ring.Node, err error) error {
	var ne *NodeError
	if !errors.As(err, &ne) && !errors.Is(err, ErrNoMigration) && !errors.Is(err, context.Canceled) {
		err = &NodeError{Op: "sweep", Node: n, Err: err}
	}
	return err
}
