package topology

import (
	"errors"
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardcache/shardcache/ring"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// four is a valid topology of four nodes, c0..c3.
func four() *Topology {
	return &Topology{Nodes: []ring.Node{
		{Name: "c0", Addr: "10.0.0.1:11211"}, {Name: "c1", Addr: "10.0.0.2:11211"},
		{Name: "c2", Addr: "10.0.0.3:11211"}, {Name: "c3", Addr: "10.0.0.4:11211", Weight: 1},
	}}
}

func TestCheckRefusals(t *testing.T) {
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		change func(*Topology)
		want   error
	}{
		{"no nodes", func(t *Topology) { t.Nodes = nil }, ErrNoNodes},
		{"duplicate name", func(t *Topology) { t.Nodes[1].Name = "c0" }, ErrDuplicateName},
		{"duplicate name by address", func(t *Topology) { t.Nodes[0].Name = ""; t.Nodes[1].Name = "10.0.0.1:11211" }, ErrDuplicateName},
		{"duplicate address", func(t *Topology) { t.Nodes[1].Addr = t.Nodes[0].Addr }, ErrDuplicateAddr},
		{"empty address", func(t *Topology) { t.Nodes[2].Addr = "" }, ErrBadAddr},
		{"no port", func(t *Topology) { t.Nodes[2].Addr = "10.0.0.3" }, ErrBadAddr},
		{"port 0", func(t *Topology) { t.Nodes[2].Addr = "10.0.0.3:0" }, ErrBadAddr},
		{"port too big", func(t *Topology) { t.Nodes[2].Addr = "10.0.0.3:65536" }, ErrBadAddr},
		{"no host", func(t *Topology) { t.Nodes[2].Addr = ":11211" }, ErrBadAddr},
		{"padded address", func(t *Topology) { t.Nodes[2].Addr = " 10.0.0.3:11211" }, ErrBadAddr},
		{"address with a trailing space", func(t *Topology) { t.Nodes[2].Addr = "10.0.0.3:11211 " }, ErrBadAddr},
		{"address with a tab inside", func(t *Topology) { t.Nodes[2].Addr = "cache\tb:11211" }, ErrBadAddr},
		{"address with a comma", func(t *Topology) { t.Nodes[2].Addr = "a,b:11211" }, ErrBadAddr},
		{"padded name", func(t *Topology) { t.Nodes[2].Name = "c2 " }, ErrBadName},
		{"name with a newline", func(t *Topology) { t.Nodes[2].Name = "c\n2" }, ErrBadName},
		{"negative weight", func(t *Topology) { t.Nodes[0].Weight = -1 }, ErrBadWeight},
		{"weight too big", func(t *Topology) { t.Nodes[0].Weight = MaxWeight + 1 }, ErrBadWeight},
		{"weights too big in all", func(t *Topology) { t.Nodes[0].Weight, t.Nodes[1].Weight = MaxWeight/2+1, MaxWeight/2+1 }, ErrBadWeight},
		{"negative max removed share", func(t *Topology) { t.MaxRemovedShare = -0.1 }, ErrBadShare},
		{"max removed share above 1", func(t *Topology) { t.MaxRemovedShare = 1.5 }, ErrBadShare},
		{"max removed share NaN", func(t *Topology) { t.MaxRemovedShare = math.NaN() }, ErrBadShare},
		{"negative equalize", func(t *Topology) { t.Equalize = -0.01 }, ErrBadEqualize},
		{"equalize 1", func(t *Topology) { t.Equalize = 1 }, ErrBadEqualize},
		{"equalize NaN", func(t *Topology) { t.Equalize = math.NaN() }, ErrBadEqualize},
		{"from equalize above 1", func(t *Topology) { t.Migration = &Migration{FromEqualize: 2, Start: start} }, ErrBadEqualize},
		{"from equalize for ketama", func(t *Topology) {
			t.Migration = &Migration{FromKind: KindKetama, FromEqualize: 0.01, Start: start}
		}, ErrBadEqualize},
		{"window without a start", func(t *Topology) { t.Migration = &Migration{Window: time.Hour} }, ErrNoStart},
		{"negative window", func(t *Topology) { t.Migration = &Migration{Start: start, Window: -time.Second} }, ErrBadWindow},
		{"unknown kind", func(t *Topology) { t.Migration = &Migration{FromKind: "maglev", Start: start} }, ErrBadKind},
		{"hash for rendezvous", func(t *Topology) {
			t.Migration = &Migration{FromKind: KindRendezvous, FromHash: "crc32", Start: start}
		}, ErrBadKind},
		{"hash tag for the ring", func(t *Topology) { t.Migration = &Migration{FromHashTag: "{}", Start: start} }, ErrBadKind},
		{"bad old nodes", func(t *Topology) {
			t.Migration = &Migration{From: []ring.Node{{Name: "a", Addr: "h:1"}, {Name: "b", Addr: "h:1"}}, Start: start}
		}, ErrDuplicateAddr},
	} {
		topo := four()
		tc.change(topo)
		err := topo.Check()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Check() = %v, want %v", tc.name, err, tc.want)
		}
		if err2 := Validate(four(), topo); !errors.Is(err2, tc.want) {
			t.Errorf("%s: Validate() = %v, want %v", tc.name, err2, tc.want)
		}
	}
	var nilTopology *Topology
	if err := nilTopology.Check(); !errors.Is(err, ErrNilTopology) {
		t.Errorf("nil Check() = %v, want ErrNilTopology", err)
	}
	// Address errors are the ring's too.
	if err := CheckAddr(" h:1"); !errors.Is(err, ring.ErrBadAddr) {
		t.Errorf("CheckAddr(\" h:1\") = %v, want ring.ErrBadAddr as well", err)
	}
	for _, ok := range []*Topology{
		four(),
		{Nodes: []ring.Node{{Addr: "[::1]:6379", Weight: MaxWeight}}},
		{Nodes: four().Nodes, Migration: &Migration{FromKind: KindKetama, FromHash: "fnv1a_64", FromHashTag: "{}", Start: start}},
		{Nodes: four().Nodes, Migration: &Migration{From: four().Nodes[:3], Start: start, Window: time.Hour}, MaxRemovedShare: 1},
		{Nodes: four().Nodes, Equalize: 0.01, Migration: &Migration{From: four().Nodes[:3], FromEqualize: 0.02, Start: start}},
		{Nodes: four().Nodes, Equalize: 0.01, Migration: &Migration{FromKind: KindRing, Start: start}}, // classic to equalized
	} {
		if err := ok.Check(); err != nil {
			t.Errorf("Check(%+v) = %v, want nil", ok, err)
		}
	}
}

