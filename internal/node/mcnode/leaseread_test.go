package mcnode

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/testserver"
)

// countingConn counts the writes a connection makes: a pipelined round
// trip is one flush, one write.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

func serverStat(t *testing.T, n *Node, name string) int64 {
	t.Helper()
	st, err := n.Client().Stats(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(st[name], 10, 64)
	if err != nil {
		t.Fatalf("stat %s = %q", name, st[name])
	}
	return v
}

var leaseRead = node.LeaseRead{Vivify: true, Lease: time.Minute}

// TestLeaseGetOneRoundTrip: a lease miss is one round trip (one write on
// the connection, one get and one set seen by the server); exactly one of
// many concurrent readers wins, the others find the lease held; every read
// of the node treats the placeholder as a miss.
func TestLeaseGetOneRoundTrip(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	var writes atomic.Int64
	var d net.Dialer
	n, _ := newNode(t, s, Config{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}})
	ctx := t.Context()
	if err := n.Ping(ctx); err != nil { // dialed, version asked
		t.Fatal(err)
	}
	stats, _ := newNode(t, s, Config{})
	gets, sets := serverStat(t, stats, "cmd_get"), serverStat(t, stats, "cmd_set")
	w0 := writes.Load()
	ans, err := n.LeaseGet(ctx, []string{"k"}, leaseRead)
	if err != nil {
		t.Fatal(err)
	}
	if !ans[0].Won || ans[0].Found || ans[0].CAS == 0 {
		t.Fatalf("first lease read = %+v, want won with a CAS id", ans[0])
	}
	if w := writes.Load() - w0; w != 1 {
		t.Errorf("a lease miss took %d writes, want 1 round trip", w)
	}
	dg, ds := serverStat(t, stats, "cmd_get")-gets, serverStat(t, stats, "cmd_set")-sets
	t.Logf("lease miss: 1 round trip, server saw %d get and %d set", dg, ds)
	if dg != 1 || ds != 1 {
		t.Errorf("server saw %d gets and %d sets for a lease miss, want 1 and 1", dg, ds)
	}

	// The herd: all held.
	var wg sync.WaitGroup
	var won, held atomic.Int32
	for range 50 {
		wg.Go(func() {
			a, err := n.LeaseGet(ctx, []string{"k"}, leaseRead)
			if err != nil {
				t.Error(err)
				return
			}
			if a[0].Won {
				won.Add(1)
			}
			if a[0].Held {
				held.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 0 || held.Load() != 50 {
		t.Fatalf("herd: %d won, %d held, want 0 and 50", won.Load(), held.Load())
	}

	// The placeholder reads as a miss everywhere.
	if _, err := n.Get(ctx, "k"); err != node.ErrCacheMiss {
		t.Errorf("Get of a placeholder: %v, want a miss", err)
	}
	for _, withTTL := range []bool{false, true} {
		items, err := n.GetMulti(ctx, []string{"k"}, withTTL)
		if err != nil || items[0].Found {
			t.Errorf("GetMulti(withTTL %v) of a placeholder: %+v, %v", withTTL, items, err)
		}
	}
	if _, err := n.GetItem(ctx, "k"); err != node.ErrCacheMiss {
		t.Errorf("GetItem of a placeholder: %v", err)
	}
	if ex, err := n.Exists(ctx, []string{"k"}); err != nil || ex[0] {
		t.Errorf("Exists of a placeholder: %v, %v", ex, err)
	}

	stored, err := n.LeaseStore(ctx, []node.Item{{Key: "k", Value: []byte("v"), TTL: time.Hour}}, ans, leaseRead)
	if err != nil || !stored[0] {
		t.Fatalf("LeaseStore = %v, %v", stored, err)
	}
	if v, err := n.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get after the store = %q, %v", v, err)
	}
	a, err := n.LeaseGet(ctx, []string{"k"}, leaseRead)
	if err != nil || !a[0].Found || a[0].Won || a[0].Held || string(a[0].Value) != "v" {
		t.Fatalf("lease read of a value = %+v, %v", a[0], err)
	}
}

// TestLeaseStoreAfterDelete: a Delete, a Set or a tombstone during the
// load makes the store under the lease fail; a lease released deletes
// its placeholder and only it.
func TestLeaseStoreAfterDelete(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, _ := newNode(t, s, Config{})
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		meddle func(key string) error
		want   string // what the key reads after the store, "" for a miss
	}{
		{"delete", func(k string) error { return n.Delete(ctx, k) }, ""},
		{"set", func(k string) error { return n.Set(ctx, k, []byte("newer"), time.Hour) }, "newer"},
		{"bury", func(k string) error { _, err := n.Bury(ctx, []string{k}, time.Hour, node.TombDeleted); return err }, ""},
	} {
		key := "k-" + tc.name
		ans, err := n.LeaseGet(ctx, []string{key}, leaseRead)
		if err != nil || !ans[0].Won {
			t.Fatalf("%s: %+v, %v", tc.name, ans, err)
		}
		if err := tc.meddle(key); err != nil {
			t.Fatal(err)
		}
		stored, err := n.LeaseStore(ctx, []node.Item{{Key: key, Value: []byte("stale"), TTL: time.Hour}}, ans, leaseRead)
		if err != nil || stored[0] {
			t.Fatalf("%s: the stale load was stored (%v, %v)", tc.name, stored, err)
		}
		v, err := n.Get(ctx, key)
		if string(v) != tc.want || (tc.want == "") != (err == node.ErrCacheMiss) {
			t.Fatalf("%s: key reads %q, %v; want %q", tc.name, v, err, tc.want)
		}
	}
	// Release: the placeholder goes, a value set since stays.
	ans, _ := n.LeaseGet(ctx, []string{"r1", "r2"}, leaseRead)
	if err := n.Set(ctx, "r2", []byte("set"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := n.LeaseRelease(ctx, []string{"r1", "r2"}, ans, leaseRead); err != nil {
		t.Fatal(err)
	}
	again, _ := n.LeaseGet(ctx, []string{"r1", "r2"}, leaseRead)
	if !again[0].Won || !again[1].Found || string(again[1].Value) != "set" {
		t.Fatalf("after the release: %+v", again)
	}
}

// TestLeaseGetRefresh: R hands the refresh of a value near its expiry to
// one reader; the others are served the value, stale.
func TestLeaseGetRefresh(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, _ := newNode(t, s, Config{})
	ctx := t.Context()
	if err := n.Set(ctx, "r", []byte("old"), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	rd := node.LeaseRead{Refresh: 10 * time.Second, Lease: time.Minute}
	a, err := n.LeaseGet(ctx, []string{"r"}, rd)
	if err != nil || !a[0].Found || a[0].Stale || a[0].Won {
		t.Fatalf("far from expiry: %+v, %v", a[0], err)
	}
	rd.Refresh = time.Minute
	var won, held atomic.Int32
	var wg sync.WaitGroup
	var winner node.LeaseAnswer
	var mu sync.Mutex
	for range 20 {
		wg.Go(func() {
			a, err := n.LeaseGet(ctx, []string{"r"}, rd)
			if err != nil || !a[0].Found || !a[0].Stale || string(a[0].Value) != "old" {
				t.Errorf("in the window: %+v, %v", a, err)
				return
			}
			if a[0].Won {
				won.Add(1)
				mu.Lock()
				winner = a[0]
				mu.Unlock()
			}
			if a[0].Held {
				held.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 || held.Load() != 19 {
		t.Fatalf("%d won, %d held; want 1 and 19", won.Load(), held.Load())
	}
	stored, err := n.LeaseStore(ctx, []node.Item{{Key: "r", Value: []byte("new"), TTL: time.Hour}}, []node.LeaseAnswer{winner}, rd)
	if err != nil || !stored[0] {
		t.Fatalf("refresh store = %v, %v", stored, err)
	}
	a, _ = n.LeaseGet(ctx, []string{"r"}, rd)
	if string(a[0].Value) != "new" || a[0].Stale {
		t.Fatalf("after the refresh: %+v", a[0])
	}
}

// TestLeaseGetNoMeta: a server without meta commands has no lease reads:
// node.ErrUnsupported, and the client takes Leaser's leases.
func TestLeaseGetNoMeta(t *testing.T) {
	var lines atomic.Int32
	n := fakeNode(t, Config{}, classic(map[string]string{}, &lines))
	if _, err := n.LeaseGet(t.Context(), []string{"k"}, leaseRead); err != node.ErrUnsupported {
		t.Fatalf("LeaseGet on a classic server: %v, want ErrUnsupported", err)
	}
}
