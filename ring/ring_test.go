package ring

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/murmur3"
)

// equalNodes returns n nodes of weight 1 named like a fleet of hosts.
func equalNodes(n int) []Node {
	ns := make([]Node, n)
	for i := range ns {
		ns[i] = Node{Name: fmt.Sprintf("cache-%02d", i), Addr: fmt.Sprintf("10.0.0.%d:6379", i+1)}
	}
	return ns
}

func mustNew(t testing.TB, nodes []Node, opts ...Option) *Ring {
	t.Helper()
	r, err := New(nodes, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func randomKeys(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, seed))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d:session:%x", i, rng.Uint64())
	}
	return keys
}

// TestLocateMatchesBinarySearch checks the look-up table against the
// definition, the first point at or after the hash, wrapping round, on hashes
// chosen to take every path through the table of either width.
func TestLocateMatchesBinarySearch(t *testing.T) {
	skipUnderRace(t)
	paths := map[string]map[string]int{"16-bit": {}, "32-bit": {}}
	for _, tc := range []struct {
		nodes, vnodes int
	}{
		{1, 1}, {2, 1}, {3, 7}, {10, 512}, {100, 160}, {narrowNodes, 4},
		{narrowNodes + 1, 4}, {70000, 1}, // 32-bit entries, beyond 16-bit node indexes too
	} {
		r := mustNew(t, equalNodes(tc.nodes), WithVnodes(tc.vnodes))
		name := fmt.Sprintf("%d nodes × %d vnodes", tc.nodes, tc.vnodes)
		if wide := tc.nodes > narrowNodes; (r.wide != nil) != wide || (r.narrow != nil) == wide {
			t.Fatalf("%s: 16-bit table %v, 32-bit table %v", name, r.narrow != nil, r.wide != nil)
		}
		if r.narrow != nil {
			checkTable(t, name, r.narrow, r.points, paths["16-bit"])
		} else {
			checkTable(t, name, r.wide, r.points, paths["32-bit"])
		}
		for _, k := range randomKeys(1000, 5) {
			h := Hash(k)
			i := sort.Search(len(r.points), func(i int) bool { return r.points[i].hash >= h })
			if want := r.nodes[r.points[i%len(r.points)].owner]; r.Locate(k) != want {
				t.Fatalf("%s: Locate(%q) = %v, want %v", name, k, r.Locate(k), want)
			}
		}
	}
	// Points placed by hand, for the paths a real ring may miss: a lone
	// point in the last bucket, whose hashes above it wrap round, and points
	// closer than more can tell apart.
	pts := []point{{0, 2}, {1, 1}, {1 << 62, 0}, {1<<62 + 1, 1}, {1<<62 + 1<<40, 2}, {1<<63 - 1, 0}, {^uint64(0) - 1<<50, 1}}
	checkTable(t, "hand-placed", newTable[uint16](pts, 3), pts, paths["16-bit"])
	checkTable(t, "hand-placed", newTable[uint32](pts, 3), pts, paths["32-bit"])

	for width, seen := range paths {
		want := []string{
			"empty bucket", "empty bucket, wraps", "at the split, one owner",
			"below the point", "above the point", "above the point, next bucket several",
			"above the point, wraps", "at the split: scan, too close: search",
			"several points: scan", "several points: scan, past the group",
			"several points: scan, too close: search",
		}
		if width == "16-bit" { // more is finer than a 16-bit split, coarser than a 32-bit one
			want = append(want, "at the split: scan", "at the split: scan, past the group")
		}
		for _, path := range want {
			if seen[path] == 0 {
				t.Errorf("%s entries: no hash took the path %q (paths: %v)", width, path, seen)
			}
		}
	}
}

