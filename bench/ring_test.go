package bench

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"
	jump "github.com/dgryski/go-jump"
	rendezvous "github.com/dgryski/go-rendezvous"
	"github.com/golang/groupcache/consistenthash"
	"github.com/stathat/consistent"
	"github.com/twmb/murmur3"

	"github.com/shardcache/shardcache/ring"
)

// nodeCounts are the fleet sizes every placement is measured at.
var nodeCounts = []int{10, 100, 1000}

// keys are generated once, so that the benchmarks measure placement only.
// Their count is a power of two: a benchmark cycles through them with a mask.
const keyMask = 1<<16 - 1

var keys = func() []string {
	rng := rand.New(rand.NewPCG(1, 2))
	ks := make([]string, keyMask+1)
	for i := range ks {
		ks[i] = "user:" + strconv.FormatUint(rng.Uint64N(1e9), 10) + ":session"
	}
	return ks
}()

// fleet returns n nodes of weight 1 named like a fleet of hosts.
func fleet(n int) []ring.Node {
	ns := make([]ring.Node, n)
	for i := range ns {
		ns[i] = ring.Node{
			Name: fmt.Sprintf("cache-%04d", i),
			Addr: fmt.Sprintf("10.0.%d.%d:6379", i/250, i%250+1),
		}
	}
	return ns
}

// placements holds one instance of each placement for a fleet size. A
// 1000-node ring of 512 vnodes per node takes a while to build, so each size is
// built once and shared by the tests and every -count round.
type placements struct {
	names      []string // node names, in fleet order
	shardcache *ring.Ring
	bucket     *bucketRing
	binary     *binaryRing
	rendezvous *rendezvous.Rendezvous
	stathat    *consistent.Consistent
	groupcache *consistenthash.Map
}

// groupcacheReplicas gives groupcache as many points per node as ring.Ring.
const groupcacheReplicas = ring.DefaultVnodes

var (
	built   = map[int]*placements{}
	builtMu sync.Mutex
)

func build(tb testing.TB, n int) *placements {
	tb.Helper()
	builtMu.Lock()
	defer builtMu.Unlock()
	if p := built[n]; p != nil {
		return p
	}
	nodes := fleet(n)
	names := make([]string, n)
	for i, nd := range nodes {
		names[i] = nd.Name
	}
	r, err := ring.New(nodes)
	if err != nil {
		tb.Fatalf("ring.New(%d nodes): %v", n, err)
	}
	st := consistent.New() // default: 20 replicas, crc32
	st.Set(names)
	gc := consistenthash.New(groupcacheReplicas, nil) // nil: crc32.ChecksumIEEE
	gc.Add(names...)
	binary := newBinaryRing(nodes, ring.DefaultVnodes)
	p := &placements{
		names:      names,
		shardcache: r,
		bucket:     newBucketRing(binary),
		binary:     binary,
		// go-redis v9 Ring's default: rendezvous hashing over xxhash.
		rendezvous: rendezvous.New(names, xxhash.Sum64String),
		stathat:    st,
		groupcache: gc,
	}
	built[n] = p
	return p
}

// locators returns each placement as a function from key to node name, in the
// order of the benchmark rows.
func (p *placements) locators() []struct {
	name   string
	locate func(string) string
} {
	return []struct {
		name   string
		locate func(string) string
	}{
		{"shardcache", func(k string) string { return p.shardcache.Locate(k).Name }},
		{"bucketscan", func(k string) string { return p.bucket.Locate(k).Name }},
		{"binarysearch", func(k string) string { return p.binary.Locate(k).Name }},
		{"hash", func(k string) string { return p.names[ring.Hash(k)>>32*uint64(len(p.names))>>32] }},
		{"jump", func(k string) string { return p.names[jump.Hash(murmur3.StringSum64(k), len(p.names))] }},
		{"rendezvous", p.rendezvous.Lookup},
		{"stathat", func(k string) string {
			n, err := p.stathat.Get(k)
			if err != nil {
				panic(err)
			}
			return n
		}},
		{"groupcache", p.groupcache.Get},
	}
}

// TestBinaryRingMatchesShardcache makes the binarysearch and bucketscan rows
// a fair comparison: they must place every key where ring.Ring does.
func TestBinaryRingMatchesShardcache(t *testing.T) {
	for _, n := range nodeCounts {
		p := build(t, n)
		if got, want := len(p.binary.hashes), p.shardcache.Points(); got != want {
			t.Fatalf("%d nodes: binary ring has %d points, ring.Ring %d", n, got, want)
		}
		for _, k := range keys[:10000] {
			want := p.shardcache.Locate(k)
			if got := p.binary.Locate(k); got != want {
				t.Fatalf("%d nodes: key %q: binary ring gives %+v, ring.Ring %+v", n, k, got, want)
			}
			if got := p.bucket.Locate(k); got != want {
				t.Fatalf("%d nodes: key %q: bucket ring gives %+v, ring.Ring %+v", n, k, got, want)
			}
		}
	}
}

