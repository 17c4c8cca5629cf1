package lease_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/lease"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/ring"
)

// waitFixture is a Waiter for key "k" on node a, whose client is n, with
// its counters and the leases it released.
type waitFixture struct {
	w        lease.Waiter
	waits    atomic.Int64
	errs     atomic.Int64
	released []*lease.Lease
	closed   bool
}

func newWait(n node.Node, meta bool) *waitFixture {
	f := &waitFixture{}
	a := ring.Node{Name: "a", Addr: "a:1"}
	f.w = lease.Waiter{
		Config: lease.Config{Term: time.Minute, MaxKeyLength: 250}, Conns: nodetest.Conns{"a:1": n}, Owner: a,
		Every: time.Millisecond, Meta: meta,
		Get:     func(ctx context.Context) ([]byte, error) { return n.Get(ctx, "k") },
		Release: func(_ context.Context, l *lease.Lease) { f.released = append(f.released, l) },
		Closed:  func() bool { return f.closed },
		Waits:   &f.waits, CacheErrors: &f.errs,
	}
	return f
}

// setLater sets k on m once the waiter f has counted its wait.
func setLater(f *waitFixture, m *nodetest.Map) {
	go func() {
		for f.waits.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		_ = m.Set(context.Background(), "k", []byte("loaded"), 0)
	}()
}

// TestWaitAdd: a lease taken with an add is the load's; a value found
// after the add answers, the lease just taken released; another's lease
// is waited on, counted once, until the value lands; a closed client
// loads nothing; an owner that fails leaves the load without a lease.
func TestWaitAdd(t *testing.T) {
	ctx := t.Context()
	m := nodetest.NewMap()
	f := newWait(m, false)
	got, err := f.w.Wait(ctx, "k")
	if err != nil || got.Lease == nil || got.Hit || string(m.Value(f.w.Key("k"))) != got.Lease.Token || m.TTL(f.w.Key("k")) != time.Minute {
		t.Fatalf("a free lease: %+v, %v; lease key %q", got, err, m.Value(f.w.Key("k")))
	}

	m = nodetest.NewMap()
	_ = m.Set(ctx, "k", []byte("v"), 0)
	f = newWait(m, false)
	got, err = f.w.Wait(ctx, "k")
	if err != nil || !got.Hit || string(got.Value) != "v" || got.At.IsZero() || len(f.released) != 1 || f.released[0].Token != string(m.Value(f.w.Key("k"))) {
		t.Fatalf("a value present: %+v, %v, released %v", got, err, f.released)
	}

	m = nodetest.NewMap()
	f = newWait(m, false)
	_ = m.Set(ctx, f.w.Key("k"), []byte("another"), 0)
	setLater(f, m)
	got, err = f.w.Wait(ctx, "k")
	if err != nil || !got.Hit || string(got.Value) != "loaded" || f.waits.Load() != 1 || f.errs.Load() != 0 {
		t.Fatalf("another's lease: %+v, %v, %d waits, %d errors", got, err, f.waits.Load(), f.errs.Load())
	}

	f.closed = true
	if _, err := f.w.Wait(ctx, "k"); err != node.ErrClosed {
		t.Fatalf("closed: %v", err)
	}

	f = newWait(node.NewFailing(node.ErrNodeDown, nil), false)
	got, err = f.w.Wait(ctx, "k")
	if err != nil || got.Lease != nil || got.Hit || f.errs.Load() != 2 || f.waits.Load() != 0 {
		t.Fatalf("owner down: %+v, %v, %d errors", got, err, f.errs.Load())
	}
}

// script is a node whose lease reads answer ans, then its last answer
// again, or fail with err.
type script struct {
	*nodetest.Map
	ans   []node.LeaseAnswer
	err   error
	reads int
}

func (s *script) LeaseGet(context.Context, []string, node.LeaseRead) ([]node.LeaseAnswer, error) {
	if s.err != nil {
		return nil, s.err
	}
	a := s.ans[min(s.reads, len(s.ans)-1)]
	s.reads++
	return []node.LeaseAnswer{a}, nil
}

func (s *script) LeaseStore(context.Context, []node.Item, []node.LeaseAnswer, node.LeaseRead) ([]bool, error) {
	return nil, node.ErrUnsupported
}

func (s *script) LeaseRelease(context.Context, []string, []node.LeaseAnswer, node.LeaseRead) error {
	return node.ErrUnsupported
}

