package mcnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/internal/wire"
	"github.com/shardcache/shardcache/internal/wire/memcache"
)

// TestObservedOps: every call tells the observer once, with the kind of
// call the client's statistics count it as, and the application's
// multi-key reads their keys found and missed.
func TestObservedOps(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, rec := newNode(t, s, Config{})
	ctx := t.Context()
	check := func(what string, want ...node.Op) {
		t.Helper()
		var got []node.Op
		for _, c := range rec.take() {
			got = append(got, c.op)
			if !c.hasCtx {
				t.Errorf("%s: observed without the caller's context", what)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: observed %v, want %v", what, got, want)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(n.Set(ctx, "a", []byte("1"), 0))
	check("Set", node.OpSet)
	must(n.Add(ctx, "b", []byte("2"), time.Hour))
	check("Add", node.OpAdd)
	if _, err := n.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Get(ctx, "absent"); err != node.ErrCacheMiss {
		t.Fatalf("Get of an absent key: %v, want node.ErrCacheMiss itself", err)
	}
	check("Get", node.OpGet, node.OpGet)
	if _, err := n.GetMulti(ctx, []string{"a", "b", "x"}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := n.GetMulti(ctx, []string{"a", "x"}, true); err != nil {
		t.Fatal(err)
	}
	check("GetMulti", node.OpGetMulti, node.OpGetMulti)
	if h, m := rec.keys(node.OpGetMulti); h != 3 || m != 2 {
		t.Errorf("GetMulti keys: %d found, %d missed; want 3 and 2", h, m)
	}
	must(n.SetMulti(ctx, []node.Item{{Key: "c", Value: []byte("3")}, {Key: "d", Value: []byte("4")}}))
	check("SetMulti", node.OpSetMulti)
	if st, err := n.AddMulti(ctx, []node.Item{{Key: "c", Value: []byte("x")}, {Key: "e", Value: []byte("5")}}); err != nil || !slices.Equal(st, []bool{false, true}) {
		t.Fatalf("AddMulti = %v, %v", st, err)
	}
	check("AddMulti", node.OpAddMulti)
	must(n.Delete(ctx, "e"))
	must(n.Delete(ctx, "e"))
	check("Delete", node.OpDelete, node.OpDelete)
	must(n.DeleteMulti(ctx, []string{"c", "x"}))
	check("DeleteMulti", node.OpDeleteMulti)
	if v, err := n.Incr(ctx, "n", 5); err != nil || v != 5 {
		t.Fatalf("Incr of a missing key = %d, %v", v, err)
	}
	check("Incr", node.OpIncr)
	must(n.Touch(ctx, "a", time.Hour))
	check("Touch", node.OpTouch)
	must(n.Ping(ctx))
	check("Ping", node.OpPing)
	if _, err := n.GetItem(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.GetAndTouch(ctx, "a", time.Hour); err != nil {
		t.Fatal(err)
	}
	check("GetItem, GetAndTouch", node.OpGet, node.OpGet)
	for _, op := range []node.StoreOp{node.StoreSet, node.StoreAdd, node.StoreReplace, node.StoreAppend, node.StorePrepend} {
		n.Store(ctx, op, node.Item{Key: "s", Value: []byte("v")})
	}
	check("Store", node.OpSet, node.OpAdd, node.OpOther, node.OpOther, node.OpOther)
	if _, err := n.IncrDecr(ctx, "n", 1, true); err != nil {
		t.Fatal(err)
	}
	check("IncrDecr", node.OpIncr)
	if found, err := n.DeleteFound(ctx, "s"); !found || err != nil {
		t.Fatalf("DeleteFound = %v, %v", found, err)
	}
	check("DeleteFound", node.OpDelete)
	if _, err := n.Size(ctx); err != nil {
		t.Fatal(err)
	}
	check("Size", node.OpSweep)
	must(n.Scan(ctx, node.ScanOptions{Page: 10}, func([]node.Item) error { return nil }))
	check("Scan", node.OpSweep)
	dumped, err := n.Dump(ctx, []node.Item{{Key: "a"}})
	must(err)
	check("Dump", node.OpSweep)
	if _, err := n.Restore(ctx, dumped); err != nil {
		t.Fatal(err)
	}
	check("Restore", node.OpSweep)
	if _, err := n.Exists(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	check("Exists", node.OpExists)
	// Like Redis's DUMP and EXISTS, the sweep's reads count no keys: the
	// hit rates are the application's reads'.
	for _, op := range []node.Op{node.OpGetMulti, node.OpSweep, node.OpExists} {
		if h, m := rec.keys(op); h != 0 || m != 0 {
			t.Errorf("Dump, Exists: %d keys found, %d missed counted as %v; want none", h, m, op)
		}
	}
	must(n.Add(ctx, "lease:a", []byte("tok"), time.Minute))
	rec.take()
	if _, err := n.StoreLeased(ctx, []node.Item{{Key: "a", Value: []byte("v")}}, []string{"lease:a"}, "tok"); err != nil {
		t.Fatal(err)
	}
	must(n.ReleaseLeases(ctx, []string{"lease:a"}, "tok"))
	check("leases", node.OpLease, node.OpLease)
	must(n.Flush(ctx))
	check("Flush", node.OpOther)
	rec.keys(node.OpGetMulti)
}

// TestItems: the item operations' semantics, as the client relies on them.
func TestItems(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, _ := newNode(t, s, Config{})
	ctx := t.Context()
	if err := n.Store(ctx, node.StoreSet, node.Item{Key: "k", Value: []byte("v"), Flags: 42, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	it, err := n.GetItem(ctx, "k")
	if err != nil || !it.Found || string(it.Value) != "v" || it.Flags != 42 || it.CAS == 0 {
		t.Fatalf("GetItem = %+v, %v", it, err)
	}
	if err := n.Store(ctx, node.StoreCAS, node.Item{Key: "k", Value: []byte("w"), CAS: it.CAS + 1}); err != node.ErrCASConflict {
		t.Errorf("CAS with a wrong id: %v, want node.ErrCASConflict", err)
	}
	if err := n.Store(ctx, node.StoreCAS, node.Item{Key: "k", Value: []byte("w"), CAS: it.CAS}); err != nil {
		t.Errorf("CAS with the right id: %v", err)
	}
	if err := n.Store(ctx, node.StoreCAS, node.Item{Key: "gone", Value: []byte("w"), CAS: 1}); err != node.ErrCacheMiss {
		t.Errorf("CAS of an absent key: %v, want node.ErrCacheMiss", err)
	}
	if err := n.Store(ctx, node.StoreAdd, node.Item{Key: "k", Value: []byte("x")}); err != node.ErrNotStored {
		t.Errorf("Add of a present key: %v", err)
	}
	if err := n.Store(ctx, node.StoreOp(99), node.Item{Key: "k"}); err == nil {
		t.Error("an unknown store operation passed")
	}
	if err := n.Touch(ctx, "absent", time.Hour); err != node.ErrCacheMiss {
		t.Errorf("Touch of an absent key: %v", err)
	}
	// Incr: Redis's semantics where Memcached allows.
	for _, tc := range []struct {
		key   string
		delta int64
		want  int64
	}{{"up", 3, 3}, {"up", 4, 7}, {"up", -10, 0}, {"down", -5, 0}} {
		if v, err := n.Incr(ctx, tc.key, tc.delta); err != nil || v != tc.want {
			t.Errorf("Incr(%s, %d) = %d, %v; want %d", tc.key, tc.delta, v, err, tc.want)
		}
	}
	if _, err := n.IncrDecr(ctx, "absent", 1, false); err != node.ErrCacheMiss {
		t.Errorf("IncrDecr of an absent key: %v", err)
	}
	// TTLs: a sub-second TTL is not "never"; past 30 days, a Unix time.
	if err := n.Set(ctx, "short", []byte("v"), 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := n.Set(ctx, "long", []byte("v"), 60*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	got, err := n.GetMulti(ctx, []string{"short", "long", "k"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].TTLKnown || got[0].TTL <= 0 || got[0].TTL > time.Second {
		t.Errorf("10 ms TTL read back as %v (known %v)", got[0].TTL, got[0].TTLKnown)
	}
	if d := got[1].TTL - 60*24*time.Hour; d < -5*time.Second || d > 5*time.Second {
		t.Errorf("60-day TTL read back as %v", got[1].TTL)
	}
	if !got[2].TTLKnown || got[2].TTL != 0 {
		t.Errorf("no expiry read back as %v (known %v)", got[2].TTL, got[2].TTLKnown)
	}
}

// TestValueLimit: the largest value the node takes for a key is the
// largest the server stores; one byte more is node.ErrValueTooLarge
// before any I/O, on every storage path, and not an outcome of the node's.
func TestValueLimit(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, rec := newNode(t, s, Config{})
	ctx := t.Context()
	max, err := n.Client().MaxValue(ctx, "key", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Set(ctx, "key", make([]byte, max), 0); err != nil {
		t.Fatalf("Set of the largest value (%d bytes): %v", max, err)
	}
	rec.take()
	over := make([]byte, max+1)
	dials := n.Client().Pool().Stats().Dials
	for name, err := range map[string]error{
		"Set":      n.Set(ctx, "key", over, 0),
		"Add":      n.Add(ctx, "key2", over, 0),
		"Store":    n.Store(ctx, node.StoreReplace, node.Item{Key: "key", Value: over}),
		"SetMulti": n.SetMulti(ctx, []node.Item{{Key: "key", Value: over}}),
		"AddMulti": func() error { _, err := n.AddMulti(ctx, []node.Item{{Key: "key", Value: over}}); return err }(),
		"Restore":  func() error { _, err := n.Restore(ctx, []node.Item{{Key: "key3", Value: over}}); return err }(),
	} {
		if !errors.Is(err, node.ErrValueTooLarge) {
			t.Errorf("%s of one byte more: %v, want node.ErrValueTooLarge", name, err)
		}
	}
	if n.Client().Pool().Stats().Dials != dials {
		t.Error("a refused value was sent")
	}
	if f := failures(rec.take()); f != 0 {
		t.Errorf("%d failures observed for values refused before any I/O", f)
	}
	// A server that refuses a value is ErrValueTooLarge too (a limit set
	// by hand, above the server's).
	o, _ := newNode(t, s, Config{MaxValueSize: 2 << 20})
	if err := o.Set(ctx, "key", over, 0); !errors.Is(err, node.ErrValueTooLarge) {
		t.Errorf("Set the server refuses: %v", err)
	}
}

// TestGetStalledNode: a Get to a node that has stopped answering
// (SIGSTOP) returns as soon as its context ends, with the context's
// error, long before the node's own timeout; a Get the node's own timeout
// ends returns its timeout. Once the node answers again, the next Gets
// read their own answers: the connection the abandoned request went out
// on was not reused.
func TestGetStalledNode(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	var armed atomic.Pointer[chan struct{}]
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return armedConn{Conn: conn, armed: &armed}, nil
	}
	patient, prec := newNode(t, s, Config{Dial: dial, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	hasty, hrec := newNode(t, s, Config{Dial: dial, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	if err := patient.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*Node{patient, hasty} { // a connection in each pool
		if v, err := n.Get(t.Context(), "k"); err != nil || string(v) != "v" {
			t.Fatalf("Get = %q, %v", v, err)
		}
	}
	resume := paused(t, s)
	get := func(n *Node, ctx context.Context) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := n.Get(ctx, "k")
			errc <- err
		}()
		return errc
	}
	sent := make(chan struct{})
	armed.Store(&sent)
	ctx, cancel := context.WithCancel(t.Context())
	errc := get(patient, ctx)
	select {
	case <-sent:
	case err := <-errc:
		t.Fatalf("Get on a stalled node returned %v before it sent its request", err)
	}
	cancel()
	waitErr(t, "Get cancelled on a stalled node", errc, context.Canceled)
	dctx, dcancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer dcancel()
	waitErr(t, "Get with a deadline on a stalled node", get(patient, dctx), context.DeadlineExceeded)
	prec.take()
	hrec.take()
	err := <-get(hasty, t.Context())
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get past the node's timeout = %v; want the node's own timeout", err)
	}
	if calls := hrec.take(); len(calls) != 1 || calls[0].err != err {
		t.Errorf("the node's timeout observed as %+v", calls)
	}
	resume()
	for _, n := range []*Node{patient, hasty} {
		for range 3 {
			if v, err := n.Get(t.Context(), "k"); err != nil || string(v) != "v" {
				t.Fatalf("Get once the node answers again = %q, %v", v, err)
			}
			if _, err := n.Get(t.Context(), "absent"); err != node.ErrCacheMiss {
				t.Fatalf("Get of an absent key once the node answers again = %v", err)
			}
		}
	}
}

// armedConn is a connection that, after a Write, closes the channel armed
// holds, if any: a request is then on its way to the server.
type armedConn struct {
	net.Conn
	armed *atomic.Pointer[chan struct{}]
}

func (c armedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if ch := c.armed.Swap(nil); ch != nil {
		close(*ch)
	}
	return n, err
}

// fillPool leaves idle connections in n's pool, by concurrent Gets and
// multi-gets of keys.
func fillPool(t *testing.T, n *Node, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, k := range keys {
				n.Get(t.Context(), k)
			}
			if _, err := n.GetMulti(t.Context(), keys, false); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n.Client().Pool().Stats().Idle < 2 {
		t.Fatalf("pool %+v: want idle connections", n.Client().Pool().Stats())
	}
}

// TestRestartedServer: connections pooled before the server restarted do
// not outlive it. Restarted quickly, between two calls: the first Get or
// multi-get to find one closed asks again on a new connection and drops
// the others. Restarted slowly, with the idle connections closed
// meanwhile (CloseIdle, as the client does when it marks the node down).
// Either way no call fails after, and none is observed as a failure.
func TestRestartedServer(t *testing.T) {
	for _, quick := range []bool{true, false} {
		t.Run(fmt.Sprintf("quick=%v", quick), func(t *testing.T) {
			s := testserver.Memcached(t, 1)[0]
			n, rec := newNode(t, s, Config{PoolSize: 8})
			keys := []string{"r1", "r2", "r3", "r4"}
			fillPool(t, n, keys)
			s.Stop()
			if !quick {
				n.CloseIdle()
			}
			s.Restart()
			rec.take()
			for round := range 30 {
				if _, err := n.Get(t.Context(), keys[round%len(keys)]); err != node.ErrCacheMiss {
					t.Fatalf("Get, round %d after the restart: %v; want a miss", round, err)
				}
				if _, err := n.GetMulti(t.Context(), keys, false); err != nil {
					t.Fatalf("GetMulti, round %d after the restart: %v", round, err)
				}
			}
			if f := failures(rec.take()); f != 0 {
				t.Errorf("%d failures observed after the restart", f)
			}
			if err := n.Set(t.Context(), "r1", []byte("v"), 0); err != nil {
				t.Fatal(err)
			}
			if v, err := n.Get(t.Context(), "r1"); err != nil || string(v) != "v" {
				t.Fatalf("Get after the restart = %q, %v", v, err)
			}
		})
	}
}

// sendAll sends each node its keys, then receives the answers in turn, on
// the caller's goroutine, as the client's GetMulti does.
func sendAll(ctx context.Context, nodes []*Node, keys [][]string) ([][]node.Answer, []error) {
	pending := make([]node.Pending, len(nodes))
	for i, n := range nodes {
		pending[i] = n.Send(ctx, keys[i])
	}
	out := make([][]node.Answer, len(nodes))
	errs := make([]error, len(nodes))
	for i, p := range pending {
		out[i] = make([]node.Answer, len(keys[i]))
		errs[i] = p.Recv(out[i])
	}
	return out, errs
}

// TestGetMultiStalledNode: a multi-get sent to three nodes, one of which
// has stopped answering (SIGSTOP) and is read first, costs the others
// nothing: their answers come back, the stalled node's error alone,
// whether its timeout or the caller's deadline ends the wait, and the
// healthy nodes observe no failure.
func TestGetMultiStalledNode(t *testing.T) {
	ss := testserver.Memcached(t, 3)
	var nodes []*Node
	var recs []*recorder
	keys := make([][]string, len(ss))
	for i, s := range ss {
		n, rec := newNode(t, s, Config{ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
		nodes, recs = append(nodes, n), append(recs, rec)
		for j := range 10 {
			k := fmt.Sprintf("n%d:%d", i, j)
			keys[i] = append(keys[i], k)
			if err := n.Set(t.Context(), k, []byte("v"+k), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	resume := paused(t, ss[0])
	defer resume()
	for _, deadline := range []time.Duration{0, 200 * time.Millisecond} {
		for round := range 3 {
			ctx := t.Context()
			if deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, deadline)
				defer cancel()
			}
			out, errs := sendAll(ctx, nodes, keys)
			if errs[0] == nil || errs[1] != nil || errs[2] != nil {
				t.Fatalf("deadline %v, round %d: errors %v; want the stalled node's alone", deadline, round, errs)
			}
			for i := 1; i < 3; i++ {
				for j, a := range out[i] {
					if !a.Found || string(a.Value) != "v"+keys[i][j] {
						t.Fatalf("deadline %v, round %d: node %d key %s: %+v", deadline, round, i, keys[i][j], a)
					}
				}
			}
		}
	}
	for i := 1; i < 3; i++ {
		if f := failures(recs[i].take()); f != 0 {
			t.Errorf("healthy node %d observed %d failures", i, f)
		}
	}
}

// TestLargeAnswerBehindStall: a node whose answer does not fit the
// sockets' buffers, read after a stalled node's, is neither failed nor
// blamed: its server, held back by flow control while the client waited,
// sends the rest once the client reads.
func TestLargeAnswerBehindStall(t *testing.T) {
	ss := testserver.Memcached(t, 2)
	// Both nodes have the same timeouts: a reader that waited for the
	// stalled node before reading the healthy one would see the healthy
	// node's deadline pass too. 2 s leaves room to read 12 MiB under
	// -race on a busy machine.
	timeouts := Config{ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}
	stalled, _ := newNode(t, ss[0], timeouts)
	healthy, rec := newNode(t, ss[1], timeouts)
	v := bytes.Repeat([]byte("x"), 512<<10)
	var big []node.Item
	var bigKeys []string
	for i := range 24 { // 12 MiB: more than the sockets buffer, little enough to read in time under -race on a busy machine
		k := "big:" + strconv.Itoa(i)
		big, bigKeys = append(big, node.Item{Key: k, Value: v}), append(bigKeys, k)
	}
	filler, _ := newNode(t, ss[1], Config{}) // long timeouts: the writes are not under test
	for i := 0; i < len(big); i += 8 {
		if err := filler.SetMulti(t.Context(), big[i:i+8]); err != nil {
			t.Fatal(err)
		}
	}
	rec.take()
	resume := paused(t, ss[0])
	defer resume()
	out, errs := sendAll(t.Context(), []*Node{stalled, healthy}, [][]string{{"k"}, bigKeys})
	if errs[0] == nil || errs[1] != nil {
		t.Fatalf("errors %v; want the stalled node's alone", errs)
	}
	for i, a := range out[1] {
		if !a.Found || len(a.Value) != len(v) {
			t.Fatalf("big key %d: found %v, %d bytes", i, a.Found, len(a.Value))
		}
	}
	if f := failures(rec.take()); f != 0 {
		t.Errorf("the healthy node observed %d failures", f)
	}
}

// TestPoolBound: under 64 callers mixing Get, Set and GetMulti, the
// server sees at most PoolSize connections from the node (stats
// curr_connections, less those before), sampled all along.
func TestPoolBound(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	const size = 4
	n, _ := newNode(t, s, Config{PoolSize: size})
	probe := memcache.New(memcache.Config{Config: wire.Config{Addr: s.Addr, Size: 1, ReadTimeout: 10 * time.Second}})
	defer probe.Close()
	conns := func() int {
		m, err := probe.Stats(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		c, _ := strconv.Atoi(m["curr_connections"])
		return c
	}
	base := conns() // the listener's, the probe's own
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = "bound:" + strconv.Itoa(i)
	}
	done := make(chan struct{})
	var peak int
	var sampled sync.WaitGroup
	sampled.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			peak = max(peak, conns()-base)
		}
	})
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for r := range 40 {
				k := keys[(g+r)%len(keys)]
				var err error
				switch (g + r) % 3 {
				case 0:
					_, err = n.Get(t.Context(), k)
				case 1:
					err = n.Set(t.Context(), k, []byte("v"), 0)
				case 2:
					_, err = n.GetMulti(t.Context(), keys, false)
				}
				if err != nil && err != node.ErrCacheMiss {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	sampled.Wait()
	st := n.Client().Pool().Stats()
	t.Logf("peak %d connections seen by the server, pool %+v", peak, st)
	if peak > size || peak == 0 {
		t.Errorf("the server saw up to %d connections from a node of PoolSize %d", peak, size)
	}
	if st.Dials > size || st.Waits == 0 {
		t.Errorf("pool %+v: want at most %d dials, and callers that waited", st, size)
	}
}

// TestPoolWaitContext: a caller that waits for a connection, all of them
// busy, returns when its context ends (not after PoolTimeout), without a
// connection or a failure of the node's.
func TestPoolWaitContext(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, _ := newNode(t, s, Config{PoolSize: 1, ReadTimeout: time.Minute, PoolTimeout: time.Minute})
	if err := n.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	resume := paused(t, s)
	busy := make(chan error, 1)
	go func() {
		_, err := n.Get(context.Background(), "k") // holds the one connection
		busy <- err
	}()
	waitFor(t, "the connection in use", func() bool { st := n.Client().Pool().Stats(); return st.Open == 1 && st.Idle == 0 })
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := n.Get(ctx, "k")
		errc <- err
	}()
	waitErr(t, "a Get waiting for a connection", errc, context.DeadlineExceeded)
	if st := n.Client().Pool().Stats(); st.Waits != 1 || st.Dials != 1 {
		t.Errorf("pool %+v: want one wait, one dial", st)
	}
	resume()
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
}

// TestCloseInFlight: Close ends the calls in flight, which fail with
// node.ErrClosed, and the calls after it.
func TestCloseInFlight(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, _ := newNode(t, s, Config{PoolSize: 2, ReadTimeout: time.Minute, PoolTimeout: time.Minute})
	if err := n.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	paused(t, s)
	errs := make(chan error, 3)
	for range 3 { // two in flight, one waiting for a connection
		go func() {
			_, err := n.Get(context.Background(), "k")
			errs <- err
		}()
	}
	waitFor(t, "two calls in flight and one waiting", func() bool {
		st := n.Client().Pool().Stats()
		return st.Open == 2 && st.Idle == 0 && st.Waits == 1
	})
	n.Close()
	for range 3 {
		waitErr(t, "a call at Close", errs, node.ErrClosed)
	}
	if _, err := n.Get(t.Context(), "k"); err != node.ErrClosed {
		t.Errorf("Get after Close: %v", err)
	}
}

// TestAuthAndTLS: a node logs in (memcached -Y) on each connection, over
// TLS when configured; a wrong password or an unknown certificate is
// node.ErrAuth.
func TestAuthAndTLS(t *testing.T) {
	ca := testserver.NewCA(t, "mcnode test CA")
	ss := testserver.SecureMemcached(t, 1, testserver.Security{Users: map[string]string{"cache": "s3cret"}, TLS: ca.Issue("127.0.0.1")})
	good, _ := newNode(t, ss[0], Config{Username: "cache", Password: "s3cret", TLS: ca.ClientConfig()})
	if err := good.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if v, err := good.Get(t.Context(), "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	bad, _ := newNode(t, ss[0], Config{Username: "cache", Password: "wrong", TLS: ca.ClientConfig()})
	_, err := bad.Get(t.Context(), "k")
	if !errors.Is(err, node.ErrAuth) || strings.Contains(err.Error(), "wrong") {
		t.Errorf("a wrong password: %v; want node.ErrAuth, without the password", err)
	}
	other := testserver.NewCA(t, "another CA")
	untrusted, _ := newNode(t, ss[0], Config{Username: "cache", Password: "s3cret", TLS: other.ClientConfig()})
	if _, err := untrusted.Get(t.Context(), "k"); !errors.Is(err, node.ErrAuth) {
		t.Errorf("an unknown certificate: %v; want node.ErrAuth", err)
	}
}

// TestGetAllocations: a Get through the node makes one allocation, its
// value, with a context that cannot be cancelled; a multi-get's values
// come from one arena.
func TestGetAllocations(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n := New(Config{Addr: s.Addr, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	defer n.Close()
	ctx := context.Background()
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = "alloc:" + strconv.Itoa(i)
		if err := n.Set(ctx, keys[i], []byte("a value of some bytes"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(100, func() { n.Get(ctx, keys[0]) }); a != 1 {
		t.Errorf("Get: %v allocations, want 1 (the value)", a)
	}
	out := make([]node.Answer, len(keys))
	if a := testing.AllocsPerRun(100, func() { n.Send(ctx, keys).Recv(out) }); a > 3 {
		t.Errorf("Send and Recv of %d keys: %v allocations, want 3 (the two Pendings, one arena)", len(keys), a)
	}
}

// TestTombstones: node.Bury's contract on a real memcached.
func TestTombstones(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, _ := newNode(t, s, Config{})
	nodetest.Tombstones(t, n, "tomb:")
}

// TestStoreLeased: a value loaded under a lease is stored only if its
// lease still holds the token, never over a value written meanwhile or a
// tombstone, and a lost lease's value is withdrawn without touching what
// another client wrote in its place.
func TestStoreLeased(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, _ := newNode(t, s, Config{})
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	lease := func(key, token string) string {
		must(n.Set(ctx, "lease:"+key, []byte(token), time.Minute))
		return "lease:" + key
	}
	store := func(key string, lkey string) bool {
		t.Helper()
		stored, err := n.StoreLeased(ctx, []node.Item{{Key: key, Value: []byte("loaded"), TTL: time.Minute}}, []string{lkey}, "tok")
		must(err)
		return stored[0]
	}
	// Ours: stored, the lease gone.
	if !store("a", lease("a", "tok")) {
		t.Fatal("a value under its lease was not stored")
	}
	if v, err := n.Get(ctx, "a"); err != nil || string(v) != "loaded" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if _, err := n.Get(ctx, "lease:a"); err != node.ErrCacheMiss {
		t.Errorf("the lease is still there after the store: %v", err)
	}
	// Lost (another token): withdrawn.
	if store("b", lease("b", "other")) {
		t.Fatal("a value under a lost lease was kept")
	}
	if _, err := n.Get(ctx, "b"); err != node.ErrCacheMiss {
		t.Errorf("a lost lease's value was not withdrawn: %v", err)
	}
	// A newer value, and a tombstone: neither overwritten.
	must(n.Set(ctx, "c", []byte("newer"), time.Minute))
	if store("c", lease("c", "tok")) {
		t.Error("a load was stored over a newer value")
	}
	if v, _ := n.Get(ctx, "c"); string(v) != "newer" {
		t.Errorf("the newer value became %q", v)
	}
	n.ExpectTombstones(time.Now().Add(time.Hour))
	if _, err := n.Bury(ctx, []string{"d"}, time.Minute, node.TombDeleted); err != nil {
		t.Fatal(err)
	}
	if store("d", lease("d", "other")) || store("d", lease("d", "tok")) {
		t.Error("a load was stored over a tombstone")
	}
	if it, err := n.mc.Get(ctx, "d"); err != nil || !isTomb(it.Value, it.Flags) {
		t.Errorf("the tombstone is gone after a lost lease's store: %+v, %v", it, err)
	}
}