// checkTable checks owner and search against a binary search on hashes that
// probe every part of t, and counts the paths they take.
func checkTable[E uint16 | uint32](t *testing.T, name string, tbl *table[E], points []point, paths map[string]int) {
	t.Helper()
	for _, h := range tableHashes(tbl, points) {
		want := sort.Search(len(points), func(i int) bool { return points[i].hash >= h })
		if want == len(points) {
			want = 0
		}
		path := tablePath(tbl, h, points)
		if got := tbl.search(h, points); got != want {
			t.Fatalf("%s: search(%#x) = %d, want %d", name, h, got, want)
		}
		if got, want := tbl.owner(h, points), int(points[want].owner); got != want {
			t.Fatalf("%s: owner(%#x) = %d, want %d (path %q)", name, h, got, want, path)
		}
		paths[path]++
	}
}

// tableHashes returns hashes that probe every part of t: ends of the ring,
// ends of every bucket, every point and its neighbours, both ends of the
// stretch that shares its split, the stretches on either side, and random
// hashes.
func tableHashes[E uint16 | uint32](t *table[E], points []point) []uint64 {
	hashes := []uint64{0, 1, 1<<63 - 1, 1 << 63, ^uint64(0)}
	shift := 64 - t.bits
	for b := range uint64(1) << t.bits {
		hashes = append(hashes, b<<shift, b<<shift|(1<<shift-1))
	}
	// The split keeps the top width-1-m bits of the offset: a stretch of 2^k
	// hashes shares it.
	k := shift - uint(bits.Len64(uint64(^E(0)))-1-bits.OnesCount64(uint64(t.mask)))
	for _, p := range points {
		lo, hi := p.hash&^(1<<k-1), p.hash|(1<<k-1)
		hashes = append(hashes, p.hash-1, p.hash, p.hash+1, lo, hi, lo-1, hi+1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		hashes = append(hashes, rng.Uint64())
	}
	return hashes
}

// tablePath names the way owner finds the owner of h.
func tablePath[E uint16 | uint32](t *table[E], h uint64, points []point) string {
	shift := 64 - t.bits
	b := h >> shift
	first := sort.Search(len(points), func(i int) bool { return points[i].hash>>shift >= b })
	n := 0
	for first+n < len(points) && points[first+n].hash>>shift == b {
		n++
	}
	e, next := t.entries[b], t.entries[b+1]
	at, split := t.offset(h), e&^t.mask
	wraps := ""
	if b == 1<<t.bits-1 {
		wraps = ", wraps"
	}
	scan := func() string {
		g := h >> t.group
		i, end := int(t.start[g]), int(t.start[g+1])
		for i < end && t.more[i]&^uint32(t.mask) < t.inGroup(h) {
			i++
		}
		switch {
		case i == end:
			return ": scan, past the group"
		case t.more[i]&^uint32(t.mask) == t.inGroup(h):
			return ": scan, too close: search"
		}
		return ": scan"
	}
	switch {
	case n >= 2:
		return "several points" + scan()
	case at == split && (e^next)&t.mask != 0:
		return "at the split" + scan()
	case at == split:
		return "at the split, one owner"
	case n == 0:
		return "empty bucket" + wraps
	case at < split:
		return "below the point"
	case next > ^E(0)>>1:
		return "above the point, next bucket several"
	}
	return "above the point" + wraps
}

// TestTableSize checks the bytes per point that the look-up table is
// documented to take.
func TestTableSize(t *testing.T) {
	for _, tc := range []struct {
		nodes, vnodes int
		min, max      float64
	}{
		{10, 512, 8.25, 12.5}, {100, 160, 8.25, 12.5}, {1000, 512, 8.25, 12.5},
		{narrowNodes + 1, 4, 12.25, 20.5}, {70000, 1, 12.25, 20.5},
	} {
		r := mustNew(t, equalNodes(tc.nodes), WithVnodes(tc.vnodes))
		var bytes int
		if r.narrow != nil {
			bytes = 2*len(r.narrow.entries) + 4*len(r.narrow.start) + 4*len(r.narrow.more)
		} else {
			bytes = 4*len(r.wide.entries) + 4*len(r.wide.start) + 4*len(r.wide.more)
		}
		perPoint := float64(bytes) / float64(len(r.points))
		t.Logf("%d nodes × %d vnodes: %d points, table %d bytes, %.2f per point", tc.nodes, tc.vnodes, len(r.points), bytes, perPoint)
		if perPoint < tc.min || perPoint > tc.max+8/float64(len(r.points)) { // the wrapping entry and last start
			t.Errorf("%d nodes × %d vnodes: %.2f table bytes per point, want %v to %v", tc.nodes, tc.vnodes, perPoint, tc.min, tc.max)
		}
	}
}

func TestBalance(t *testing.T) {
	for _, v := range []int{150, 160, 256, 512} {
		r := mustNew(t, equalNodes(10), WithVnodes(v))
		t.Logf("10 equal nodes, %d vnodes: max share / mean = %.4f", v, maxOverMean(r))
	}
	r := mustNew(t, equalNodes(10))
	if got := maxOverMean(r); got > 1.10 {
		t.Errorf("10 equal nodes, default vnodes: max share / mean = %.4f, want <= 1.10", got)
	}
	total := 0.0
	for _, s := range r.Shares() {
		total += s
	}
	if diff := total - 1; diff > 1e-12 || diff < -1e-12 {
		t.Errorf("shares add up to %v, want 1", total)
	}
}

func maxOverMean(r *Ring) float64 {
	shares := r.Shares()
	m := 0.0
	for _, s := range shares {
		m = max(m, s)
	}
	return m * float64(len(shares))
}

func TestWeights(t *testing.T) {
	nodes := []Node{{Addr: "a:1"}, {Addr: "b:1", Weight: 1}, {Addr: "c:1"}, {Addr: "d:1", Weight: 3}}
	r := mustNew(t, nodes)
	got := r.Shares()["d:1"]
	if want := 3.0 / 6; got < want*0.9 || got > want*1.1 {
		t.Errorf("weight-3 node of {1,1,1,3} owns %.4f, want %.4f ±10%%", got, want)
	}
	if p := r.Points(); p != 6*DefaultVnodes {
		t.Errorf("Points() = %d, want %d", p, 6*DefaultVnodes)
	}
	if ideal := r.IdealShares()["d:1"]; ideal != 0.5 {
		t.Errorf("IdealShares()[d] = %v, want 0.5", ideal)
	}
}

// TestFractionalWeights checks the rule for weights that are not whole: a
// node gets round(Weight×vnodes) points, its fair share is its weight over
// the total, and a whole weight written as a float places as it always did.
func TestFractionalWeights(t *testing.T) {
	r := mustNew(t, fractionalNodes(), WithVnodes(160))
	want := map[string]int{"cache-a": 168, "cache-b": 80, "cache-c": 360, "cache-d": 160, "cache-e": 160}
	if got := countsByName(r); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("points %v, want %v", got, want)
	}
	if got := r.IdealShares()["cache-a"]; math.Abs(got-1.05/5.803) > 1e-15 {
		t.Errorf("IdealShares()[cache-a] = %v, want 1.05/5.803", got)
	}
	half := mustNew(t, []Node{{Addr: "a:1", Weight: 0.5}, {Addr: "b:1"}}, WithVnodes(3)) // 1.5 rounds up, away from zero
	if half.counts[0] != 2 {
		t.Errorf("weight 0.5 × 3 vnodes: %d points, want 2", half.counts[0])
	}
	// A 5% correction is 26 points at the default vnodes: its share moves
	// by about 5%.
	base := mustNew(t, equalNodes(4))
	nodes := equalNodes(4)
	nodes[0].Weight = 1.05
	up := mustNew(t, nodes)
	if got := up.Shares()["cache-00"] / base.Shares()["cache-00"]; got < 1.02 || got > 1.08 {
		t.Errorf("weight 1 → 1.05: share × %.3f, want about 1.05", got)
	}
	if gain := up.Shares()["cache-00"] - base.Shares()["cache-00"]; math.Abs(Moved(base, up)-gain) > 1e-12 {
		t.Errorf("weight 1 → 1.05 moved %v, not the node's gain %v", Moved(base, up), gain)
	}
}

