package migration

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/shardcache/shardcache/ring"
)

func nodes(n int) []ring.Node {
	ns := make([]ring.Node, n)
	for i := range ns {
		ns[i] = ring.Node{Name: fmt.Sprintf("n%d", i), Addr: fmt.Sprintf("10.0.0.%d:6379", i+1)}
	}
	return ns
}

func rings(t *testing.T, from, to int) (*ring.Ring, *ring.Ring) {
	t.Helper()
	a, err := ring.New(nodes(from))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ring.New(nodes(to))
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestRoute(t *testing.T) {
	old, cur := rings(t, 8, 6)
	m, err := New(old, cur, start, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dual := 0
	for i := range 10000 {
		k := fmt.Sprintf("key:%d", i)
		r := m.Route(k, start.Add(30*time.Minute))
		if r.New != cur.Locate(k) {
			t.Fatalf("Route(%q).New = %v, want the new ring's owner %v", k, r.New, cur.Locate(k))
		}
		if r.Dual != (old.Locate(k).Addr != r.New.Addr) || (r.Dual && r.Old != old.Locate(k)) {
			t.Fatalf("Route(%q) = %+v, old owner %v", k, r, old.Locate(k))
		}
		if r.Dual {
			dual++
		}
		if after := m.Route(k, m.End()); after.Dual || after.New != r.New {
			t.Fatalf("Route(%q) at the end of the window = %+v, want the new owner alone", k, after)
		}
	}
	if got, want := float64(dual)/10000, m.Status(start).Moved; math.Abs(got-want) > 0.02 {
		t.Errorf("%.3f of keys routed to both owners, exact moved fraction %.3f", got, want)
	}
}

func TestRouteComparesAddresses(t *testing.T) {
	a, _ := ring.New([]ring.Node{{Name: "x", Addr: "h:1"}})
	b, _ := ring.New([]ring.Node{{Name: "renamed", Addr: "h:1"}})
	m, _ := New(a, b, start, time.Hour)
	if r := m.Route("k", start); r.Dual {
		t.Errorf("a node renamed at the same address is not a different server: %+v", r)
	}
}

func TestBackfillTTL(t *testing.T) {
	old, cur := rings(t, 8, 6)
	m, _ := New(old, cur, start, time.Hour)
	now := start.Add(20 * time.Minute)
	for _, tc := range []struct {
		remaining time.Duration
		known     bool
		want      time.Duration
		ok        bool
	}{
		{5 * time.Minute, true, 5 * time.Minute, true}, // Redis: keeps the remaining TTL
		{0, true, 0, true}, // Redis: no expiry stays no expiry
	} {
		got, ok := m.BackfillTTL("k", now, tc.remaining, tc.known)
		if got != tc.want || ok != tc.ok {
			t.Errorf("BackfillTTL(%v, %v) = %v, %v; want %v, %v", tc.remaining, tc.known, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := m.BackfillTTL("k", m.End(), 0, false); ok {
		t.Error("a Memcached copy at the end of the window is worth writing")
	}
}

// TestBackfillTTLUnknownIsSpread checks that copies whose TTL cannot be read
// expire within the window, spread over the second half of what is left of
// it rather than all at its end.
func TestBackfillTTLUnknownIsSpread(t *testing.T) {
	old, cur := rings(t, 8, 6)
	m, _ := New(old, cur, start, time.Hour)
	now := start.Add(20 * time.Minute)
	left := m.End().Sub(now)
	var sum time.Duration
	lo, hi := left, time.Duration(0)
	const n = 10000
	for i := range n {
		ttl, ok := m.BackfillTTL(fmt.Sprintf("key:%d", i), now, 0, false)
		if !ok || ttl <= left/2 || ttl > left {
			t.Fatalf("BackfillTTL = %v, %v; want in (%v, %v]", ttl, ok, left/2, left)
		}
		if again, _ := m.BackfillTTL(fmt.Sprintf("key:%d", i), now, 0, false); again != ttl {
			t.Fatalf("BackfillTTL not deterministic: %v then %v", ttl, again)
		}
		sum += ttl
		lo, hi = min(lo, ttl), max(hi, ttl)
	}
	mean := float64(sum/n) / float64(left)
	if mean < 0.72 || mean > 0.78 || lo > left*51/100 || hi < left*99/100 {
		t.Errorf("copies' TTLs span [%v, %v], mean %.2f of the %v left: want spread evenly over the second half", lo, hi, mean, left)
	}
}

func TestNewErrors(t *testing.T) {
	old, cur := rings(t, 2, 3)
	for _, tc := range []struct {
		name     string
		old, new ring.Locator
		window   time.Duration
		want     error
	}{
		{"negative window", old, cur, -time.Second, ErrBadWindow},
		{"nil old placement", nil, cur, time.Hour, ErrNoPlacement},
		{"nil new placement", old, nil, time.Hour, ErrNoPlacement},
		{"old placement without nodes", empty{}, cur, time.Hour, ErrNoPlacement},
	} {
		if m, err := New(tc.old, tc.new, start, tc.window); !errors.Is(err, tc.want) || m != nil {
			t.Errorf("%s: New = %v, %v; want nil, %v", tc.name, m, err, tc.want)
		}
	}
	m, err := New(old, cur, start, 0)
	if err != nil || m.Active(start) {
		t.Errorf("zero window must be a cut-over: %v, active %v", err, m.Active(start))
	}
}

func TestStatus(t *testing.T) {
	old, cur := rings(t, 8, 6)
	m, _ := New(old, cur, start, time.Hour)
	m.Counters.FallbackHits.Add(3)
	m.Counters.Backfills.Add(2)
	st := m.Status(start.Add(time.Minute))
	if !st.Active || st.FallbackHits != 3 || st.Backfills != 2 || len(st.OldNodes) != 8 || len(st.NewNodes) != 6 {
		t.Errorf("Status = %+v", st)
	}
	if st.Moved != ring.Moved(old, cur) {
		t.Errorf("Moved = %v, want ring.Moved %v", st.Moved, ring.Moved(old, cur))
	}
	if st := m.Status(m.End()); st.Active {
		t.Error("active at the end of the window")
	}
}

type modN []ring.Node

func (m modN) Locate(key string) ring.Node { return m[ring.Hash(key)%uint64(len(m))] }
func (m modN) Nodes() []ring.Node          { return m }

func TestMovedUnknownForOtherPlacements(t *testing.T) {
	old, _ := rings(t, 2, 2)
	if !math.IsNaN(Moved(old, modN(nodes(2)))) {
		t.Error("Moved of a non-ring placement should be NaN (unknown)")
	}
}

// empty is a placement without nodes.
type empty struct{}

func (empty) Locate(string) ring.Node { return ring.Node{} }
func (empty) Nodes() []ring.Node      { return nil }

// TestMovedFromForeignPlacements: a migration off gomemcache's ServerList
// (ring.Modulo) knows its moved fraction, by server; off go-redis's Ring
// (sampled only) it is unknown.
func TestMovedFromForeignPlacements(t *testing.T) {
	next, _ := ring.New(nodes(3))
	var addrs []string
	for _, n := range nodes(3) {
		addrs = append(addrs, n.Addr)
	}
	old, err := ring.NewModulo(addrs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Moved(old, next), ring.Compare(old, next).Moved; got != want || math.IsNaN(got) {
		t.Errorf("Moved from Modulo = %v, want ring.Compare's %v", got, want)
	}
	rdv, _ := ring.NewRendezvous(nodes(3))
	if !math.IsNaN(Moved(rdv, next)) {
		t.Error("Moved from Rendezvous should be NaN: only a sample could tell")
	}
}

// TestSnapshotAdd checks that Add sums every counter.
func TestSnapshotAdd(t *testing.T) {
	var c Counters
	c.FallbackHits.Add(2)
	c.SweepCopied.Add(3)
	c.DualDeletes.Add(1)
	s := c.Snapshot()
	sum := s.Add(s)
	if sum.FallbackHits != 4 || sum.SweepCopied != 6 || sum.DualDeletes != 2 || sum.NewHits != 0 {
		t.Fatalf("%+v + itself = %+v", s, sum)
	}
}