func TestValidateRemovedShare(t *testing.T) {
	prev := four()
	for _, tc := range []struct {
		name  string
		nodes []ring.Node
		share float64 // MaxRemovedShare
		want  error
	}{
		{"one of four removed", prev.Nodes[:3], 0, nil},
		{"half removed", prev.Nodes[:2], 0, nil},
		{"three of four removed", prev.Nodes[:1], 0, ErrTooMuchRemoved},
		{"three of four removed, allowed for this change", prev.Nodes[:1], 0.75, nil},
		{"three of four removed, not allowed enough", prev.Nodes[:1], 0.7, ErrTooMuchRemoved},
		{"all renamed", []ring.Node{{Name: "d0", Addr: "10.0.0.1:11211"}, {Name: "d1", Addr: "10.0.0.2:11211"}}, 0, ErrTooMuchRemoved},
		{"all moved to new addresses under their names", []ring.Node{
			{Name: "c0", Addr: "10.1.0.1:11211"}, {Name: "c1", Addr: "10.1.0.2:11211"},
			{Name: "c2", Addr: "10.1.0.3:11211"}, {Name: "c3", Addr: "10.1.0.4:11211"},
		}, 0, nil},
		{"doubled", append(four().Nodes, ring.Node{Name: "c4", Addr: "10.0.0.5:11211"}, ring.Node{Name: "c5", Addr: "10.0.0.6:11211"}), 0, nil},
	} {
		next := &Topology{Nodes: tc.nodes, MaxRemovedShare: tc.share}
		if err := Validate(prev, next); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s: Validate = %v, want %v", tc.name, err, tc.want)
		}
	}
	// Weight lowered counts too: 4 → 1 of a total of 4+1+1 removes half.
	heavy := &Topology{Nodes: []ring.Node{{Name: "a", Addr: "h:1", Weight: 4}, {Name: "b", Addr: "h:2"}, {Name: "c", Addr: "h:3"}}}
	light := &Topology{Nodes: []ring.Node{{Name: "a", Addr: "h:1", Weight: 1}, {Name: "b", Addr: "h:2"}, {Name: "c", Addr: "h:3"}}}
	if err := Validate(heavy, light); err != nil {
		t.Errorf("Validate removing half of the weight: %v", err)
	}
	lighter := light.Clone()
	lighter.Nodes = lighter.Nodes[:2]
	if err := Validate(heavy, lighter); !errors.Is(err, ErrTooMuchRemoved) {
		t.Errorf("Validate 6 → 2 of weight: %v, want ErrTooMuchRemoved", err)
	}
	// The first topology has nothing to remove from.
	if err := Validate(nil, &Topology{Nodes: prev.Nodes[:1]}); err != nil {
		t.Errorf("Validate(nil, one node) = %v", err)
	}
}

