package ring

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// refPick is the replica rule written out: order is every node, by index,
// in the order the walk meets them first; the first min(n, zones) chosen
// are the first of each zone met, the rest the others in order.
func refPick(order []int32, zones []string, n int) []int32 {
	want := min(n, len(order))
	distinct := map[string]bool{}
	for _, z := range zones {
		distinct[z] = true
	}
	var out []int32
	chosen := map[int32]bool{}
	if len(distinct) > 1 {
		used := map[string]bool{}
		for _, o := range order {
			if len(out) == min(want, len(distinct)) {
				break
			}
			if !used[zones[o]] {
				used[zones[o]], chosen[o] = true, true
				out = append(out, o)
			}
		}
	}
	for _, o := range order {
		if len(out) == want {
			break
		}
		if !chosen[o] {
			chosen[o] = true
			out = append(out, o)
		}
	}
	return out
}

// walkOrder returns the nodes in the order a walk of owners from start
// meets them first, then those it never meets, by index.
func walkOrder(owners []int32, start, nodes int) []int32 {
	seen := make([]bool, nodes)
	var order []int32
	for k := range owners {
		if o := owners[(start+k)%len(owners)]; !seen[o] {
			seen[o] = true
			order = append(order, o)
		}
	}
	for o := range int32(nodes) {
		if !seen[o] {
			order = append(order, o)
		}
	}
	return order
}

func zonesOf(nodes []Node) []string {
	z := make([]string, len(nodes))
	for i, n := range nodes {
		z[i] = n.Zone
	}
	return z
}

func pick(nodes []Node, idx []int32) []Node {
	out := make([]Node, len(idx))
	for i, o := range idx {
		out[i] = nodes[o]
	}
	return out
}

// refRingN returns LocateN on a ring by its definition: a binary search for
// the first point, and a walk over every point (of an equalized ring, the
// points that end its runs of slots).
func refRingN(r *Ring) func(key string, n int) []Node {
	pts := r.arcs()
	owners := make([]int32, len(pts))
	for i, p := range pts {
		owners[i] = p.owner
	}
	return func(key string, n int) []Node {
		h := Hash(key)
		start := sort.Search(len(pts), func(i int) bool { return pts[i].hash >= h }) % len(pts)
		return pick(r.nodes, refPick(walkOrder(owners, start, len(r.nodes)), zonesOf(r.nodes), n))
	}
}

