package ring

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
)

func mustKetama(t testing.TB, nodes []Node, opts ...KetamaOption) *Ketama {
	t.Helper()
	k, err := NewKetama(nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// refKetama is the continuum written the plain way, as nc_ketama.c reads:
// every point appended in server order, a stable sort, a linear search.
type refKetama struct {
	values []uint32
	owners []int
}

func newRefKetama(names []string, weights []int) *refKetama {
	total := 0
	for _, w := range weights {
		total += w
	}
	r := &refKetama{}
	type pt struct {
		v uint32
		o int
	}
	var pts []pt
	for i, name := range names {
		pct := float32(weights[i]) / float32(total)
		per := int(math.Floor(float64(float32(float64(float32(float32(pct*160)/4*float32(len(names)))) + 1e-10))))
		for d := 0; d < per; d++ {
			sum := md5.Sum([]byte(fmt.Sprintf("%s-%d", name, d)))
			for x := 0; x < 4; x++ {
				pts = append(pts, pt{binary.LittleEndian.Uint32(sum[4*x:]), i})
			}
		}
	}
	sort.SliceStable(pts, func(a, b int) bool { return pts[a].v < pts[b].v })
	for _, p := range pts {
		r.values, r.owners = append(r.values, p.v), append(r.owners, p.o)
	}
	return r
}

func (r *refKetama) locate(key string) int {
	sum := md5.Sum([]byte(key))
	h := binary.LittleEndian.Uint32(sum[:4])
	for i, v := range r.values {
		if v >= h {
			return r.owners[i]
		}
	}
	return r.owners[0]
}

func TestKetamaNames(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.0.1:11211":  "10.0.0.1", // libmemcached's rule: no port when it is the default
		"10.0.0.1:11212":  "10.0.0.1:11212",
		"cache-a:6379":    "cache-a:6379",
		"localhost:11211": "localhost",
		"no-port":         "no-port",
	} {
		if got := KetamaName(addr); got != want {
			t.Errorf("KetamaName(%q) = %q, want %q", addr, got, want)
		}
	}
	k := mustKetama(t, []Node{{Addr: "10.0.0.1:11211"}, {Name: "beta", Addr: "10.0.0.2:11211"}, {Addr: "10.0.0.3:22122"}})
	var names []string
	for _, n := range k.Nodes() {
		names = append(names, n.Name)
	}
	if got := strings.Join(names, ","); got != "10.0.0.1,10.0.0.3:22122,beta" {
		t.Errorf("names %s, want 10.0.0.1,10.0.0.3:22122,beta (sorted)", got)
	}
}

func TestKetamaPoints(t *testing.T) {
	for _, tc := range []struct {
		weights []int
		want    []int
	}{
		{[]int{1, 1, 1}, []int{160, 160, 160}},
		{[]int{1, 2, 3}, []int{80, 160, 240}},
		{[]int{0, 1}, []int{160, 160}}, // weight 0 counts as 1
		// libmemcached's weighted test pool, 10.0.1.1-8: its continuum
		// gives these counts (float32 rounding included).
		{[]int{600, 300, 200, 350, 1000, 800, 950, 100}, []int{176, 88, 56, 104, 296, 236, 280, 28}},
	} {
		var ns []Node
		for i, w := range tc.weights {
			ns = append(ns, Node{Addr: fmt.Sprintf("10.0.1.%d:11211", i+1), Weight: float64(w)})
		}
		if got := mustKetama(t, ns).Points(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("weights %v: points %v, want %v", tc.weights, got, tc.want)
		}
	}
}

// TestKetamaLocate checks the continuum and its look-up against the plain
// reference, for mixed weights, names and ports.
func TestKetamaLocate(t *testing.T) {
	nodes := []Node{
		{Addr: "127.0.0.1:11211", Weight: 1},
		{Name: "beta", Addr: "127.0.0.1:11212", Weight: 3},
		{Addr: "127.0.0.1:11213", Weight: 2},
		{Addr: "cache-d:11211", Weight: 1},
	}
	k := mustKetama(t, nodes)
	ref := newRefKetama([]string{"127.0.0.1", "beta", "127.0.0.1:11213", "cache-d"}, []int{1, 3, 2, 1})
	if fmt.Sprint(k.values) != fmt.Sprint(ref.values) {
		t.Fatal("continuum differs from the reference")
	}
	for i := range 20000 {
		key := fmt.Sprintf("key:%d", i)
		if got, want := k.Locate(key).Addr, nodes[ref.locate(key)].Addr; got != want {
			t.Fatalf("Locate(%q) = %s, want %s", key, got, want)
		}
	}
}

// TestKetamaTie pins the tie rule on two servers that share a point: the
// server listed first owns it, whatever the names.
func TestKetamaTie(t *testing.T) {
	a, b := Node{Name: "s177", Addr: "h1:1"}, Node{Name: "s1469", Addr: "h2:1"}
	ab, ba := mustKetama(t, []Node{a, b}), mustKetama(t, []Node{b, a})
	tie, ties := uint32(0), 0
	for i := 1; i < len(ab.values); i++ {
		if ab.values[i] == ab.values[i-1] {
			tie, ties = ab.values[i], ties+1
		}
	}
	if ties != 1 {
		t.Fatalf("%d shared points, want 1: the pair no longer collides", ties)
	}
	if got := ab.nodes[ab.owners[ab.index(tie)]]; got.Name != a.Name {
		t.Errorf("listed a, b: the shared point goes to %v, want a", got)
	}
	if got := ba.nodes[ba.owners[ba.index(tie)]]; got.Name != b.Name {
		t.Errorf("listed b, a: the shared point goes to %v, want b", got)
	}
}

func TestKetamaHashTag(t *testing.T) {
	k := mustKetama(t, equalNodes(5), WithKetamaHashTag("{}"))
	plain := mustKetama(t, equalNodes(5))
	for i := range 300 {
		k1, k2 := fmt.Sprintf("{user%d}:cart", i), fmt.Sprintf("session:{user%d}", i)
		if k.Locate(k1) != k.Locate(k2) || k.Locate(k1) != plain.Locate(fmt.Sprintf("user%d", i)) {
			t.Fatalf("%s, %s: hash tag not hashed alone", k1, k2)
		}
	}
	other := mustKetama(t, equalNodes(5), WithKetamaHashTag("<>"))
	if other.Locate("a<user1>b") != plain.Locate("user1") {
		t.Error("tag <> not honoured")
	}
}

func TestNewKetamaErrors(t *testing.T) {
	long := strings.Repeat("n", 83) // "nnn…-39" is 86 bytes: over twemproxy's 85
	for _, tc := range []struct {
		nodes []Node
		opts  []KetamaOption
		want  error
	}{
		{nil, nil, ErrNoNodes},
		{[]Node{{Name: "a"}}, nil, ErrEmptyAddr},
		{[]Node{{Addr: "a:1", Weight: -2}}, nil, ErrBadWeight},
		{[]Node{{Addr: "a:1", Weight: math.MaxInt32}, {Addr: "b:1", Weight: 2}}, nil, ErrBadWeight},
		{[]Node{{Addr: "a:1", Weight: 1.5}}, nil, ErrBadWeight}, // twemproxy's weights are whole
		{[]Node{{Addr: "a:1", Weight: 0.5}}, nil, ErrBadWeight},
		{[]Node{{Addr: "a:1", Weight: math.NaN()}}, nil, ErrBadWeight},
		// "h:11211" is named "h", as is the second node.
		{[]Node{{Addr: "h:11211"}, {Name: "h", Addr: "g:1"}}, nil, ErrDuplicateName},
		{[]Node{{Addr: "h:1"}, {Name: "x", Addr: "h:1"}}, nil, ErrDuplicateAddr},
		{[]Node{{Name: long, Addr: "a:1"}}, nil, ErrLongName},
		{[]Node{{Addr: "a:1"}}, []KetamaOption{WithKetamaHashTag("{")}, ErrBadHashTag},
		{[]Node{{Addr: "a:1"}}, []KetamaOption{WithKetamaKeyHash("crc32")}, ErrBadHash},
	} {
		if _, err := NewKetama(tc.nodes, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("NewKetama(%v) = %v, want %v", tc.nodes, err, tc.want)
		}
	}
	if _, err := NewKetama([]Node{{Name: long[:82], Addr: "a:1"}}); err != nil {
		t.Errorf("82-byte name (points up to \"-39\", 85 bytes): %v", err)
	}
}

func TestKetamaShares(t *testing.T) {
	k := mustKetama(t, []Node{{Addr: "a:1"}, {Addr: "b:1", Weight: 2}, {Addr: "c:1", Weight: 3}})
	s := k.Shares()
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Errorf("shares add up to %v", sum)
	}
	counts := map[string]int{}
	const keys = 200000
	for i := range keys {
		counts[k.Locate(fmt.Sprint("k", i)).Name]++
	}
	for name, share := range s {
		if got := float64(counts[name]) / keys; math.Abs(got-share) > 0.01 {
			t.Errorf("%s: share %v, keys located %v", name, share, got)
		}
	}
}