func TestDigestEqual(t *testing.T) {
	a := four()
	b := four()
	b.Nodes[0], b.Nodes[3] = b.Nodes[3], b.Nodes[0] // another order
	b.Nodes[0].Weight = 0                           // 0 is 1
	b.Version, b.MaxRemovedShare = 9, 0.9
	if !a.Equal(b) || a.Digest() != b.Digest() {
		t.Errorf("the same nodes in another order: Equal %v, digests %d and %d", a.Equal(b), a.Digest(), b.Digest())
	}
	if d := a.Digest(); d <= 0 || d >= 1<<53 {
		t.Errorf("Digest = %d, want in (0, 2^53)", d)
	}
	c := four()
	c.Nodes[1].Addr = "10.9.9.9:11211"
	m := four()
	m.Migration = &Migration{From: four().Nodes[:3], Start: time.Unix(1e9, 0), Window: time.Hour}
	// Equalization is placement; a classic topology keeps the digest it had
	// before Equalize existed.
	e := four()
	e.Equalize = 0.01
	me := four()
	me.Migration = &Migration{From: four().Nodes[:3], FromEqualize: 0.01, Start: time.Unix(1e9, 0), Window: time.Hour}
	if a.Digest() != 4173636200728060 || m.Digest() != 5945491728777329 {
		t.Errorf("digests of classic topologies changed: %d and %d, want 4173636200728060 and 5945491728777329", a.Digest(), m.Digest())
	}
	if m.Equal(me) || m.Digest() == me.Digest() {
		t.Error("migrations from a classic and an equalized ring: Equal, or the same digest")
	}
	for _, other := range []*Topology{c, m, e, {Nodes: a.Nodes[:3]}} {
		if a.Equal(other) || a.Digest() == other.Digest() {
			t.Errorf("%+v: Equal to four nodes, or the same digest", other)
		}
	}
	clone := m.Clone()
	clone.Migration.From[0].Name = "changed"
	clone.Nodes[0].Name = "changed"
	if m.Migration.From[0].Name == "changed" || m.Nodes[0].Name == "changed" {
		t.Error("Clone shares its nodes with the original")
	}
}

func TestPlacements(t *testing.T) {
	topo := four()
	topo.Migration = &Migration{FromKind: KindModulo, Start: time.Unix(1e9, 0), Window: time.Hour}
	old, new, err := topo.Placements(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := old.(*ring.Modulo); !ok || new.Vnodes() != ring.DefaultVnodes || len(old.Nodes()) != 4 {
		t.Errorf("Placements: old %T of %d nodes, new of %d vnodes", old, len(old.Nodes()), new.Vnodes())
	}
	topo.Migration.FromKind, topo.Migration.FromHash = KindKetama, "sha1"
	if _, _, err := topo.Placements(0); !errors.Is(err, ring.ErrBadHash) {
		t.Errorf("Placements with an unknown ketama hash: %v, want ring.ErrBadHash", err)
	}
	// Equalized rings, each with its own tolerance.
	topo.Equalize = 0.02
	topo.Migration = &Migration{From: topo.Nodes[:3], FromEqualize: 0.01, Start: time.Unix(1e9, 0), Window: time.Hour}
	old, new, err = topo.Placements(0)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := old.(*ring.Ring); !ok || o.Tolerance() != 0.01 || new.Tolerance() != 0.02 || new.Deviation() > 0.02 {
		t.Errorf("Placements, equalized: old %T, tolerances %v and %v, new ring's deviation %v", old, o.Tolerance(), new.Tolerance(), new.Deviation())
	}
	topo.Migration.FromEqualize = 0
	if old, _, _ = topo.Placements(0); old.(*ring.Ring).Tolerance() != 0 {
		t.Errorf("Placements: FromEqualize 0 gave an old ring of tolerance %v, want the classic ring", old.(*ring.Ring).Tolerance())
	}
	if r, err := Ring(topo.Nodes, 0, 0); err != nil || r.Tolerance() != 0 || r.Vnodes() != ring.DefaultVnodes {
		t.Errorf("Ring(nodes, 0, 0) = %v, %v; want the classic ring of ring.DefaultVnodes", r, err)
	}
	for _, kind := range Kinds {
		if _, err := Placement(kind, "", "", topo.Nodes, 16); err != nil {
			t.Errorf("Placement(%s): %v", kind, err)
		}
	}
}