func TestOrderIndependenceAndDeterminism(t *testing.T) {
	nodes := equalNodes(10)
	nodes[3].Weight = 2
	a := mustNew(t, nodes)
	shuffled := slices.Clone(nodes)
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	b := mustNew(t, shuffled)
	c := mustNew(t, nodes)
	for _, k := range randomKeys(100000, 3) {
		na, nb, nc := a.Locate(k), b.Locate(k), c.Locate(k)
		if na != nb || na != nc {
			t.Fatalf("Locate(%q): %v, shuffled %v, rebuilt %v", k, na, nb, nc)
		}
	}
	if Moved(a, b) != 0 {
		t.Errorf("Moved between shuffled rings = %v, want 0", Moved(a, b))
	}
}

func TestHashTags(t *testing.T) {
	r := mustNew(t, equalNodes(10))
	for i := range 1000 {
		tag := fmt.Sprintf("user%d", i)
		want := r.Locate(tag)
		for _, k := range []string{"{" + tag + "}:cart", "profile:{" + tag + "}", "{" + tag + "}", "x{" + tag + "}y{z}"} {
			if got := r.Locate(k); got != want {
				t.Fatalf("Locate(%q) = %v, want %v (node of tag %q)", k, got, want, tag)
			}
		}
	}
	for key, hashed := range map[string]string{
		"plain":       "plain",
		"{}":          "{}",
		"{}{a}":       "{}{a}", // the first '{' has an empty tag: whole key
		"a{b":         "a{b",
		"a}b{c}":      "c",
		"{a}{b}":      "a",
		"{a{b}c":      "a{b",
		"":            "",
		"{ünïcødé}:x": "ünïcødé",
	} {
		if got := HashTag(key); got != hashed {
			t.Errorf("HashTag(%q) = %q, want %q", key, got, hashed)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []Node
		opts  []Option
		want  error
	}{
		{"nil nodes", nil, nil, ErrNoNodes},
		{"empty nodes", []Node{}, nil, ErrNoNodes},
		{"empty addr", []Node{{Name: "a"}}, nil, ErrEmptyAddr},
		{"negative weight", []Node{{Addr: "a:1", Weight: -1}}, nil, ErrBadWeight},
		{"duplicate name", []Node{{Name: "x", Addr: "a:1"}, {Name: "x", Addr: "b:1"}}, nil, ErrDuplicateName},
		{"duplicate default name", []Node{{Addr: "a:1"}, {Name: "a:1", Addr: "b:1"}}, nil, ErrDuplicateName},
		{"duplicate addr", []Node{{Name: "x", Addr: "a:1"}, {Name: "y", Addr: "a:1"}}, nil, ErrDuplicateAddr},
		{"zero vnodes", []Node{{Addr: "a:1"}}, []Option{WithVnodes(0)}, ErrBadVnodes},
		{"negative vnodes", []Node{{Addr: "a:1"}}, []Option{WithVnodes(-5)}, ErrBadVnodes},
		{"absurd vnodes", []Node{{Addr: "a:1"}}, []Option{WithVnodes(1 << 30)}, ErrBadVnodes},
		{"absurd weight", []Node{{Addr: "a:1", Weight: 1 << 40}}, nil, ErrBadWeight},
		{"weight above MaxWeight", []Node{{Addr: "a:1", Weight: MaxWeight + 1}}, []Option{WithVnodes(1)}, ErrBadWeight},
		{"NaN weight", []Node{{Addr: "a:1", Weight: math.NaN()}}, nil, ErrBadWeight},
		{"infinite weight", []Node{{Addr: "a:1", Weight: math.Inf(1)}}, nil, ErrBadWeight},
		{"negative infinite weight", []Node{{Addr: "a:1", Weight: math.Inf(-1)}}, nil, ErrBadWeight},
		{"negative fractional weight", []Node{{Addr: "a:1", Weight: -0.5}}, nil, ErrBadWeight},
		{"weight below one point", []Node{{Addr: "a:1", Weight: 0.0009}}, nil, ErrBadWeight},
		{"bad tolerance", []Node{{Addr: "a:1"}}, []Option{WithEqualize(-1)}, ErrBadTolerance},
		{"too many points", []Node{{Addr: "a:1", Weight: MaxPoints / 512}, {Addr: "b:1", Weight: 1}}, nil, ErrBadWeight},
		{"no port", []Node{{Addr: "cache-a"}}, nil, ErrBadAddr},
		{"no host", []Node{{Addr: ":6379"}}, nil, ErrBadAddr},
		{"port 0", []Node{{Addr: "a:0"}}, nil, ErrBadAddr},
		{"port out of range", []Node{{Addr: "a:65536"}}, nil, ErrBadAddr},
		{"port by name", []Node{{Addr: "a:redis"}}, nil, ErrBadAddr},
		{"unbracketed IPv6", []Node{{Addr: "::1:6379"}}, nil, ErrBadAddr},
		{"bad second node", []Node{{Addr: "a:1"}, {Name: "b", Addr: "b:1:2"}}, nil, ErrBadAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.nodes, tc.opts...)
			if !errors.Is(err, tc.want) || r != nil {
				t.Fatalf("New = %v, %v; want nil, %v", r, err, tc.want)
			}
		})
	}
}

