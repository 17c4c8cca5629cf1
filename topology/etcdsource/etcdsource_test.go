package etcdsource

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/topofile"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newClient connects to a real etcd started for the test.
func newClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// nodes returns n nodes named c0.. on made-up addresses.
func nodes(n int) []ring.Node {
	ns := make([]ring.Node, n)
	for i := range ns {
		ns[i] = ring.Node{Name: "c" + string(rune('0'+i)), Addr: "10.0.0." + string(rune('1'+i)) + ":11211", Weight: 1}
	}
	return ns
}

// next receives an update within d, failing the test otherwise.
func next(t *testing.T, ch <-chan topology.Update, d time.Duration) topology.Update {
	t.Helper()
	select {
	case u, ok := <-ch:
		if !ok {
			t.Fatal("the stream closed")
		}
		return u
	case <-time.After(d):
		t.Fatalf("no update within %v", d)
	}
	return topology.Update{}
}

func TestPublishWatch(t *testing.T) {
	srv := testserver.Etcd(t)
	src := &Source{Client: newClient(t, srv.Addr), Key: "/shardcache/test"}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	if _, err := src.Get(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an absent key: %v, want ErrNotFound", err)
	}
	ch := src.Watch(ctx)
	if u := next(t, ch, 5*time.Second); !errors.Is(u.Err, ErrNotFound) || u.Topology != nil {
		t.Fatalf("first update of an absent key: %+v, want ErrNotFound and no topology", u)
	}

	first := &topology.Topology{Nodes: nodes(4)}
	sent := time.Now()
	rev1, err := src.Publish(ctx, first, 0)
	if err != nil {
		t.Fatal(err)
	}
	u := next(t, ch, time.Second)
	t.Logf("publish to receipt: %v", time.Since(sent))
	if u.Err != nil || u.Topology.Version != rev1 || !u.Topology.Equal(first) {
		t.Fatalf("update %+v, want version %d and %v", u, rev1, first.Nodes)
	}

	// A migration, published on top of the revision read.
	start := time.Now().Add(time.Minute).Truncate(time.Second)
	second := &topology.Topology{Nodes: nodes(5), Migration: &topology.Migration{From: nodes(4), Start: start, Window: time.Hour}}
	rev2, err := src.Publish(ctx, second, rev1)
	if err != nil {
		t.Fatal(err)
	}
	u = next(t, ch, time.Second)
	if u.Err != nil || u.Topology.Version != rev2 || rev2 <= rev1 || !u.Topology.Migration.Start.Equal(start) || u.Topology.Migration.Window != time.Hour {
		t.Fatalf("update %+v, want version %d with the migration", u, rev2)
	}

	// A second publisher working from revision 1 loses.
	if _, err := src.Publish(ctx, &topology.Topology{Nodes: nodes(3)}, rev1); !errors.Is(err, ErrConflict) {
		t.Fatalf("Publish on a stale revision: %v, want ErrConflict", err)
	}
	if _, err := src.Publish(ctx, &topology.Topology{Nodes: nodes(3)}, 0); !errors.Is(err, ErrConflict) {
		t.Fatalf("Publish of a new key over an existing one: %v, want ErrConflict", err)
	}
	// Refused topologies are not written.
	if _, err := src.Publish(ctx, &topology.Topology{Nodes: nodes(2)}, rev2); !errors.Is(err, topology.ErrTooMuchRemoved) {
		t.Fatalf("Publish removing 3 of 5 nodes: %v, want ErrTooMuchRemoved", err)
	}
	if got, err := src.Get(ctx); err != nil || got.Version != rev2 {
		t.Fatalf("Get after the refusals: %v, %v; want version %d", got, err, rev2)
	}

	// A bad value written by hand is an error, and a deleted key too; the
	// stream goes on.
	if _, err := src.Client.Put(ctx, src.Key, `[{"addr": "h:1", "wieght": 2}]`); err != nil {
		t.Fatal(err)
	}
	if u := next(t, ch, time.Second); !errors.Is(u.Err, topofile.ErrParse) || u.Topology != nil {
		t.Fatalf("update of a bad value: %+v, want ErrParse", u)
	}
	if _, err := src.Client.Delete(ctx, src.Key); err != nil {
		t.Fatal(err)
	}
	if u := next(t, ch, time.Second); !errors.Is(u.Err, ErrDeleted) || u.Topology != nil {
		t.Fatalf("update of a deleted key: %+v, want ErrDeleted", u)
	}
	rev3, err := src.Publish(ctx, first, 0)
	if err != nil {
		t.Fatal(err)
	}
	if u := next(t, ch, time.Second); u.Err != nil || u.Topology.Version != rev3 {
		t.Fatalf("update %+v, want version %d", u, rev3)
	}
	cancel()
	for range ch { // closed once ctx is done
	}
}

