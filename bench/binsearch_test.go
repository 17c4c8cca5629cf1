package bench

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/twmb/murmur3"

	"github.com/shardcache/shardcache/ring"
)

// binaryRing is ring.Ring without its bucket index: the same points, built by
// the same rules (Name+"#VN"+i hashed with murmur3, ties kept by the node whose
// Name sorts first), found by binary search. It isolates what the index buys.
type binaryRing struct {
	// Inputs.
	nodes []ring.Node // sorted by Name, as ring.Ring keeps them

	// Internal data.
	// hashes are the points, sorted and distinct; owners[i] is the index in
	// nodes of the point hashes[i]. Kept apart so the search touches only
	// hashes.
	hashes []uint64
	owners []int32
}

// newBinaryRing builds a binaryRing of vnodes points per node. Every node must
// have a Name and is given weight 1: the benchmarks use equal nodes.
func newBinaryRing(nodes []ring.Node, vnodes int) *binaryRing {
	ns := slices.SortedFunc(slices.Values(nodes), func(a, b ring.Node) int { return cmp.Compare(a.Name, b.Name) })
	for i := range ns {
		ns[i].Weight = 1
	}
	type point struct {
		hash  uint64
		owner int32
	}
	pts := make([]point, 0, len(ns)*vnodes)
	for i, n := range ns {
		for v := range vnodes {
			pts = append(pts, point{murmur3.StringSum64(n.Name + "#VN" + strconv.Itoa(v)), int32(i)})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.owner, b.owner))
	})
	pts = slices.CompactFunc(pts, func(a, b point) bool { return a.hash == b.hash })

	r := &binaryRing{nodes: ns, hashes: make([]uint64, len(pts)), owners: make([]int32, len(pts))}
	for i, p := range pts {
		r.hashes[i], r.owners[i] = p.hash, p.owner
	}
	return r
}

// Locate returns the node of the first point at or after the key's hash,
// wrapping to the first point.
func (r *binaryRing) Locate(key string) ring.Node {
	i, _ := slices.BinarySearch(r.hashes, ring.Hash(key))
	if i == len(r.hashes) {
		i = 0
	}
	return r.nodes[r.owners[i]]
}