// TestGoodAddrs checks the address forms New accepts.
func TestGoodAddrs(t *testing.T) {
	for _, a := range []string{"cache-a:6379", "10.0.0.1:11211", "[::1]:6379", "localhost:1", "h:65535"} {
		if err := CheckAddr(a); err != nil {
			t.Errorf("CheckAddr(%q) = %v", a, err)
		}
		if _, err := New([]Node{{Addr: a}}); err != nil {
			t.Errorf("New with address %q: %v", a, err)
		}
	}
}

func TestNodesDefaultsAndCopy(t *testing.T) {
	r := mustNew(t, []Node{{Addr: "b:1"}, {Name: "a", Addr: "a:1", Weight: 2}})
	got := r.Nodes()
	want := []Node{{Name: "a", Addr: "a:1", Weight: 2}, {Name: "b:1", Addr: "b:1", Weight: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("Nodes() = %v, want %v", got, want)
	}
	got[0].Name = "changed"
	if r.Nodes()[0].Name != "a" {
		t.Fatal("Nodes() exposes the ring's own slice")
	}
	var _ Locator = r
}

func TestLocateDoesNotAllocate(t *testing.T) {
	for _, r := range []*Ring{mustNew(t, equalNodes(10)), mustNew(t, equalNodes(narrowNodes+1), WithVnodes(2))} {
		for _, k := range []string{"user:42:session", "{user42}:cart", "k"} {
			if a := testing.AllocsPerRun(1000, func() { _ = r.Locate(k) }); a != 0 {
				t.Errorf("%d nodes: Locate(%q) allocates %v times per call, want 0", len(r.nodes), k, a)
			}
		}
	}
}

// TestHashScansForTags checks hasBrace, Hash's shortcut for keys without a
// tag, against its definition: a '{' or '}' at every place of keys of every
// length up to 40 bytes.
func TestHashScansForTags(t *testing.T) {
	for n := range 41 {
		base := strings.Repeat("x", n)
		keys := []string{base}
		for i := range n {
			for _, c := range []string{"{", "}", "\x7b\x7b", "\xfb", "\x00"} {
				keys = append(keys, (base[:i] + c + base[i:])[:n])
			}
			if i+2 < n {
				keys = append(keys, base[:i]+"{y}"+base[i+3:])
			}
		}
		for _, k := range keys {
			if got, want := hasBrace(k), strings.IndexByte(k, '{') >= 0; got != want {
				t.Fatalf("hasBrace(%q) = %v, want %v", k, got, want)
			}
			if got, want := Hash(k), murmur3.StringSum64(HashTag(k)); got != want {
				t.Fatalf("Hash(%q) = %#x, want murmur3 of %q = %#x", k, got, HashTag(k), want)
			}
		}
	}
}

// TestHashIsMurmur3 pins the hash function to published murmur3 x64_128
// values (seed 0, first half), the values spaolacci/murmur3 gives too.
func TestHashIsMurmur3(t *testing.T) {
	for s, want := range map[string]uint64{"": 0, "hello": 0xcbd8a7b341bd9b02} {
		if got := Hash(s); got != want {
			t.Errorf("Hash(%q) = %#x, want %#x", s, got, want)
		}
	}
}