// TestPublishOverBadValue: a value at the key that does not parse (written
// by hand, by another tool) leaves Publish nothing to check a change
// against, while every process checks it against the last topology it
// received: Publish refuses with ErrBadCurrent, writing nothing, unless
// told to overwrite; then it checks the change against the topology given
// as running, and refuses what the processes would refuse.
func TestPublishOverBadValue(t *testing.T) {
	srv := testserver.Etcd(t)
	src := &Source{Client: newClient(t, srv.Addr), Key: "/shardcache/bad"}
	ctx := t.Context()
	running := &topology.Topology{Nodes: nodes(4)}
	if _, err := src.Publish(ctx, running, 0); err != nil {
		t.Fatal(err)
	}
	put, err := src.Client.Put(ctx, src.Key, `{"nodes": [{"addr": "h:1", "wieght": 2}]}`)
	if err != nil {
		t.Fatal(err)
	}
	bad := put.Header.Revision
	unchanged := func(what string) {
		t.Helper()
		if _, err := src.Get(ctx); !errors.Is(err, ErrBadValue) || !strings.Contains(err.Error(), fmt.Sprintf("revision %d", bad)) {
			t.Fatalf("after %s the key holds %v, want the bad value of revision %d", what, err, bad)
		}
	}

	// Removing 3 of the 4 nodes the processes run: refused, not written.
	_, err = src.Publish(ctx, &topology.Topology{Nodes: nodes(1)}, bad)
	if !errors.Is(err, ErrBadCurrent) || !errors.Is(err, ErrBadValue) || !errors.Is(err, topofile.ErrParse) || !strings.Contains(err.Error(), "wieght") {
		t.Fatalf("Publish over a bad value: %v, want ErrBadCurrent wrapping the parse error", err)
	}
	unchanged("the refusal")

	// Told to overwrite, it checks against the topology the processes run.
	_, err = src.Publish(ctx, &topology.Topology{Nodes: nodes(1)}, bad, OverwriteBadValue(running))
	if !errors.Is(err, topology.ErrTooMuchRemoved) {
		t.Fatalf("Publish removing 3 of the 4 running nodes over a bad value: %v, want ErrTooMuchRemoved", err)
	}
	unchanged("the overwrite refused")
	start := time.Now().Add(time.Minute).Truncate(time.Second)
	grown := &topology.Topology{Nodes: nodes(5), Migration: &topology.Migration{From: nodes(4), Start: start, Window: time.Hour}}
	rev, err := src.Publish(ctx, grown, bad, OverwriteBadValue(running))
	if err != nil {
		t.Fatalf("Publish of a migration from the running nodes over a bad value: %v", err)
	}
	if got, err := src.Get(ctx); err != nil || got.Version != rev || !got.Equal(grown) {
		t.Fatalf("after the overwrite: %+v, %v; want version %d with 5 nodes", got, err, rev)
	}

	// Over a value that parses, the option checks against that value.
	if _, err := src.Publish(ctx, &topology.Topology{Nodes: nodes(1)}, rev, OverwriteBadValue(nil)); !errors.Is(err, topology.ErrTooMuchRemoved) {
		t.Fatalf("Publish with OverwriteBadValue over a valid value removing 4 of 5 nodes: %v, want ErrTooMuchRemoved", err)
	}
}

