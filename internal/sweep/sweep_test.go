package sweep_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/internal/sweep"
	"github.com/shardcache/shardcache/ring"
)

// stepErr is a failure Wrap made: the step and its node.
type stepErr struct {
	op   string
	node ring.Node
	keys []string
	err  error
}

func (e *stepErr) Error() string { return fmt.Sprintf("%s on %s: %v", e.op, e.node.Addr, e.err) }
func (e *stepErr) Unwrap() error { return e.err }

func wrap(op string, n ring.Node, keys []string, err error) error {
	return &stepErr{op, n, keys, err}
}

// TestPagesCounted: every page is counted in the status and the
// migration's counters alike, Progress sees the totals after each page,
// and BeforeCopy each page's moved keys before they are copied.
func TestPagesCounted(t *testing.T) {
	kv := map[string]string{}
	for i := range 250 {
		kv[fmt.Sprintf("a:%03d", i)] = "stays"
		kv[fmt.Sprintf("b:%03d", i)] = "moves"
	}
	old, joined := newStore(kv), newStore(nil)
	mig, now := migrating()
	var progress []int64
	var before []string
	sw := sweep.New(sweep.Config{Migration: mig, Conns: nodetest.Conns{"a:1": old, "b:1": joined}, Now: now, Prefix: "b:",
		Progress:   func(s sweep.Status) { progress = append(progress, s.Scanned) },
		BeforeCopy: func(keys []string) { before = append(before, keys...) },
	})
	if err := sw.Node(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	st, cs := sw.Status(), mig.Counters.Snapshot()
	if st.Scanned != 250 || st.Copied != 250 || st.SkippedUnmoved != 0 || cs.SweepScanned != 250 || cs.SweepCopied != 250 {
		t.Fatalf("status %+v, counters %+v", st, cs)
	}
	if !slices.Equal(progress, []int64{100, 200, 250}) || len(before) != 250 || joined.value("b:249") != "moves" {
		t.Fatalf("progress %v, %d keys before copies, b:249 %q", progress, len(before), joined.value("b:249"))
	}
}

// TestDumpFails: a page the old node cannot read is counted failed and its
// error recorded, made by Wrap; the sweep goes on and ends without error.
func TestDumpFails(t *testing.T) {
	old := newStore(map[string]string{"a:1": "stays", "b:1": "moves", "b:2": "moves"})
	old.dumpErr = errors.New("i/o timeout")
	mig, now := migrating()
	sw := sweep.New(sweep.Config{Migration: mig, Conns: nodetest.Conns{"a:1": old, "b:1": newStore(nil)}, Now: now, Wrap: wrap})
	if err := sw.Node(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	var se *stepErr
	if err := sw.Err(a); !errors.As(err, &se) || se.op != "sweep_dump" || se.node != a || !slices.Equal(se.keys, []string{"b:1", "b:2"}) {
		t.Fatalf("recorded %v", err)
	}
	if st := sw.Status(); st.Failed != 2 || mig.Counters.SweepFailed.Load() != 2 {
		t.Fatalf("status %+v", st)
	}
}

// TestOldNodeStopsAnswering: when the old node no longer answers the reads
// of its listed keys, its sweep ends after MaxUnreachable pages in a row
// with that failure, instead of waiting out every page of the listing.
func TestOldNodeStopsAnswering(t *testing.T) {
	kv := map[string]string{}
	for i := range 1000 {
		kv[fmt.Sprintf("b:%03d", i)] = "moves"
	}
	old := newStore(kv)
	old.dumpErr = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	mig, now := migrating()
	sw := sweep.New(sweep.Config{Migration: mig, Conns: nodetest.Conns{"a:1": old, "b:1": newStore(nil)}, Now: now, Wrap: wrap})
	err := sw.Node(t.Context(), a)
	var se *stepErr
	if !errors.As(err, &se) || se.op != "sweep_dump" || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Node = %v; want the old node's read failure", err)
	}
	if st := sw.Status(); st.Scanned != sweep.MaxUnreachable*sweep.PageSize || st.Failed != st.Scanned {
		t.Fatalf("status %+v; want %d pages read and failed, then the end", st, sweep.MaxUnreachable)
	}
}

// TestRestoreFails: a new owner that cannot take the copies fails them,
// the error naming it; the first error recorded for the old node stays.
func TestRestoreFails(t *testing.T) {
	old := newStore(map[string]string{"b:1": "moves"})
	mig, now := migrating()
	down := node.NewFailing(node.ErrNodeDown, nil)
	sw := sweep.New(sweep.Config{Migration: mig, Conns: nodetest.Conns{"a:1": old, "b:1": down}, Now: now, Wrap: wrap})
	if err := sw.Node(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	sw.Fail(a, errors.New("later"))
	var se *stepErr
	if err := sw.Err(a); !errors.As(err, &se) || se.op != "sweep_restore" || se.node != b || !errors.Is(err, node.ErrNodeDown) {
		t.Fatalf("recorded %v", err)
	}
	if st := sw.Status(); st.Failed != 1 || st.Copied != 0 {
		t.Fatalf("status %+v", st)
	}
}

// TestNodeStops: a sweep stops at the window's end, and on a node that
// cannot list its keys.
func TestNodeStops(t *testing.T) {
	mig, _ := migrating()
	old := newStore(map[string]string{"b:1": "moves"})
	late := func() time.Time { return t0.Add(2 * time.Hour) }
	sw := sweep.New(sweep.Config{Migration: mig, Conns: nodetest.Conns{"a:1": old, "b:1": newStore(nil)}, Now: late})
	if err := sw.Node(t.Context(), a); !errors.Is(err, sweep.ErrWindowOver) || !errors.Is(err, sweep.ErrNoMigration) {
		t.Fatalf("past the window: %v", err)
	}
	sw = sweep.New(sweep.Config{Migration: mig, Conns: nodetest.Conns{"a:1": nil}, Now: late})
	if err := sw.Node(t.Context(), a); !errors.Is(err, node.ErrSweepUnsupported) {
		t.Fatalf("a node without Sweeper: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, now := migrating()
	sw = sweep.New(sweep.Config{Migration: mig, Conns: nodetest.Conns{"a:1": old, "b:1": newStore(nil)}, Now: now, Rate: 1})
	if err := sw.Node(ctx, a); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// TestRedisPayload: on Redis a copy made before is the same payload less
// its footer (another server version's RDB version and checksum); on
// Memcached the value must match whole.
func TestRedisPayload(t *testing.T) {
	const payload = "\x00\x05value"
	for _, redis := range []bool{true, false} {
		old := newStore(map[string]string{"b:1": payload + "\x0b\x00CHECKSUM"})
		joined := newStore(map[string]string{"b:1": payload + "\x0c\x00checksum"})
		mig, now := migrating()
		sw := sweep.New(sweep.Config{Migration: mig, Conns: nodetest.Conns{"a:1": old, "b:1": joined}, Now: now, Redis: redis})
		if err := sw.Node(t.Context(), a); err != nil {
			t.Fatal(err)
		}
		st := sw.Status()
		if redis && st.AlreadyCopied != 1 || !redis && st.SkippedNewer != 1 {
			t.Fatalf("Redis %v: %+v", redis, st)
		}
	}
}
