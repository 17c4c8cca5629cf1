// Package sweep is the mechanism of a migration's sweep (client.Sweep):
// it lists an old node's keys a page at a time, within a rate, and copies
// each key whose owner changed to its new owner with its value, its type
// and its remaining TTL (node.Sweeper's Scan, Dump and Restore), never
// over a key the new owner holds; a key the new owner refuses is read
// again there, to tell a copy made before from a newer value. It counts
// what it did in a Status and in the migration's counters. The client
// decides when a sweep may copy (after the handover), which old nodes it
// sweeps and how many at once, holds their connections meanwhile, and
// makes the errors it returns.
//
//	sw := sweep.New(sweep.Config{Migration: mig, Conns: conns, Now: time.Now, Rate: 10000})
//	err := sw.Node(ctx, old) // every page of old's keys, copied
//	st := sw.Status()
package sweep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/internal/node/replica"
	"github.com/shardcache/shardcache/internal/wire"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

var (
	// ErrNoMigration means no migration's window is open
	// (client.ErrNoMigration).
	ErrNoMigration = errors.New("shardcache: no migration is active")
	// ErrWindowOver stops a sweep when the window ends.
	ErrWindowOver = fmt.Errorf("%w: the window ended before the sweep did", ErrNoMigration)
)

// PageSize is how many keys one step of a sweep lists, reads and copies:
// one SCAN page, one pipeline of DUMP and PTTL, one of RESTORE per new
// owner.
const PageSize = 100

// Status is the progress, then the totals, of one sweep:
// migration.SweepStatus (client.SweepStatus).
type Status = migration.SweepStatus

// Config is what a sweep copies, and how.
type Config struct {
	// Migration is the migration whose moved keys are copied, and whose
	// counters count the copies.
	Migration *migration.Migration
	// Conns gives the node clients of both placements.
	Conns fanout.Conns
	// Now is the clock of the migration's window.
	Now func() time.Time
	// Rate is the most listed keys handled per second on each old node;
	// 0 or less, no limit.
	Rate int
	// Prefix limits the sweep to the keys that start with it.
	Prefix string
	// SpoolDir is where an old node that spools its listing writes it
	// (node.ScanOptions); "": os.TempDir().
	SpoolDir string
	// OverWritten reports whether a dump read at now may replace the
	// tombstones of writes before the migration's start (node.TombWritten):
	// it is past the handover. Nil: never.
	OverWritten func(now time.Time) bool
	// Redis: the nodes are Redis's, whose DUMP payloads end in a footer
	// (the RDB version and a checksum) that differs between versions of
	// the server, left out when copies are compared.
	Redis bool
	// Progress, when set, is called with the totals so far after each page
	// of keys, by one goroutine at a time.
	Progress func(Status)
	// BeforeCopy, when set, is called with the keys of each page after
	// they are read from the old owner and before they are copied.
	BeforeCopy func(keys []string)
	// Wrap makes the error recorded for a failed step, op "sweep_dump" or
	// "sweep_restore", of keys on node n (the client's *NodeError). Nil:
	// the error itself.
	Wrap func(op string, n ring.Node, keys []string, err error) error
}

// Sweep is one sweep's state, shared by the goroutines of its old nodes.
type Sweep struct {
	cfg Config

	mu     sync.Mutex
	status Status
	errs   map[string]error // the first failure of each old node, by address
}

// New returns a sweep with nothing done yet.
func New(cfg Config) *Sweep {
	sw := &Sweep{cfg: cfg, errs: map[string]error{}}
	sw.status.Rate = cfg.Rate // the limit it runs under, said in its status
	if cfg.Rate <= 0 {
		sw.status.Rate = -1
	}
	return sw
}

// Estimate counts olds as the nodes to sweep, and their keys (Status.Keys)
// as far as they can tell.
func (sw *Sweep) Estimate(ctx context.Context, olds []ring.Node) {
	sw.status.Nodes = len(olds)
	for _, n := range olds {
		if sn, ok := sw.cfg.Conns.Conn(n).(node.Sweeper); ok {
			if size, err := sn.Size(ctx); err == nil {
				sw.status.Keys += size
			}
		}
	}
}

// Status returns the totals so far.
func (sw *Sweep) Status() Status {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.status
}

// Done counts an old node swept to its end.
func (sw *Sweep) Done() { sw.add(func(s *Status) { s.NodesDone++ }) }

// Fail records err for old node n, keeping the first.
func (sw *Sweep) Fail(n ring.Node, err error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.fail(n, err)
}

func (sw *Sweep) fail(n ring.Node, err error) {
	if sw.errs[n.Addr] == nil {
		sw.errs[n.Addr] = err
	}
}

// Err returns the first failure recorded for old node n, nil for none.
func (sw *Sweep) Err(n ring.Node) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.errs[n.Addr]
}

// MaxUnreachable is how many pages in a row an old node may fail to read,
// not answering (node.Unreachable), before its sweep ends.
const MaxUnreachable = 3

