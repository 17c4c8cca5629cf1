package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/time/rate"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/replica"
	"github.com/shardcache/shardcache/ring"
)

// The sweep: while a migration's window is open, walk every old node and copy
// each key whose owner changed to its new owner, with its value, its type
// and its remaining expiry, never over a value the new owner already has.
// Without it the dual-ring only carries over the keys that are read during
// the window, and the window has to last the longest TTL; keys without
// expiry would be lost at its end. With it the window only has to cover the
// rollout of the new configuration and the sweep.

// DefaultSweepRate is the default of SweepOptions.Rate: keys read per second
// from each old node.
const DefaultSweepRate = 10000

// sweepPage is how many keys one step of a sweep lists, reads and copies:
// one SCAN page, one pipeline of DUMP and PTTL, one of RESTORE per new owner.
const sweepPage = 100

var (
	// ErrNoMigration means Sweep was called with no migration's window open.
	ErrNoMigration = errors.New("shardcache: no migration is active")
	// ErrSweepUnsupported means a node cannot list its keys: Memcached
	// older than 1.4.31 (no lru_crawler metadump), or one started with the
	// LRU crawler disabled.
	ErrSweepUnsupported = node.ErrSweepUnsupported
)

// SweepOptions configures a Sweep. The zero value is usable.
type SweepOptions struct {
	// Rate is the most keys read per second from each old node, so that
	// the old nodes keep serving traffic. Default DefaultSweepRate; a
	// negative Rate removes the limit.
	Rate int
	// Concurrency is how many old nodes are swept at once. Default all of
	// them.
	Concurrency int
	// Progress, when set, is called with the totals so far after each page
	// of keys, by one goroutine at a time.
	Progress func(SweepStatus)
	// Prefix, when set, limits the sweep to the keys that start with it
	// (Redis SCAN MATCH; Memcached filters its listing): one application's
	// keys on shared servers.
	Prefix string

	// beforeCopy, for tests, is called with the keys of each page after
	// they are read from the old owner and before they are copied.
	beforeCopy func(keys []string)
}

// SweepStatus is the progress, then the totals, of one Sweep call.
type SweepStatus struct {
	Nodes     int   // old nodes to sweep
	NodesDone int   // old nodes swept to the end
	Keys      int64 // estimated keys on the old nodes (DBSIZE, curr_items); 0 if unknown

	Scanned        int64 // keys listed
	Copied         int64 // keys copied to their new owner (and kept)
	AlreadyCopied  int64 // keys the new owner already had with the same value: copied before (an earlier sweep, another process's, a read's backfill)
	SkippedNewer   int64 // keys the new owner already had with another value (a newer write), or had buried (deleted meanwhile)
	SkippedUnmoved int64 // keys whose owner did not change, or that are not the old placement's to move from this node
	Gone           int64 // moved keys that expired or were deleted before they could be read
	Failed         int64 // moved keys not copied because a read or a write failed
}

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
		opts.Rate = DefaultSweepRate
	}
	if opts.Concurrency == 0 || opts.Concurrency > len(olds) {
		opts.Concurrency = len(olds)
	}
	sw := &sweep{c: c, st: st, opts: opts, errs: map[string]error{}}
	sw.status.Nodes = len(olds)
	for _, n := range olds {
		if sn := sweeper(st.conn(n)); sn != nil {
			if size, err := sn.Size(ctx); err == nil {
				sw.status.Keys += size
			}
		}
	}

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
			err := sw.node(ctx, n)
			sw.mu.Lock()
			if err == nil {
				sw.status.NodesDone++
			} else {
				sw.fail(n, err)
			}
			sw.mu.Unlock()
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return sw.status, err
	}
	var errs []error
	for _, n := range olds {
		if err := sw.errs[n.Addr]; err != nil {
			errs = append(errs, err)
		}
	}
	return sw.status, errors.Join(errs...)
}

// sweep is one Sweep call's state.
type sweep struct {
	c    *Client
	st   *state
	opts SweepOptions

	mu     sync.Mutex
	status SweepStatus
	errs   map[string]error // the first failure of each old node, by address
}

// fail records err for old node n, keeping the first; mu is held.
func (sw *sweep) fail(n ring.Node, err error) {
	if sw.errs[n.Addr] != nil {
		return
	}
	var ne *NodeError
	if !errors.As(err, &ne) && !errors.Is(err, ErrNoMigration) && !errors.Is(err, context.Canceled) {
		err = &NodeError{Op: "sweep", Node: n, Err: err}
	}
	sw.errs[n.Addr] = err
}

// errWindowOver stops a sweep when the window ends.
var errWindowOver = fmt.Errorf("%w: the window ended before the sweep did", ErrNoMigration)

