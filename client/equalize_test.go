package client

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/shardcache/shardcache/ring"
)

// TestEqualize checks that Options.Equalize places keys as
// ring.New(nodes, ring.WithEqualize(tolerance)) does, on every ring the
// client builds (New, MigrateFrom, Reshard), and that a bad tolerance is
// ErrBadOptions. It dials nothing.
func TestEqualize(t *testing.T) {
	const tol = 0.005
	fleet := func(n int) []ring.Node {
		ns := make([]ring.Node, n)
		for i := range ns {
			ns[i] = ring.Node{Name: fmt.Sprintf("cache-%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1+i)}
		}
		return ns
	}
	from, to := fleet(8), fleet(9)
	// The reference rings, built once per node set: an equalized ring is
	// the expensive part of this test, most of all under -race.
	type rings struct{ want, classic *ring.Ring }
	ref := map[int]rings{}
	for _, nodes := range [][]ring.Node{from, to} {
		want, err := ring.New(nodes, ring.WithEqualize(tol))
		if err != nil {
			t.Fatal(err)
		}
		classic, err := ring.New(nodes)
		if err != nil {
			t.Fatal(err)
		}
		if ring.Moved(classic, want) == 0 {
			t.Fatalf("%d nodes: the equalized ring places keys as the classic one: the test proves nothing", len(nodes))
		}
		ref[len(nodes)] = rings{want, classic}
	}
	same := func(what string, got ring.Locator, nodes []ring.Node) {
		t.Helper()
		want := ref[len(nodes)].want
		r, ok := got.(*ring.Ring)
		if !ok {
			t.Fatalf("%s: placement %T, want a *ring.Ring", what, got)
		}
		if moved := ring.Moved(r, want); r.Tolerance() != tol || moved != 0 {
			t.Errorf("%s: tolerance %v, %.4f%% of keys placed apart from ring.New(nodes, ring.WithEqualize(%v))", what, r.Tolerance(), 100*moved, tol)
		}
	}

	// No server listens at these addresses: placement only.
	c, err := New(Options{Nodes: from, Equalize: tol, SkipEmptyCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	same("New", c.state.Load().placement, from)
	want := ref[len(from)].want
	for i := range 2000 {
		if key := fmt.Sprintf("key-%d", i); c.Locate(key) != want.Locate(key) {
			t.Fatalf("Locate(%q) = %v, want %v", key, c.Locate(key), want.Locate(key))
		}
	}

	if err := c.Reshard(to, time.Hour); err != nil {
		t.Fatal(err)
	}
	st := c.state.Load()
	same("Reshard, old ring", st.mig.Old(), from)
	same("Reshard, new ring", st.mig.New(), to)

	m, err := New(Options{Nodes: to, Equalize: tol, MigrateFrom: &MigrateFrom{Nodes: from, Start: time.Now(), Window: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st = m.state.Load()
	same("MigrateFrom, old ring", st.mig.Old(), from)
	same("MigrateFrom, new ring", st.mig.New(), to)

	for _, bad := range []float64{-0.01, math.NaN(), 1, 1.5, math.Inf(1)} {
		if c, err := New(Options{Nodes: from, Equalize: bad}); !errors.Is(err, ErrBadOptions) || c != nil {
			t.Errorf("New with Equalize %v = %v, %v; want ErrBadOptions", bad, c, err)
		}
	}
}