// Node sweeps old node n to the end of its keys: node.ErrSweepUnsupported
// for a node that cannot list them, ErrWindowOver once the window ends,
// ctx's error once it is done, or the listing's failure. A page that
// fails to copy is counted Failed and recorded (Err), and the sweep goes
// on with the next, unless the old node did not answer the reads of
// MaxUnreachable pages in a row: then it ends with that failure.
func (sw *Sweep) Node(ctx context.Context, n ring.Node) error {
	sn, ok := sw.cfg.Conns.Conn(n).(node.Sweeper)
	if !ok {
		return node.ErrSweepUnsupported
	}
	var lim *rate.Limiter
	if sw.cfg.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(sw.cfg.Rate), PageSize)
	}
	unreachable := 0 // pages in a row the old node did not answer
	return sn.Scan(ctx, node.ScanOptions{Prefix: sw.cfg.Prefix, Page: PageSize, SpoolDir: sw.cfg.SpoolDir}, func(page []node.Item) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !sw.cfg.Migration.Backfilling(sw.cfg.Now()) {
			return ErrWindowOver
		}
		for left := len(page); lim != nil && left > 0; left -= PageSize {
			if err := lim.WaitN(ctx, min(left, PageSize)); err != nil {
				return wire.CtxErr(ctx, err)
			}
		}
		if err := sw.page(ctx, n, sn, page); err != nil && node.Unreachable(err) {
			// The old node stopped answering: its listing, spooled, may
			// hold many more pages, each of which would wait out the
			// timeouts in turn. After a few in a row its sweep ends.
			if unreachable++; unreachable == MaxUnreachable {
				return err
			}
		} else {
			unreachable = 0
		}
		if sw.cfg.Progress != nil {
			sw.mu.Lock()
			sw.cfg.Progress(sw.status)
			sw.mu.Unlock()
		}
		return nil
	})
}

// page copies the moved keys of one page listed on old node n, and returns
// the old node's failure to read them, if it failed (then recorded).
func (sw *Sweep) page(ctx context.Context, n ring.Node, sn node.Sweeper, page []node.Item) error {
	mig := sw.cfg.Migration
	cs := mig.Counters
	var moving []node.Item
	for _, it := range page {
		if replica.Keeps(mig.Old(), it.Key, n.Addr) && mig.Old().Locate(it.Key).Addr != mig.New().Locate(it.Key).Addr {
			moving = append(moving, it)
		}
	}
	sw.add(func(s *Status) {
		s.Scanned += int64(len(page))
		s.SkippedUnmoved += int64(len(page) - len(moving))
	})
	cs.SweepScanned.Add(int64(len(page)))
	cs.SweepSkippedUnmoved.Add(int64(len(page) - len(moving)))
	if len(moving) == 0 {
		return nil
	}
	// Read after the handover, a dump may replace writes' tombstones.
	over := sw.cfg.OverWritten != nil && sw.cfg.OverWritten(sw.cfg.Now())
	got, err := sn.Dump(ctx, moving)
	if err != nil {
		err = sw.wrap("sweep_dump", n, node.ItemKeys(moving), err)
		sw.failed(n, len(moving), err)
		return err
	}
	dst := fanout.New(sw.cfg.Conns)
	gone := 0
	for i, it := range got {
		if !it.Found {
			gone++
			continue
		}
		it.OverWritten = over
		dst.Add(mig.New().Locate(it.Key), it, i, false)
	}
	sw.add(func(s *Status) { s.Gone += int64(gone) })
	cs.SweepGone.Add(int64(gone))
	if sw.cfg.BeforeCopy != nil {
		sw.cfg.BeforeCopy(node.ItemKeys(moving))
	}
	dst.Run(func(b *fanout.Batch) error {
		sd, ok := b.Conn.(node.Sweeper)
		if !ok {
			return node.ErrSweepUnsupported
		}
		stored, err := sd.Restore(ctx, b.Items)
		if stored == nil {
			return err
		}
		var rest []node.Item // newer or buried, or failed with err
		copied := 0
		for i, ok := range stored {
			if ok {
				copied++
			} else {
				rest = append(rest, b.Items[i])
			}
		}
		sw.add(func(s *Status) { s.Copied += int64(copied) })
		cs.SweepCopied.Add(int64(copied))
		if err != nil {
			b.Items = rest // counted as failed below
			return err
		}
		same := sw.alreadyCopied(ctx, sd, rest)
		sw.add(func(s *Status) { s.AlreadyCopied += int64(same); s.SkippedNewer += int64(len(rest) - same) })
		cs.SweepAlreadyCopied.Add(int64(same))
		cs.SweepSkippedNewer.Add(int64(len(rest) - same))
		return nil
	})
	for _, b := range dst.List {
		if b.Err != nil {
			sw.failed(n, len(b.Items), sw.wrap("sweep_restore", b.Node, node.ItemKeys(b.Items), b.Err))
		}
	}
	return nil
}

// wrap is Config.Wrap.
func (sw *Sweep) wrap(op string, n ring.Node, keys []string, err error) error {
	if sw.cfg.Wrap == nil {
		return err
	}
	return sw.cfg.Wrap(op, n, keys, err)
}

// alreadyCopied reads again on their new owner the items it refused and
// returns how many it holds as they are (value and flags; on Redis the
// DUMP payload less its footer, the RDB version and checksum, which differ
// between server versions): copies made before. A failed read counts none.
// A value the new server re-encoded (a hash restored as another encoding)
// counts as another value.
func (sw *Sweep) alreadyCopied(ctx context.Context, sd node.Sweeper, refused []node.Item) int {
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
func (sw *Sweep) payload(v []byte) []byte {
	if sw.cfg.Redis && len(v) >= 10 {
		return v[:len(v)-10]
	}
	return v
}

// add applies f to the status under the lock.
func (sw *Sweep) add(f func(s *Status)) {
	sw.mu.Lock()
	f(&sw.status)
	sw.mu.Unlock()
}

// failed counts keys that could not be copied from old node n, and records
// the error; the sweep goes on with the next page.
func (sw *Sweep) failed(n ring.Node, keys int, err error) {
	sw.cfg.Migration.Counters.SweepFailed.Add(int64(keys))
	sw.mu.Lock()
	sw.status.Failed += int64(keys)
	sw.fail(n, err)
	sw.mu.Unlock()
}