// TestWatchSurvivesRestart checks that a watcher reports the server's
// loss and then delivers what was published while it was away.
func TestWatchSurvivesRestart(t *testing.T) {
	srv := testserver.Etcd(t)
	src := &Source{Client: newClient(t, srv.Addr), Key: "/shardcache/restart", Retry: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rev1, err := src.Publish(ctx, &topology.Topology{Nodes: nodes(4)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ch := src.Watch(ctx)
	if u := next(t, ch, 5*time.Second); u.Err != nil || u.Topology.Version != rev1 {
		t.Fatalf("first update %+v, want version %d", u, rev1)
	}
	srv.Restart() // keeps the data
	rev2, err := src.Publish(ctx, &topology.Topology{Nodes: nodes(5)}, rev1)
	if err != nil {
		t.Fatal(err)
	}
	for {
		u := next(t, ch, 10*time.Second)
		if u.Err != nil {
			t.Logf("while etcd restarted: %v", u.Err)
			continue
		}
		if u.Topology.Version != rev2 || len(u.Topology.Nodes) != 5 {
			t.Fatalf("update %+v, want version %d with 5 nodes", u, rev2)
		}
		break
	}
	cancel()
	for range ch {
	}
}

func TestRegisterStatus(t *testing.T) {
	srv := testserver.Etcd(t)
	cli := newClient(t, srv.Addr)
	src := &Source{Client: cli, Key: "/shardcache/status"}
	ctx := t.Context()
	rev1, err := src.Publish(ctx, &topology.Topology{Nodes: nodes(4)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := src.Publish(ctx, &topology.Topology{Nodes: nodes(5)}, rev1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Register(ctx, "a/b", rev2, 0); !errors.Is(err, ErrBadID) {
		t.Fatalf("Register of id a/b: %v, want ErrBadID", err)
	}
	var regs []*Registration
	for _, id := range []string{"p1", "p2", "p3"} {
		r, err := src.Register(ctx, id, rev2, 0)
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, r)
	}
	if err := regs[2].Set(ctx, rev1); err != nil { // p3 still runs the old one
		t.Fatal(err)
	}

	// p4 has its own connection, which dies without closing its lease, as
	// a killed process's does: it stays until the lease expires.
	cli4 := newClient(t, srv.Addr)
	lost, err := (&Source{Client: cli4, Key: src.Key}).Register(ctx, "p4", rev1, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, err := src.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := "2 processes on version " + itoa(rev2) + ", 2 still on " + itoa(rev1)
	if st.Version != rev2 || st.String() != want || st.Count(rev2) != 2 {
		t.Fatalf("Status %+v = %q, want %q", st, st, want)
	}

	// Closing a registration removes it at once.
	if err := regs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = src.Status(ctx); err != nil || st.Processes["p1"] != 0 || len(st.Processes) != 3 {
		t.Fatalf("Status after p1 closed: %+v, %v", st, err)
	}

	// p4's process dies: the watch on the prefix sees its entry deleted when
	// the lease expires.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := cli.Watch(wctx, src.processes()+"p4", clientv3.WithRev(st.Revision+1))
	_ = lost // its keep-alives stop with its client
	died := time.Now()
	cli4.Close()
	for wr := range events {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		if len(wr.Events) > 0 && wr.Events[0].Type == clientv3.EventTypeDelete {
			break
		}
	}
	t.Logf("lease of 2 s gone %v after its client closed", time.Since(died))
	if st, err = src.Status(ctx); err != nil || len(st.Processes) != 2 {
		t.Fatalf("Status after p4 died: %+v, %v", st, err)
	}
	if want := "1 process on version " + itoa(rev2) + ", 1 still on " + itoa(rev1); st.String() != want {
		t.Fatalf("Status = %q, want %q", st, want)
	}
}

func itoa(n int64) string { return fmt.Sprint(n) }

// BenchmarkPublishToReceipt measures a Publish (read, validate, compare and
// write) until a watcher of the key has received the topology.
func BenchmarkPublishToReceipt(b *testing.B) {
	srv := testserver.Etcd(b)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	src := &Source{Client: cli, Key: "/shardcache/bench"}
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	rev, err := src.Publish(ctx, &topology.Topology{Nodes: nodes(4)}, 0)
	if err != nil {
		b.Fatal(err)
	}
	ch := src.Watch(ctx)
	<-ch
	for i := 0; b.Loop(); i++ {
		if rev, err = src.Publish(ctx, &topology.Topology{Nodes: nodes(4 + i%2)}, rev); err != nil {
			b.Fatal(err)
		}
		if u := <-ch; u.Err != nil || u.Topology.Version != rev {
			b.Fatalf("update %+v, want version %d", u, rev)
		}
	}
	cancel()
	for range ch {
	}
}