// TestLocateNMatchesDefinition checks AppendLocateN of every placement
// against the rule written out, for n from 0 to beyond the node count, with
// and without zones, and the properties a replicated client relies on: n
// distinct nodes, the owner first, a zone per replica while zones last.
func TestLocateNMatchesDefinition(t *testing.T) {
	skipUnderRace(t)
	zoned := zonedNodes()
	mixed := equalNodes(7)
	for i := range mixed {
		mixed[i].Zone = []string{"a", "", "b", "a", "", "c", "c"}[i] // "" is a zone too
	}
	ketamaNodes := []Node{{Addr: "10.0.1.1:11211", Zone: "a"}, {Name: "beta", Addr: "10.0.1.2:11211", Weight: 3, Zone: "b"},
		{Addr: "10.0.1.3:11211", Zone: "a"}, {Addr: "10.0.1.4:22122"}}
	type placement struct {
		name string
		l    LocatorN
		ref  func(key string, n int) []Node
	}
	var ps []placement
	for _, tc := range []struct {
		name  string
		nodes []Node
		opts  []Option
	}{
		{"ring", equalNodes(6), nil},
		{"ring, zones", zoned, nil},
		{"ring, zones and none", mixed, []Option{WithVnodes(40)}},
		{"ring, one point each", zoned, []Option{WithVnodes(1)}},
		{"equalized ring, zones", zoned, []Option{WithEqualize(0)}},
		{"ring of 32-bit entries", equalNodes(narrowNodes + 1), []Option{WithVnodes(2)}},
	} {
		r := mustNew(t, tc.nodes, tc.opts...)
		ps = append(ps, placement{tc.name, r, refRingN(r)})
	}
	k := mustKetama(t, ketamaNodes)
	ps = append(ps, placement{"ketama", k, func(key string, n int) []Node {
		h := KetamaHash(key)
		start := sort.Search(len(k.values), func(i int) bool { return k.values[i] >= h }) % len(k.values)
		return pick(k.nodes, refPick(walkOrder(k.owners, start, len(k.nodes)), zonesOf(k.nodes), n))
	}})
	addrs, err := ModuloSlots(ketamaNodes)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModulo(addrs)
	if err != nil {
		t.Fatal(err)
	}
	owners := make([]int32, len(addrs))
	for i, a := range addrs {
		owners[i] = int32(slices.IndexFunc(m.nodes, func(n Node) bool { return n.Addr == a }))
	}
	ps = append(ps, placement{"modulo", m, func(key string, n int) []Node {
		start := int(crc32String(key) % uint64(len(addrs)))
		return pick(m.nodes, refPick(walkOrder(owners, start, len(m.nodes)), zonesOf(m.nodes), n))
	}})
	rv, err := NewRendezvous(zoned)
	if err != nil {
		t.Fatal(err)
	}
	ps = append(ps, placement{"rendezvous", rv, func(key string, n int) []Node {
		// Every shard by descending score: go-redis's choice first.
		order := make([]int32, len(rv.nodes))
		for i := range order {
			order[i] = int32(i)
		}
		score := func(o int32) uint64 {
			return mix64(xxhash.Sum64String(HashTag(key)) ^ xxhash.Sum64String(rv.nodes[o].Name))
		}
		slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(score(b), score(a)) })
		return pick(rv.nodes, refPick(order, zonesOf(rv.nodes), n))
	}})

	for _, p := range ps {
		nodes := p.l.Nodes()
		zones := map[string]bool{}
		for _, n := range nodes {
			zones[n.Zone] = true
		}
		var buf []Node
		for i, key := range randomKeys(2000, 11) {
			n := i % (len(nodes) + 3)
			buf = p.l.AppendLocateN(buf[:0], key, n)
			if want := p.ref(key, n); !slices.Equal(buf, want) {
				t.Fatalf("%s: LocateN(%q, %d) = %v, want %v", p.name, key, n, buf, want)
			}
			if len(buf) != min(n, len(nodes)) {
				t.Fatalf("%s: LocateN(%q, %d) gave %d nodes of %d", p.name, key, n, len(buf), len(nodes))
			}
			if n > 0 && buf[0] != p.l.Locate(key) {
				t.Fatalf("%s: LocateN(%q, %d) starts with %v, Locate gives %v", p.name, key, n, buf[0], p.l.Locate(key))
			}
			names, used := map[string]bool{}, map[string]bool{}
			for j, nd := range buf {
				if names[nd.Name] {
					t.Fatalf("%s: LocateN(%q, %d) = %v: %s twice", p.name, key, n, buf, nd.Name)
				}
				names[nd.Name] = true
				if j < len(zones) && len(zones) > 1 && used[nd.Zone] {
					t.Fatalf("%s: LocateN(%q, %d) = %v: zone %q twice among the first %d", p.name, key, n, buf, nd.Zone, len(zones))
				}
				used[nd.Zone] = true
			}
		}
	}
}

// TestLocateNNodeLeaves checks that replica sets change only where the
// ring does: when a node leaves, every key keeps its other replicas, in
// order, and gains one node at the end.
func TestLocateNNodeLeaves(t *testing.T) {
	nodes := equalNodes(10)
	before := mustNew(t, nodes)
	gone := nodes[4].Name
	after := mustNew(t, slices.Delete(slices.Clone(nodes), 4, 5))
	changed := 0
	for _, key := range randomKeys(20000, 3) {
		old, cur := LocateN(before, key, 3), LocateN(after, key, 3)
		kept := slices.DeleteFunc(slices.Clone(old), func(n Node) bool { return n.Name == gone })
		if len(kept) == len(old) {
			if !slices.Equal(old, cur) {
				t.Fatalf("key %q: replicas %v became %v, though %s held none", key, old, cur, gone)
			}
			continue
		}
		changed++
		if !slices.Equal(cur[:2], kept) {
			t.Fatalf("key %q: replicas %v became %v: the survivors should stay, in order", key, old, cur)
		}
	}
	// Each node holds 3/10 of the copies: about 0.3 of the keys change.
	if share := float64(changed) / 20000; share < 0.25 || share > 0.35 {
		t.Errorf("%.3f of the keys changed replicas when 1 of 10 nodes left, want about 0.3", share)
	}
}