// TestLocatorsReturnFleetNodes checks that every placement is wired to the
// same fleet and answers with one of its nodes, spread over most of them.
func TestLocatorsReturnFleetNodes(t *testing.T) {
	for _, n := range nodeCounts {
		p := build(t, n)
		for _, l := range p.locators() {
			seen := map[string]bool{}
			for _, k := range keys[:10000] {
				got := l.locate(k)
				if !slices.Contains(p.names, got) {
					t.Fatalf("%d nodes, %s: key %q placed on %q, not a node of the fleet", n, l.name, k, got)
				}
				seen[got] = true
			}
			// 10 keys a node on average at 1000 nodes: every placement
			// worth the name reaches nearly all of them.
			if len(seen) < n*9/10 {
				t.Errorf("%d nodes, %s: 10000 keys reached only %d nodes", n, l.name, len(seen))
			}
		}
	}
}

// sink keeps the compiler from discarding a look-up's result.
var sink string

// BenchmarkLocate times one key-to-node look-up per op for each placement at
// each fleet size, side by side in one run.
func BenchmarkLocate(b *testing.B) {
	for _, n := range nodeCounts {
		b.Run("nodes="+strconv.Itoa(n), func(b *testing.B) {
			p := build(b, n)
			// Each row calls its library directly, not through locators,
			// so that no closure call is measured.
			b.Run("shardcache", func(b *testing.B) {
				b.ReportAllocs()
				r := p.shardcache
				var s string
				for i := 0; b.Loop(); i++ {
					s = r.Locate(keys[i&keyMask]).Name
				}
				sink = s
			})
			b.Run("bucketscan", func(b *testing.B) {
				b.ReportAllocs()
				r := p.bucket
				var s string
				for i := 0; b.Loop(); i++ {
					s = r.Locate(keys[i&keyMask]).Name
				}
				sink = s
			})
			b.Run("binarysearch", func(b *testing.B) {
				b.ReportAllocs()
				r := p.binary
				var s string
				for i := 0; b.Loop(); i++ {
					s = r.Locate(keys[i&keyMask]).Name
				}
				sink = s
			})
			// The floor of any placement that hashes keys as the ring
			// does: ring.Hash, then a multiply-shift onto the node list.
			b.Run("hash", func(b *testing.B) {
				b.ReportAllocs()
				names := p.names
				var s string
				for i := 0; b.Loop(); i++ {
					s = names[ring.Hash(keys[i&keyMask])>>32*uint64(len(names))>>32]
				}
				sink = s
			})
			b.Run("jump", func(b *testing.B) {
				b.ReportAllocs()
				names := p.names
				var s string
				for i := 0; b.Loop(); i++ {
					s = names[jump.Hash(murmur3.StringSum64(keys[i&keyMask]), len(names))]
				}
				sink = s
			})
			b.Run("rendezvous", func(b *testing.B) {
				b.ReportAllocs()
				r := p.rendezvous
				var s string
				for i := 0; b.Loop(); i++ {
					s = r.Lookup(keys[i&keyMask])
				}
				sink = s
			})
			b.Run("stathat", func(b *testing.B) {
				b.ReportAllocs()
				c := p.stathat
				var s string
				for i := 0; b.Loop(); i++ {
					s, _ = c.Get(keys[i&keyMask])
				}
				sink = s
			})
			b.Run("groupcache", func(b *testing.B) {
				b.ReportAllocs()
				m := p.groupcache
				var s string
				for i := 0; b.Loop(); i++ {
					s = m.Get(keys[i&keyMask])
				}
				sink = s
			})
		})
	}
}

// BenchmarkRingPaired pairs ring look-ups that must cost the same, or
// nearly, against the classic ring's Locate, at each fleet size of
// pairedCounts:
//
//   - equalized: Locate on the equalized ring of the same fleet
//     (ring.WithEqualize): a read of its table of slots, 128 KiB to 2 MiB
//     by the node count, where the classic ring reads two entries of a
//     table of 8 to 12 bytes a point;
//   - locate3: AppendLocateN of 3 replicas into a buffer of the caller's,
//     what a client with Options.Replicas = 3 pays to place a key.
func BenchmarkRingPaired(b *testing.B) {
	for _, n := range pairedCounts {
		b.Run("nodes="+strconv.Itoa(n), func(b *testing.B) {
			classic := build(b, n).shardcache
			equalized, err := ring.New(fleet(n), ring.WithEqualize(0))
			if err != nil {
				b.Fatal(err)
			}
			var s string
			locate := func(r *ring.Ring) func(int) error {
				return func(i int) error {
					s = r.Locate(keys[i&keyMask]).Name
					return nil
				}
			}
			b.Run("equalized", pairedSerial(locate(classic), locate(equalized)))
			var buf [3]ring.Node
			b.Run("locate3", pairedSerial(locate(classic), func(i int) error {
				s = classic.AppendLocateN(buf[:0], keys[i&keyMask], 3)[2].Name
				return nil
			}))
			sink = s
		})
	}
}

// pairedCounts are BenchmarkRingPaired's fleet sizes: the equalized ring's
// table grows with the bits a node number takes, 2 at 3 nodes.
var pairedCounts = []int{3, 10, 100, 1000}

// BenchmarkNewEqualized times ring.New of an equalized ring, beside the
// classic one's, at each fleet size: what a client pays on a change of
// nodes, once per change.
func BenchmarkNewEqualized(b *testing.B) {
	for _, n := range []int{3, 10, 100} {
		nodes := fleet(n)
		for _, row := range []struct {
			name string
			opts []ring.Option
		}{{"classic", nil}, {"equalized", []ring.Option{ring.WithEqualize(0)}}} {
			b.Run("nodes="+strconv.Itoa(n)+"/"+row.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := ring.New(nodes, row.opts...); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
