package lease_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/lease"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/ring"
)

// TestKey: a lease key fits the backend's key limit, however long the key.
func TestKey(t *testing.T) {
	cfg := lease.Config{MaxKeyLength: 250} // Memcached's
	if got := cfg.Key("user:42"); got != "shardcache:lease:user:42" {
		t.Fatalf("Key = %q", got)
	}
	long := string(make([]byte, 0, 250))
	for len(long) < 250 {
		long += "k"
	}
	if got := cfg.Key(long); len(got) > 250 || got == cfg.Key(long[:249]) {
		t.Fatalf("Key of a 250-byte key = %q (%d bytes)", got, len(got))
	}
	if got := cfg.Keys([]string{"a", "b"}); !slices.Equal(got, []string{lease.Prefix + "a", lease.Prefix + "b"}) {
		t.Fatalf("Keys = %q", got)
	}
}

// reader is a node with lease reads, as Redis's script keeps them: a miss
// read with Vivify takes the lease key if it is free (Won), or finds it
// taken (Held). With err, every read fails with it.
type reader struct {
	*nodetest.Map
	err error
}

func (r reader) LeaseGet(ctx context.Context, keys []string, rd node.LeaseRead) ([]node.LeaseAnswer, error) {
	if r.err != nil {
		return nil, r.err
	}
	ans := make([]node.LeaseAnswer, len(keys))
	for i, k := range keys {
		if v := r.Value(k); v != nil {
			ans[i] = node.LeaseAnswer{Value: v, Found: true}
			continue
		}
		if !rd.Vivify {
			continue
		}
		if r.Add(ctx, rd.LeaseKeys[i], []byte(rd.Token), rd.Lease) == nil {
			ans[i].Won = true
		} else {
			ans[i].Held = true
		}
	}
	return ans, nil
}

func (r reader) LeaseStore(ctx context.Context, items []node.Item, _ []node.LeaseAnswer, rd node.LeaseRead) ([]bool, error) {
	return r.StoreLeased(ctx, items, rd.LeaseKeys, rd.Token)
}

func (r reader) LeaseRelease(ctx context.Context, _ []string, _ []node.LeaseAnswer, rd node.LeaseRead) error {
	return r.ReleaseLeases(ctx, rd.LeaseKeys, rd.Token)
}

// fleet returns a fleet over four nodes: a with lease reads, b without, c
// held down (a stand-in, without them), d with lease reads that fail; key
// k lives on the node named by its first letter.
func fleet() (lease.Fleet, *nodetest.Map, *nodetest.Map) {
	a, b := nodetest.NewMap(), nodetest.NewMap()
	cs := nodetest.Conns{"a:1": reader{a, nil}, "b:1": b, "c:1": node.NewFailing(node.ErrNodeDown, nil), "d:1": reader{nodetest.NewMap(), errBroken}}
	return lease.Fleet{
		Config: lease.Config{Term: time.Minute, MaxKeyLength: 250},
		Conns:  cs,
		Owner:  func(k string) ring.Node { return ring.Node{Name: k[:1], Addr: k[:1] + ":1"} },
	}, a, b
}

// TestAcquireOwnerDown: a key whose owner is down is neither got nor held
// by another: failed, to be loaded without a lease; each owner that failed
// counts once, and the others' leases are taken with Term.
func TestAcquireOwnerDown(t *testing.T) {
	f, a, _ := fleet()
	got, failed, errs := f.Acquire(t.Context(), []string{"a1", "c1", "b1", "c2"}, "tok")
	if !slices.Equal(got, []bool{true, false, true, false}) || !slices.Equal(failed, []bool{false, true, false, true}) || errs != 1 {
		t.Fatalf("Acquire = got %v, failed %v, %d errors", got, failed, errs)
	}
	if string(a.Value(f.Key("a1"))) != "tok" || a.TTL(f.Key("a1")) != time.Minute {
		t.Fatalf("lease key of a1 = %q for %v", a.Value(f.Key("a1")), a.TTL(f.Key("a1")))
	}
}

// errBroken is the failure of node d's lease reads.
var errBroken = errors.New("connection reset")

// TestGets: a read on an owner with lease reads wins a miss's lease and
// finds another's held; an owner without them (a node held down among
// them) is plain, to be read as keys are; one whose read fails is handed
// back with its error.
func TestGets(t *testing.T) {
	ctx := t.Context()
	f, a, _ := fleet()
	_ = a.Set(ctx, "a0", []byte("v"), 0)
	_ = a.Set(ctx, f.Key("a2"), []byte("other"), 0)
	ans, plain, failed, down := f.Gets(ctx, []string{"a0", "a1", "a2", "b1", "c1", "d1"}, "tok", true, 0)
	if !ans[0].Found || string(ans[0].Value) != "v" || !ans[1].Won || !ans[2].Held || ans[2].Won {
		t.Fatalf("answers %+v", ans)
	}
	if !slices.Equal(plain, []bool{false, false, false, true, true, false}) || !slices.Equal(failed, []bool{false, false, false, false, false, true}) {
		t.Fatalf("plain %v, failed %v", plain, failed)
	}
	if len(down) != 1 || down[0].Node.Addr != "d:1" || down[0].Err != errBroken || !slices.Equal(down[0].Keys, []string{"d1"}) {
		t.Fatalf("down %+v", down)
	}
}