// TestLocateNZoneLoss checks the point of zones: with three zones and
// three replicas, every key keeps two copies when a whole zone is lost,
// however unevenly the nodes are spread over the zones.
func TestLocateNZoneLoss(t *testing.T) {
	r := mustNew(t, zonedNodes()) // zones of 4, 3 and 2 nodes
	for _, key := range randomKeys(20000, 4) {
		zones := map[string]bool{}
		for _, n := range LocateN(r, key, 3) {
			zones[n.Zone] = true
		}
		if len(zones) != 3 {
			t.Fatalf("key %q: replicas %v span %d zones, want 3", key, LocateN(r, key, 3), len(zones))
		}
	}
}

func TestLocateNDoesNotAllocate(t *testing.T) {
	r := mustNew(t, zonedNodes())
	k := mustKetama(t, zonedNodes())
	m, _ := NewModulo([]string{"a:1", "b:1", "c:1", "a:1"})
	rv, _ := NewRendezvous(zonedNodes())
	var buf [maxPickedOnStack]Node
	for name, l := range map[string]LocatorN{"ring": r, "ketama": k, "modulo": m, "rendezvous": rv} {
		for _, n := range []int{1, 3, maxPickedOnStack} {
			if a := testing.AllocsPerRun(200, func() { _ = l.AppendLocateN(buf[:0], "user:42:session", n) }); a != 0 {
				t.Errorf("%s: AppendLocateN(n=%d) allocates %v times per call, want 0", name, n, a)
			}
		}
	}
	if got := LocateN(r, "k", 0); got != nil {
		t.Errorf("LocateN(n=0) = %v, want nil", got)
	}
	if got := r.AppendLocateN(buf[:0], "k", -1); len(got) != 0 {
		t.Errorf("AppendLocateN(n=-1) = %v, want none", got)
	}
}

// TestReplicaShares checks the exact copies per node against keys counted,
// and their sums: n copies of every key, one of each on a node at most.
func TestReplicaShares(t *testing.T) {
	r := mustNew(t, zonedNodes(), WithVnodes(64))
	one, shares := r.ReplicaShares(1), r.Shares()
	for name, s := range shares {
		if math.Abs(one[name]-s) > 1e-12 {
			t.Errorf("ReplicaShares(1)[%s] = %v, want Shares' %v", name, one[name], s)
		}
	}
	const keys = 40000
	for _, n := range []int{2, 3, 4, 20} {
		shares := r.ReplicaShares(n)
		counts := map[string]int{}
		var buf []Node
		for _, key := range randomKeys(keys, 9) {
			buf = r.AppendLocateN(buf[:0], key, n)
			for _, nd := range buf {
				counts[nd.Name]++
			}
		}
		total := 0.0
		for name, s := range shares {
			total += s
			// Binomial: 5 standard errors of the counted share.
			got := float64(counts[name]) / keys
			if se := math.Sqrt(s * (1 - s) / keys); math.Abs(got-s) > 5*se+1e-9 {
				t.Errorf("n=%d: %s keeps %.4f of the keys by ReplicaShares, %.4f counted", n, name, s, got)
			}
			if s > 1+1e-9 {
				t.Errorf("n=%d: %s keeps a share %v above 1", n, name, s)
			}
		}
		if want := float64(min(n, len(r.nodes))); math.Abs(total-want) > 1e-9 {
			t.Errorf("n=%d: ReplicaShares add up to %v, want %v", n, total, want)
		}
	}
	if s := r.ReplicaShares(0); len(s) != len(r.nodes) || s["cache-00"] != 0 {
		t.Errorf("ReplicaShares(0) = %v, want every node at 0", s)
	}
}

