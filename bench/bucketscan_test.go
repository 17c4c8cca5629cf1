package bench

import (
	"math/bits"
	"strings"

	"github.com/twmb/murmur3"

	"github.com/shardcache/shardcache/ring"
)

// bucketRing is ring.Ring as it was before its look-up table (commit
// e8224a8): the same points, found through a table of one int32 per bucket
// (the index of the bucket's first point, at least one bucket per point) and
// a scan of the bucket. It is the "before" of the table, measured in the same
// run as the "after".
type bucketRing struct {
	// Inputs.
	nodes []ring.Node // sorted by Name, as ring.Ring keeps them

	// Internal data.
	// points are sorted by hash, with distinct hashes; the owner sits next
	// to the hash, as it did in ring.Ring.
	points []bucketPoint
	// bucket[b] is the index of the first point whose top bits are >= b;
	// bucket[len-1] == len(points).
	bucket []int32
	shift  uint // 64 - log2(buckets)
}

type bucketPoint struct {
	hash  uint64
	owner int32
}

// newBucketRing builds a bucketRing of the points of b, which places keys as
// ring.Ring does.
func newBucketRing(b *binaryRing) *bucketRing {
	r := &bucketRing{nodes: b.nodes, points: make([]bucketPoint, len(b.hashes))}
	for i := range b.hashes {
		r.points[i] = bucketPoint{b.hashes[i], b.owners[i]}
	}
	n := bits.Len(uint(len(r.points))) // 1<<n > len(points)
	r.shift = uint(64 - n)
	r.bucket = make([]int32, 1<<n+1)
	i := 0
	for k := range 1 << n {
		start := uint64(k) << r.shift
		for i < len(r.points) && r.points[i].hash < start {
			i++
		}
		r.bucket[k] = int32(i)
	}
	r.bucket[1<<n] = int32(len(r.points))
	return r
}

// Locate is the old ring.Ring.Locate, old ring.Hash included.
func (r *bucketRing) Locate(key string) ring.Node {
	return r.nodes[r.points[r.search(oldHash(key))].owner]
}

// oldHash is ring.Hash as it was: the same value, through strings.IndexByte.
func oldHash(key string) uint64 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return murmur3.StringSum64(key)
}

func (r *bucketRing) search(h uint64) int {
	b := h >> r.shift
	i, end := int(r.bucket[b]), int(r.bucket[b+1])
	for i < end && r.points[i].hash < h {
		i++
	}
	if i == len(r.points) {
		return 0
	}
	return i
}
