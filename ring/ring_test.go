package ring

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
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

// TestLocateMatchesBinarySearch checks the bucket index against the
// definition: the first point at or after the hash, wrapping round.
func TestLocateMatchesBinarySearch(t *testing.T) {
	for _, tc := range []struct {
		nodes  int
		vnodes int
	}{{1, 1}, {2, 1}, {3, 7}, {10, 512}, {100, 160}} {
		r := mustNew(t, equalNodes(tc.nodes), WithVnodes(tc.vnodes))
		hashes := []uint64{0, 1, 1<<63 - 1, 1 << 63, ^uint64(0)}
		for _, p := range r.points {
			hashes = append(hashes, p.hash-1, p.hash, p.hash+1)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 10000 {
			hashes = append(hashes, rng.Uint64())
		}
		for _, h := range hashes {
			want := sort.Search(len(r.points), func(i int) bool { return r.points[i].hash >= h })
			if want == len(r.points) {
				want = 0
			}
			if got := r.search(h); got != want {
				t.Fatalf("%d nodes × %d vnodes: search(%#x) = %d, want %d", tc.nodes, tc.vnodes, h, got, want)
			}
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
		{"too many points", []Node{{Addr: "a:1", Weight: MaxPoints / 512}, {Addr: "b:1", Weight: 1}}, nil, ErrBadWeight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.nodes, tc.opts...)
			if !errors.Is(err, tc.want) || r != nil {
				t.Fatalf("New = %v, %v; want nil, %v", r, err, tc.want)
			}
		})
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
	r := mustNew(t, equalNodes(10))
	if a := testing.AllocsPerRun(1000, func() { _ = r.Locate("user:42:session") }); a != 0 {
		t.Errorf("Locate allocates %v times per call, want 0", a)
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
