package balance_test

import (
	"fmt"
	"log"

	"github.com/shardcache/shardcache/cmd/shardcache/internal/balance"
	"github.com/shardcache/shardcache/ring"
)

// Four nodes of weight 1, d with a quarter of the others' memory: full and
// evicting, while the others hold about 6 GiB of their 16.
func ExamplePropose() {
	const gib = 1 << 30
	var readings []balance.Reading
	for i, limit := range []int64{16 * gib, 16 * gib, 16 * gib, 4 * gib} {
		n := ring.Node{Name: string(rune('a' + i)), Addr: fmt.Sprintf("10.0.0.%d:6379", i+1)}
		r := balance.Reading{Node: n, Bytes: 6 * gib, Limit: limit}
		if limit == 4*gib {
			r.Bytes, r.Evictions = 4*gib, 120000
		}
		readings = append(readings, r)
	}
	p, err := balance.Propose(readings, ring.DefaultVnodes, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("fill max/mean %.2f → %.2f\n", p.Skew, p.NewSkew)
	for _, n := range p.Nodes {
		fmt.Printf("%s: weight %g, share %.0f%% → %.0f%%\n", n.Node.Name, n.Weight, 100*n.Share, 100*n.NewShare)
	}
	// Output:
	// fill max/mean 1.88 → 1.01
	// a: weight 1, share 25% → 31%
	// b: weight 1.04, share 25% → 31%
	// c: weight 0.998, share 24% → 31%
	// d: weight 0.236, share 26% → 8%
}