// TestWaitRead: with Meta the read takes the lease; a value under
// another's lease answers with ServeStale and is waited for without,
// backing off; a tombstone loads without a lease; a lease won on a miss
// with Fallback answers the value Get finds elsewhere; an owner without
// lease reads, or whose reads are unsupported, takes the lease with an
// add; a read that fails loads without a lease.
func TestWaitRead(t *testing.T) {
	ctx := t.Context()
	m := nodetest.NewMap()
	f := newWait(reader{m, nil}, true)
	got, err := f.w.Wait(ctx, "k")
	if err != nil || got.Lease == nil || !got.Lease.Meta["k"].Won || string(m.Value(f.w.Key("k"))) != got.Lease.Token {
		t.Fatalf("a miss: %+v, %v", got, err)
	}

	m = nodetest.NewMap()
	f = newWait(reader{m, nil}, true)
	_ = m.Set(ctx, f.w.Key("k"), []byte("another"), 0)
	setLater(f, m)
	if got, err = f.w.Wait(ctx, "k"); err != nil || !got.Hit || string(got.Value) != "loaded" || f.waits.Load() != 1 {
		t.Fatalf("another's lease: %+v, %v, %d waits", got, err, f.waits.Load())
	}

	stale := node.LeaseAnswer{Value: []byte("stale"), Found: true, Held: true}
	fresh := node.LeaseAnswer{Value: []byte("fresh"), Found: true}
	s := &script{Map: nodetest.NewMap(), ans: []node.LeaseAnswer{stale, stale, fresh}}
	f = newWait(s, true)
	if got, err = f.w.Wait(ctx, "k"); err != nil || string(got.Value) != "fresh" || s.reads != 3 || f.waits.Load() != 1 {
		t.Fatalf("a value under another's lease: %+v, %v, %d reads", got, err, s.reads)
	}
	s = &script{Map: nodetest.NewMap(), ans: []node.LeaseAnswer{stale}}
	f = newWait(s, true)
	f.w.ServeStale = true
	if got, err = f.w.Wait(ctx, "k"); err != nil || string(got.Value) != "stale" || s.reads != 1 {
		t.Fatalf("ServeStale: %+v, %v, %d reads", got, err, s.reads)
	}
	s = &script{Map: nodetest.NewMap(), ans: []node.LeaseAnswer{{}}}
	f = newWait(s, true)
	if got, err = f.w.Wait(ctx, "k"); err != nil || got.Hit || got.Lease != nil {
		t.Fatalf("a tombstone: %+v, %v", got, err)
	}

	old := nodetest.NewMap()
	_ = old.Set(ctx, "k", []byte("on the old owner"), 0)
	f = newWait(&script{Map: nodetest.NewMap(), ans: []node.LeaseAnswer{{Won: true}}}, true)
	f.w.Fallback = true
	f.w.Get = func(ctx context.Context) ([]byte, error) { return old.Get(ctx, "k") }
	if got, err = f.w.Wait(ctx, "k"); err != nil || string(got.Value) != "on the old owner" || len(f.released) != 1 || !f.released[0].Meta["k"].Won {
		t.Fatalf("Fallback: %+v, %v, released %v", got, err, f.released)
	}

	for _, n := range []node.Node{nodetest.NewMap(), &script{Map: nodetest.NewMap(), err: node.ErrUnsupported}} {
		f = newWait(n, true)
		got, err = f.w.Wait(ctx, "k")
		if err != nil || got.Lease == nil || got.Lease.Meta != nil {
			t.Fatalf("%T without lease reads: %+v, %v", n, got, err)
		}
	}
	f = newWait(&script{Map: nodetest.NewMap(), err: errors.New("reset")}, true)
	if got, err = f.w.Wait(ctx, "k"); err != nil || got.Lease != nil || got.Hit || f.errs.Load() != 1 {
		t.Fatalf("a read that fails: %+v, %v, %d errors", got, err, f.errs.Load())
	}
}

// TestTake: with Meta, a read wins a miss's lease (its value then looked
// for elsewhere), answers a value, leaves another's lease to wait on, and
// fails the keys of an owner it could not read; an owner without lease
// reads has its leases taken with an add and its keys read after; a closed
// client answers nil.
func TestTake(t *testing.T) {
	ctx := t.Context()
	f, a, b := fleet()
	_ = a.Set(ctx, "a0", []byte("v0"), 0)
	_ = a.Set(ctx, f.Key("a2"), []byte("another"), 0)
	_ = b.Set(ctx, "b2", []byte("vb2"), 0)
	var errs atomic.Int64
	var elsewhere []string
	tk := lease.Taker{Fleet: f, Meta: true, CacheErrors: &errs,
		Gets: func(ctx context.Context, keys []string, token string) ([]node.LeaseAnswer, []bool, []bool, error) {
			ans, plain, failed, down := f.Gets(ctx, keys, token, true, 0)
			if len(down) > 0 {
				return ans, plain, failed, down[0].Err
			}
			return ans, plain, failed, nil
		},
		Elsewhere: func(_ context.Context, keys []string, found func(*node.Item)) {
			elsewhere = keys
			found(&node.Item{Key: "a1", Value: []byte("on the old owner"), Found: true})
		},
		Read: func(ctx context.Context, keys []string) (map[string][]byte, error) {
			out := map[string][]byte{}
			for _, k := range keys {
				if v := b.Value(k); v != nil {
					out[k] = v
				}
			}
			return out, nil
		},
	}
	keys := []string{"a0", "a1", "a2", "b1", "b2", "d1"}
	l := &lease.Lease{Token: "tok", Meta: map[string]node.LeaseAnswer{}}
	found, got, failed, err := tk.Take(ctx, keys, l)
	if !errors.Is(err, errBroken) || len(found) != 3 || string(found["a0"]) != "v0" || string(found["a1"]) != "on the old owner" || string(found["b2"]) != "vb2" {
		t.Fatalf("found %q, %v", found, err)
	}
	if want := []bool{false, true, false, true, true, false}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if want := []bool{false, false, false, false, false, true}; !slices.Equal(failed, want) {
		t.Fatalf("failed %v, want %v", failed, want)
	}
	if !slices.Equal(elsewhere, []string{"a1"}) || !l.Meta["a1"].Won || string(b.Value(f.Key("b1"))) != "tok" || errs.Load() != 0 {
		t.Fatalf("elsewhere %v, meta %+v, b1's lease %q, %d errors", elsewhere, l.Meta, b.Value(f.Key("b1")), errs.Load())
	}

	tk.Meta = false
	tk.Read = func(context.Context, []string) (map[string][]byte, error) { return nil, node.ErrClosed }
	if found, _, _, err := tk.Take(ctx, []string{"c1"}, &lease.Lease{Token: "t2"}); found != nil || err != node.ErrClosed || errs.Load() != 1 {
		t.Fatalf("closed: %v, %v, %d errors (the owner down counted)", found, err, errs.Load())
	}
}