// node sweeps old node n to the end of its keys.
func (sw *sweep) node(ctx context.Context, n ring.Node) error {
	sn := sweeper(sw.st.conn(n))
	if sn == nil {
		return ErrSweepUnsupported
	}
	var lim *rate.Limiter
	if sw.opts.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(sw.opts.Rate), sweepPage)
	}
	return sn.Scan(ctx, sw.opts.Prefix, sweepPage, func(page []item) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !sw.st.mig.Backfilling(sw.c.opts.Now()) {
			return errWindowOver
		}
		for left := len(page); lim != nil && left > 0; left -= sweepPage {
			if err := lim.WaitN(ctx, min(left, sweepPage)); err != nil {
				return ctxErr(ctx, err)
			}
		}
		sw.page(ctx, n, sn, page)
		if sw.opts.Progress != nil {
			sw.mu.Lock()
			sw.opts.Progress(sw.status)
			sw.mu.Unlock()
		}
		return nil
	})
}

// page copies the moved keys of one page listed on old node n.
func (sw *sweep) page(ctx context.Context, n ring.Node, sn node.Sweeper, page []item) {
	mig := sw.st.mig
	cs := mig.Counters
	var moving []item
	for _, it := range page {
		if replica.Keeps(mig.Old(), it.Key, n.Addr) && mig.Old().Locate(it.Key).Addr != mig.New().Locate(it.Key).Addr {
			moving = append(moving, it)
		}
	}
	sw.add(func(s *SweepStatus) {
		s.Scanned += int64(len(page))
		s.SkippedUnmoved += int64(len(page) - len(moving))
	})
	cs.SweepScanned.Add(int64(len(page)))
	cs.SweepSkippedUnmoved.Add(int64(len(page) - len(moving)))
	if len(moving) == 0 {
		return
	}
	// Read after the handover, a dump may replace writes' tombstones
	// (copy.go).
	over := sw.c.replacesWritten(sw.st, sw.c.opts.Now())
	got, err := sn.Dump(ctx, moving)
	if err != nil {
		sw.failed(n, len(moving), nodeErr("sweep_dump", n, itemKeys(moving), err))
		return
	}
	dst := newBatches(sw.st)
	gone := 0
	for i, it := range got {
		if !it.Found {
			gone++
			continue
		}
		it.OverWritten = over
		dst.Add(mig.New().Locate(it.Key), it, i, false)
	}
	sw.add(func(s *SweepStatus) { s.Gone += int64(gone) })
	cs.SweepGone.Add(int64(gone))
	if sw.opts.beforeCopy != nil {
		sw.opts.beforeCopy(itemKeys(moving))
	}
	dst.Run(func(b *batch) error {
		sd := sweeper(b.Conn)
		if sd == nil {
			return ErrSweepUnsupported
		}
		stored, err := sd.Restore(ctx, b.Items)
		if stored == nil {
			return err
		}
		var rest []item // newer or buried, or failed with err
		copied := 0
		for i, ok := range stored {
			if ok {
				copied++
			} else {
				rest = append(rest, b.Items[i])
			}
		}
		sw.add(func(s *SweepStatus) { s.Copied += int64(copied) })
		cs.SweepCopied.Add(int64(copied))
		if err != nil {
			b.Items = rest // counted as failed below
			return err
		}
		same := sw.alreadyCopied(ctx, sd, rest)
		sw.add(func(s *SweepStatus) { s.AlreadyCopied += int64(same); s.SkippedNewer += int64(len(rest) - same) })
		cs.SweepAlreadyCopied.Add(int64(same))
		cs.SweepSkippedNewer.Add(int64(len(rest) - same))
		return nil
	})
	for _, b := range dst.List {
		if b.Err != nil {
			sw.failed(n, len(b.Items), nodeErr("sweep_restore", b.Node, itemKeys(b.Items), b.Err))
		}
	}
}

// alreadyCopied reads again on their new owner the items it refused and
// returns how many it holds as they are (value and flags; on Redis the
// DUMP payload less its footer, the RDB version and checksum, which differ
// between server versions): copies made before. A failed read counts none.
// A value the new server re-encoded (a hash restored as another encoding)
// counts as another value.
func (sw *sweep) alreadyCopied(ctx context.Context, sd node.Sweeper, refused []item) int {
	if len(refused) == 0 {
		return 0
	}
	have, err := sd.Dump(ctx, refused)
	if err != nil {
		return 0
	}
	same := 0
	for i, h := range have {
		if h.Found && h.Flags == refused[i].Flags && bytes.Equal(sw.payload(h.Value), sw.payload(refused[i].Value)) {
			same++
		}
	}
	return same
}

// payload is what alreadyCopied compares of a dumped value: a Redis DUMP
// less its 10-byte footer (2 bytes of RDB version, 8 of CRC64), a
// Memcached value whole.
func (sw *sweep) payload(v []byte) []byte {
	if sw.c.opts.Backend == Redis && len(v) >= 10 {
		return v[:len(v)-10]
	}
	return v
}

// add applies f to the status under the lock.
func (sw *sweep) add(f func(s *SweepStatus)) {
	sw.mu.Lock()
	f(&sw.status)
	sw.mu.Unlock()
}

// failed counts keys that could not be copied from old node n, and records
// the error; the sweep goes on with the next page.
func (sw *sweep) failed(n ring.Node, keys int, err error) {
	sw.st.mig.Counters.SweepFailed.Add(int64(keys))
	sw.mu.Lock()
	sw.status.Failed += int64(keys)
	sw.fail(n, err)
	sw.mu.Unlock()
}

func itemKeys(items []item) []string {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	return keys
}
