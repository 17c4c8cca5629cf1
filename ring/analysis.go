package ring

import (
	"maps"
	"math"
	"slices"
)

// The analysis works on arcs: the half-open stretch of hash space (p[i-1], p[i]]
// belongs to the owner of point p[i], and the stretch after the last point
// wraps round to the first point's owner. Fractions are exact up to float64
// rounding; nothing is sampled. An equalized ring's arcs are its runs of
// slots (slotTable.points).

// space is the size of the hash space, 2^64, as a float64.
const space = 1 << 64

// Shares returns the fraction of the hash space each node owns, by Name. The
// fractions add up to 1.
func (r *Ring) Shares() map[string]float64 {
	s := make(map[string]float64, len(r.nodes))
	if r.slots != nil { // exact: a slot is 2^-slotBits of the space
		for i, n := range r.nodes {
			s[n.Name] = float64(r.counts[i]) / slotCount
		}
		return s
	}
	for _, n := range r.nodes {
		s[n.Name] = 0
	}
	overlay(r, r, func(a, _ int32, length float64) {
		s[r.nodes[a].Name] += length / space
	})
	return s
}

// IdealShares returns the share each node would own on a perfect ring:
// its weight over the total weight.
func (r *Ring) IdealShares() map[string]float64 {
	total := totalWeight(r.nodes)
	s := make(map[string]float64, len(r.nodes))
	for _, n := range r.nodes {
		s[n.Name] = n.Weight / total
	}
	return s
}

// totalWeight returns the sum of the weights of nodes, in their order (by
// Name in a Ring), so that the float sum is a function of the set.
func totalWeight(nodes []Node) float64 {
	total := 0.0
	for _, n := range nodes {
		total += n.Weight
	}
	return total
}

// Moved returns the fraction of the hash space whose owner differs between
// from and to: the share of keys a switch from one ring to the other sends to
// a node that does not hold them. Nodes are compared by Name.
func Moved(from, to *Ring) float64 {
	moved := 0.0
	overlay(from, to, func(a, b int32, length float64) {
		if from.nodes[a].Name != to.nodes[b].Name {
			moved += length
		}
	})
	return moved / space
}

// Flows returns, for each node of from, the fractions of the hash space that
// go to each node of to, by Name: Flows(from, to)["a"]["b"] is the share of
// keys that a owns in from and b owns in to. Shares that stay put appear as
// flows from a node to itself.
func Flows(from, to *Ring) map[string]map[string]float64 {
	f := make(map[string]map[string]float64, len(from.nodes))
	overlay(from, to, func(a, b int32, length float64) {
		na, nb := from.nodes[a].Name, to.nodes[b].Name
		if f[na] == nil {
			f[na] = make(map[string]float64)
		}
		f[na][nb] += length / space
	})
	return f
}

// overlay walks the union of the two rings' points in order and calls fn for
// every arc with the index of its owner in a and in b and its length.
func overlay(a, b *Ring, fn func(ownerA, ownerB int32, length float64)) {
	if a.slots != nil && b.slots != nil { // slot by slot, without points
		for s := range slotCount {
			fn(a.slots.at(s), b.slots.at(s), space/slotCount)
		}
		return
	}
	pa, pb := a.arcs(), b.arcs()
	if a == b {
		pb = pa
	}
	overlayPoints(pa, pb, func(i, j int, length float64) {
		fn(pa[i].owner, pb[j].owner, length)
	})
}

// overlayPoints is overlay by point, over two rings' points (arcs): fn has
// the index in each of the point that ends the arc, where a walk for the
// arc's keys starts.
func overlayPoints(a, b []point, fn func(pointA, pointB int, length float64)) {
	i, j := 0, 0
	prev := uint64(0) // arcs before the first boundary are handled at the end
	first := true
	var firstBoundary uint64
	for i < len(a) || j < len(b) {
		var u uint64
		switch {
		case j == len(b) || (i < len(a) && a[i].hash <= b[j].hash):
			u = a[i].hash
		default:
			u = b[j].hash
		}
		// (prev, u] ends at the first point at or after u in each ring.
		pa, pb := i%len(a), j%len(b)
		if first {
			firstBoundary, first = u, false
		} else {
			fn(pa, pb, float64(u-prev))
		}
		prev = u
		for i < len(a) && a[i].hash == u {
			i++
		}
		for j < len(b) && b[j].hash == u {
			j++
		}
	}
	// The wrapping arc (last boundary, 2^64) ∪ [0, first boundary] belongs to
	// each ring's first point. Its length is 2^64 minus the span already
	// counted, computed in float64 so a single boundary gives 2^64.
	wrap := space - float64(prev-firstBoundary)
	fn(0, 0, wrap)
}

// Deviation returns how far the node furthest from its fair share is from
// it, relative: the largest |share/ideal - 1| of Shares and IdealShares.
// An equalized ring's is at most its tolerance once it settles (see
// WithEqualize).
func (r *Ring) Deviation() float64 {
	shares, ideal := r.Shares(), r.IdealShares()
	d := 0.0
	for name, s := range shares {
		d = max(d, math.Abs(s/ideal[name]-1))
	}
	return d
}

// Least returns the least share of keys that any placement with the
// shares of from before and those of to after must move: the sum over
// nodes, by Name, of the share each gains. Moved(from, to) is at least
// Least(from, to); a classic ring moves exactly that when one node is added
// or removed.
func Least(from, to *Ring) float64 {
	return gained(from.Shares(), to.Shares())
}

// gained returns the sum over names of the share after exceeds the share
// before.
func gained(before, after map[string]float64) float64 {
	names := slices.Sorted(maps.Keys(after)) // in order: the sum is deterministic
	g := 0.0
	for _, n := range names {
		g += max(after[n]-before[n], 0)
	}
	return g
}
