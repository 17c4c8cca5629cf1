package bench

import (
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/cespare/xxhash/v2"
	rendezvous "github.com/dgryski/go-rendezvous"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/ring"
)

// The interop placements of package ring beside the implementations they
// reproduce: gomemcache's ServerList.PickServer, go-redis's Ring (through
// GetShardClientForKey, and its rendezvous alone, as go-rendezvous), and a
// straightforward ketama written the way libketama reads.

// interopCounts are the fleet sizes of the interop rows: proxies and
// client-side lists run tens of servers, rarely a thousand.
var interopCounts = []int{10, 100}

// simpleKetama is ketama written plainly: every point in a slice of
// structs, sorted, and sort.Search for a key's MD5.
type simpleKetama struct {
	points []ketamaPoint
	addrs  []string
}

type ketamaPoint struct {
	value uint32
	node  int
}

func newSimpleKetama(nodes []ring.Node) *simpleKetama {
	k := &simpleKetama{}
	// Equal weights: 160 points a server, 40 digests of 4, as C computes
	// it in float: 1/n × 160 / 4 × n, which rounds below 40 at some n.
	pct := 1 / float32(len(nodes))
	digests := int(math.Floor(float64(float32(float64(float32(float32(pct*160)/4*float32(len(nodes)))) + 1e-10))))
	for i, n := range nodes {
		k.addrs = append(k.addrs, n.Addr)
		for d := range digests {
			sum := md5.Sum([]byte(n.Name + "-" + strconv.Itoa(d)))
			for x := range 4 {
				k.points = append(k.points, ketamaPoint{binary.LittleEndian.Uint32(sum[4*x:]), i})
			}
		}
	}
	sort.SliceStable(k.points, func(a, b int) bool { return k.points[a].value < k.points[b].value })
	return k
}

func (k *simpleKetama) locate(key string) string {
	sum := md5.Sum([]byte(key))
	h := binary.LittleEndian.Uint32(sum[:4])
	i := sort.Search(len(k.points), func(i int) bool { return k.points[i].value >= h })
	if i == len(k.points) {
		i = 0
	}
	return k.addrs[k.points[i].node]
}

// interop holds, for a fleet size, each placement of ours and the original
// it reproduces.
type interop struct {
	ketama     *ring.Ketama
	simple     *simpleKetama
	modulo     *ring.Modulo
	serverList *memcache.ServerList
	rendezvous *ring.Rendezvous
	goRedis    *redis.Ring
	dgryski    *rendezvous.Rendezvous
	addrOf     map[string]string // go-rendezvous answers with a shard name
}

// loopbackFleet is n servers on loopback ports that nothing dials: go-redis
// sends no heartbeat within the hour, and the ServerList only resolves.
func loopbackFleet(n int) []ring.Node {
	nodes := make([]ring.Node, n)
	for i := range nodes {
		nodes[i] = ring.Node{Name: fmt.Sprintf("cache-%04d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
	}
	return nodes
}

func buildInterop(tb testing.TB, n int) *interop {
	tb.Helper()
	nodes := loopbackFleet(n)
	addrs, shards, names := make([]string, n), map[string]string{}, make([]string, n)
	p := &interop{addrOf: map[string]string{}}
	for i, nd := range nodes {
		addrs[i], names[i] = nd.Addr, nd.Name
		shards[nd.Name] = nd.Addr
		p.addrOf[nd.Name] = nd.Addr
	}
	var err error
	if p.ketama, err = ring.NewKetama(nodes); err != nil {
		tb.Fatal(err)
	}
	p.simple = newSimpleKetama(nodes)
	if p.modulo, err = ring.NewModulo(addrs); err != nil {
		tb.Fatal(err)
	}
	p.serverList = new(memcache.ServerList)
	if err := p.serverList.SetServers(addrs...); err != nil {
		tb.Fatal(err)
	}
	if p.rendezvous, err = ring.NewRendezvous(nodes); err != nil {
		tb.Fatal(err)
	}
	p.goRedis = redis.NewRing(&redis.RingOptions{Addrs: shards, HeartbeatFrequency: time.Hour})
	tb.Cleanup(func() { p.goRedis.Close() })
	p.dgryski = rendezvous.New(names, xxhash.Sum64String)
	return p
}

// TestInteropMatchesOriginals makes the rows a fair comparison: each pair
// places every key alike.
func TestInteropMatchesOriginals(t *testing.T) {
	for _, n := range interopCounts {
		p := buildInterop(t, n)
		for i, k := range keys[:10000] {
			if i%7 == 0 {
				k = "{" + k + "}:tagged" // go-redis hashes the tag alone
			}
			if got, want := p.ketama.Locate(k).Addr, p.simple.locate(k); got != want {
				t.Fatalf("%d nodes, %q: Ketama %s, simple ketama %s", n, k, got, want)
			}
			a, err := p.serverList.PickServer(k)
			if err != nil || a.String() != p.modulo.Locate(k).Addr {
				t.Fatalf("%d nodes, %q: PickServer %v %v, Modulo %s", n, k, a, err, p.modulo.Locate(k).Addr)
			}
			c, err := p.goRedis.GetShardClientForKey(k)
			if err != nil || c.Options().Addr != p.rendezvous.Locate(k).Addr {
				t.Fatalf("%d nodes, %q: go-redis Ring %v %v, Rendezvous %s", n, k, c, err, p.rendezvous.Locate(k).Addr)
			}
			if got := p.addrOf[p.dgryski.Lookup(ring.HashTag(k))]; got != p.rendezvous.Locate(k).Addr {
				t.Fatalf("%d nodes, %q: go-rendezvous %s, Rendezvous %s", n, k, got, p.rendezvous.Locate(k).Addr)
			}
		}
	}
}

var addrSink string

// BenchmarkInteropLocate times one look-up per op of each interop placement
// beside its original, at each fleet size, in one run.
func BenchmarkInteropLocate(b *testing.B) {
	for _, n := range interopCounts {
		b.Run("nodes="+strconv.Itoa(n), func(b *testing.B) {
			p := buildInterop(b, n)
			row := func(name string, locate func(string) string) {
				b.Run(name, func(b *testing.B) {
					b.ReportAllocs()
					start := cpuTime(b)
					var s string
					for i := 0; b.Loop(); i++ {
						s = locate(keys[i&keyMask])
					}
					reportCPU(b, start)
					addrSink = s
				})
			}
			row("ketama/shardcache", func(k string) string { return p.ketama.Locate(k).Addr })
			row("ketama/simple", p.simple.locate)
			row("modulo/shardcache", func(k string) string { return p.modulo.Locate(k).Addr })
			row("modulo/gomemcache", func(k string) string {
				a, _ := p.serverList.PickServer(k)
				return a.String()
			})
			row("rendezvous/shardcache", func(k string) string { return p.rendezvous.Locate(k).Addr })
			row("rendezvous/goredis-ring", func(k string) string {
				c, _ := p.goRedis.GetShardClientForKey(k)
				return c.Options().Addr
			})
			row("rendezvous/go-rendezvous", p.dgryski.Lookup)
		})
	}
}

var _ net.Addr // PickServer answers with one