// TestStoreBothKinds: one batch holding keys of both kinds of lease (a
// topology applied since brought them together) stores each through its
// own kind, and only while the lease holds.
func TestStoreBothKinds(t *testing.T) {
	ctx := t.Context()
	f, a, _ := fleet()
	l := &lease.Lease{Token: "tok", Meta: map[string]node.LeaseAnswer{}}
	ans, _, _, _ := f.Gets(ctx, []string{"a1"}, l.Token, true, 0) // won by the read
	l.Meta["a1"] = ans[0]
	if got, _, _ := f.Acquire(ctx, []string{"a2", "a3"}, l.Token); !slices.Equal(got, []bool{true, true}) {
		t.Fatalf("Acquire = %v", got)
	}
	_ = a.Delete(ctx, f.Key("a3")) // lost: a Delete cleared it
	bs := fanout.New(f.Conns)
	for i, k := range []string{"a1", "a2", "a3"} {
		bs.Add(f.Owner(k), node.Item{Key: k, Value: []byte("v" + k)}, i, false)
	}
	kept := make([]bool, 3)
	bs.Run(func(b *fanout.Batch) error { return f.Store(ctx, b, l, kept) })
	if bs.List[0].Err != nil || !slices.Equal(kept, []bool{true, true, false}) {
		t.Fatalf("Store: kept %v, %v", kept, bs.List[0].Err)
	}
	if a.Value("a3") != nil || string(a.Value("a1")) != "va1" {
		t.Fatalf("a1 %q, a3 %q", a.Value("a1"), a.Value("a3"))
	}
}

// TestStoreWithoutLeaseReads: a lease won by a read cannot be stored on a
// node without lease reads (the owner changed to one held down): nothing
// is kept, and the error says why.
func TestStoreWithoutLeaseReads(t *testing.T) {
	f, _, _ := fleet()
	l := lease.Won("tok", "c1", node.LeaseAnswer{Won: true})
	bs := fanout.New(f.Conns)
	bs.Add(f.Owner("c1"), node.Item{Key: "c1", Value: []byte("v")}, 0, false)
	kept := []bool{true}
	if err := f.Store(t.Context(), bs.List[0], l, kept); !errors.Is(err, node.ErrUnsupported) || kept[0] {
		t.Fatalf("Store on a stand-in: %v, kept %v", err, kept)
	}
}

// TestReleaseAndClear: Release gives up only this lease's keys, of both
// kinds, and counts the owners it could not reach; Clear deletes any
// holder's and hands back the owners that failed.
func TestReleaseAndClear(t *testing.T) {
	ctx := t.Context()
	f, a, b := fleet()
	l := &lease.Lease{Token: "tok", Meta: map[string]node.LeaseAnswer{}}
	ans, _, _, _ := f.Gets(ctx, []string{"a1"}, l.Token, true, 0)
	l.Meta["a1"] = ans[0]
	f.Acquire(ctx, []string{"b1"}, l.Token)
	f.Acquire(ctx, []string{"b2"}, "another")
	if errs := f.Release(ctx, []string{"a1", "b1", "b2", "c1"}, l); errs != 1 {
		t.Fatalf("Release: %d errors, want the down owner's", errs)
	}
	if a.Value(f.Key("a1")) != nil || b.Value(f.Key("b1")) != nil || string(b.Value(f.Key("b2"))) != "another" {
		t.Fatalf("after Release: a1 %q, b1 %q, b2 %q", a.Value(f.Key("a1")), b.Value(f.Key("b1")), b.Value(f.Key("b2")))
	}
	down := f.Clear(ctx, []string{"b2", "c1"})
	if b.Value(f.Key("b2")) != nil || len(down) != 1 || !slices.Equal(down[0].Keys, []string{f.Key("c1")}) {
		t.Fatalf("after Clear: b2 %q, down %+v", b.Value(f.Key("b2")), down)
	}
}

// TestRetry: a wait ends after Every, again on the same timer, or at once
// with the context's error.
func TestRetry(t *testing.T) {
	r := lease.Retry{Every: time.Millisecond}
	defer r.Stop()
	if err := r.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.Backoff(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	slow := lease.Retry{Every: time.Hour}
	defer slow.Stop()
	if err := slow.Backoff(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Backoff with a cancelled context: %v", err)
	}
}