// TestMovedN checks the exact share of keys whose replica set changes
// against keys counted in both rings, and that n = 1 is Moved.
func TestMovedN(t *testing.T) {
	from := mustNew(t, zonedNodes(), WithVnodes(64))
	to := mustNew(t, zonedNodes()[1:], WithVnodes(64)) // cache-00 leaves
	if got, want := MovedN(from, to, 1), Moved(from, to); math.Abs(got-want) > 1e-12 {
		t.Errorf("MovedN(1) = %v, want Moved's %v", got, want)
	}
	if got := MovedN(from, from, 3); got != 0 {
		t.Errorf("MovedN of a ring to itself = %v, want 0", got)
	}
	if got := MovedN(from, to, 0); got != 0 {
		t.Errorf("MovedN(0) = %v, want 0", got)
	}
	const keys = 40000
	for _, n := range []int{2, 3, 9} {
		moved := MovedN(from, to, n)
		counted := 0
		for _, key := range randomKeys(keys, 11) {
			a, b := LocateN(from, key, n), LocateN(to, key, n)
			same := len(a) == len(b)
			for _, x := range a {
				same = same && slices.ContainsFunc(b, func(y Node) bool { return y.Name == x.Name })
			}
			if !same {
				counted++
			}
		}
		got := float64(counted) / keys
		if se := math.Sqrt(moved * (1 - moved) / keys); math.Abs(got-moved) > 5*se+1e-9 {
			t.Errorf("n=%d: MovedN %.4f, %.4f counted", n, moved, got)
		}
		// A leaving node's keys change set wherever it held a copy.
		if least := from.ReplicaShares(n)["cache-00"]; moved < least-1e-9 {
			t.Errorf("n=%d: MovedN %.4f, below cache-00's copies %.4f", n, moved, least)
		}
	}
	// Nine nodes to eight: with n = 9, every key loses a copy.
	if got := MovedN(from, to, 9); math.Abs(got-1) > 1e-9 {
		t.Errorf("MovedN(9) from 9 nodes to 8 = %v, want 1", got)
	}
}

// TestZoneSpread checks that every key's replicas span min(n, zones)
// zones, nodes without a zone being one zone of their own.
func TestZoneSpread(t *testing.T) {
	noZone := equalNodes(4)
	mixed := equalNodes(4)
	mixed[0].Zone, mixed[1].Zone = "x", "x" // and two without: 2 zones
	for _, tc := range []struct {
		name  string
		nodes []Node
		n     int
	}{
		{"3 zones, n=2", zonedNodes(), 2},
		{"3 zones, n=3", zonedNodes(), 3},
		{"3 zones, n=5", zonedNodes(), 5},
		{"no zones, n=2", noZone, 2},
		{"x and none, n=2", mixed, 2},
	} {
		r := mustNew(t, tc.nodes, WithVnodes(64))
		if got := r.ZoneSpread(tc.n); got != 1 {
			t.Errorf("%s: ZoneSpread = %v, want 1", tc.name, got)
		}
		distinct := map[string]bool{}
		for _, n := range tc.nodes {
			distinct[n.Zone] = true
		}
		for _, key := range randomKeys(2000, 13) {
			zones := map[string]bool{}
			for _, nd := range LocateN(r, key, tc.n) {
				zones[nd.Zone] = true
			}
			if len(zones) != min(tc.n, len(distinct)) {
				t.Fatalf("%s: key %q spans %d zones, want %d", tc.name, key, len(zones), min(tc.n, len(distinct)))
			}
		}
	}
	if got := mustNew(t, zonedNodes()).ZoneSpread(0); got != 0 {
		t.Errorf("ZoneSpread(0) = %v, want 0", got)
	}
}
