package ring

import "slices"

// Replicas.
//
// A key kept on n nodes is kept on the n distinct nodes that follow it on
// the ring: the owner, then walking clockwise, the node of each next point
// not chosen yet. With zones, the walk first chooses only nodes of zones
// not used yet, so that a zone's loss leaves a copy when there are as many
// zones as copies; if there are fewer zones than n, a second walk from the
// key fills the rest with the distinct nodes not chosen, in clockwise order.
// When a node leaves, each of its keys keeps its other replicas and gains
// the next node of the walk: the replica sets change only where the ring
// does.
//
// The placements fleets run before a ring have no replicas of their own;
// theirs follow the same rule over their own order of nodes: a Ketama walks
// its continuum, a Modulo its slots (slot i, i+1, ... wrapping round), and a
// Rendezvous its shards by descending score, its natural top-n.

// LocatorN is a Locator that also places a key's replicas: its owner, then
// the next distinct nodes in the placement's order (clockwise on a ring),
// nodes of zones not used yet first, so that n replicas over n zones or
// more are in n zones. *Ring, *Ketama, *Modulo and *Rendezvous implement
// it (see Replicas in replicas.go for each one's order).
type LocatorN interface {
	Locator
	// AppendLocateN appends the n distinct nodes that keep key to dst, the
	// node of Locate first, and returns the extended slice: every node when
	// n is more than there are, none when n < 1. It allocates only to grow
	// dst, or to remember more than 8 nodes chosen.
	AppendLocateN(dst []Node, key string, n int) []Node
}

// LocateN returns the n distinct nodes that keep key in l, the node of
// Locate first (see LocatorN). It allocates the slice it returns; a caller
// on a hot path appends to a buffer of its own with AppendLocateN:
//
//	var buf [3]ring.Node
//	nodes := r.AppendLocateN(buf[:0], key, 3)
func LocateN(l LocatorN, key string, n int) []Node {
	if n < 1 {
		return nil
	}
	return l.AppendLocateN(make([]Node, 0, min(n, 16)), key, n)
}

// maxPickedOnStack is the most nodes a look-up chooses without allocating
// room to remember them.
const maxPickedOnStack = 8

// picker chooses a key's replicas among the nodes a walk meets, by index.
type picker struct {
	zones  []int32 // zones[i] numbers the zone of node i
	want   int     // nodes to choose
	spread int     // of them, how many in distinct zones: min(want, zones)

	// The nodes chosen, in order: in small, or in big beyond its size.
	small [maxPickedOnStack]int32
	big   []int32
	n     int
}

// init readies p to choose n nodes among nodes of the given zones, of
// which there are nzones. (In place: a picker returned by value is copied
// through the stack, which costs a tenth of a look-up.)
func (p *picker) init(zones []int32, nzones, n int) {
	p.zones, p.want = zones, min(n, len(zones))
	p.spread = min(p.want, nzones)
	if nzones < 2 {
		p.spread = 0 // one zone: the distinct-zone walk would stop at the owner, as the other does
	}
	if p.want > maxPickedOnStack {
		p.big = make([]int32, 0, p.want)
	}
}

// chosen returns the nodes chosen so far.
func (p *picker) chosen() []int32 {
	if p.big != nil {
		return p.big
	}
	return p.small[:p.n]
}

// add chooses node o.
func (p *picker) add(o int32) {
	if p.big != nil {
		p.big = append(p.big, o)
	} else {
		p.small[p.n] = o
	}
	p.n++
}

// spreading reports whether the picker is in its first walk, choosing one
// node per zone.
func (p *picker) spreading() bool { return p.n < p.spread }

// done reports whether every node wanted is chosen.
func (p *picker) done() bool { return p.n >= p.want }

// offer chooses node o if the walk in progress takes it: in the first walk
// if its zone is not used yet, in the second if it is not chosen yet.
func (p *picker) offer(o int32) {
	if p.spreading() {
		z := p.zones[o]
		for _, c := range p.chosen() {
			if p.zones[c] == z {
				return
			}
		}
		p.add(o)
		return
	}
	for _, c := range p.chosen() {
		if c == o {
			return
		}
	}
	p.add(o)
}

// walk runs p over the circle of points whose owners are owners[i]&mask,
// from start: a first walk choosing one node per zone, then a second from
// start again choosing the distinct nodes still wanted. (A function of the
// owners' type, not a method taking a func, so that the walk makes no
// call per point.)
func walk[T int32 | uint32](p *picker, start int, owners []T, mask T) {
	size := len(owners)
	if p.spreading() {
		for k, i := 0, start; k < size && p.spreading(); k++ {
			p.offer(int32(owners[i] & mask))
			if i++; i == size {
				i = 0
			}
		}
		p.spread = p.n // a zone no point reached: the second walk fills
	}
	for k, i := 0, start; k < size && !p.done(); k++ {
		p.offer(int32(owners[i] & mask))
		if i++; i == size {
			i = 0
		}
	}
	// Nodes no walk reached, whose every point lost a tie, in index
	// order: so that n of N nodes are always n nodes.
	for o := int32(0); !p.done(); o++ {
		p.offer(o)
	}
}

// appendNodes appends the chosen nodes to dst. Field by field into dst's
// room, as Ring.Locate does: append(dst, node) builds the node on the
// stack and reads it back in other widths, which stalls on every node.
func (p *picker) appendNodes(dst []Node, nodes []Node) []Node {
	chosen := p.chosen()
	dst = slices.Grow(dst, len(chosen))
	for _, o := range chosen {
		n := &nodes[o]
		dst = dst[:len(dst)+1]
		d := &dst[len(dst)-1]
		d.Name, d.Addr, d.Weight, d.Zone = n.Name, n.Addr, n.Weight, n.Zone
	}
	return dst
}

// AppendLocateN appends the n distinct nodes that keep key to dst, its
// owner first, then the nodes that follow it clockwise (see Replicas in
// replicas.go), and returns the extended slice. It does not allocate when
// dst has room and n is at most 8.
func (r *Ring) AppendLocateN(dst []Node, key string, n int) []Node {
	if n < 1 {
		return dst
	}
	var p picker
	p.init(r.zones, r.nzones, n)
	// The owners are read from the table's more, a quarter of the bytes of
	// points, which are read only where more is too coarse to tell.
	switch {
	case r.narrow != nil:
		t := r.narrow
		walk(&p, t.index(Hash(key), r.points), t.more, uint32(t.mask))
	case r.slots != nil:
		r.slots.walk(&p, int(Hash(key)>>(64-slotBits)))
	default:
		t := r.wide
		walk(&p, t.index(Hash(key), r.points), t.more, t.mask)
	}
	return p.appendNodes(dst, r.nodes)
}

// index returns the index in points of the first point at or after h,
// wrapping round to 0: a scan of more over h's group, as in scan.
func (t *table[E]) index(h uint64, points []point) int {
	g := h >> t.group
	i, end := int(t.start[g]), int(t.start[g+1])
	at, mask := t.inGroup(h), uint32(t.mask)
	for i < end && t.more[i]&^mask < at {
		i++
	}
	for i < end && t.more[i]&^mask == at && points[i].hash < h { // too close for more
		i++
	}
	if i == len(points) {
		return 0
	}
	return i
}

// ReplicaShares returns, by Name, the fraction of the keys of which each
// node keeps a copy when every key is kept on n nodes (see AppendLocateN):
// exact, from the arcs between points. The fractions add up to min(n,
// number of nodes); with n = 1 they are Shares. A node's memory is its
// fraction times the keys, and the fleet's the sum: n times one copy.
func (r *Ring) ReplicaShares(n int) map[string]float64 {
	copies := make([]float64, len(r.nodes)) // by node index
	r.replicaArcs(n, func(chosen []int32, share float64) {
		for _, o := range chosen {
			copies[o] += share
		}
	})
	s := make(map[string]float64, len(r.nodes))
	for i, nd := range r.nodes {
		s[nd.Name] = copies[i]
	}
	return s
}

// ZoneSpread returns the fraction of the keys whose n replicas (see
// AppendLocateN) are in min(n, zones) distinct zones, where zones counts
// the ring's distinct Node.Zone values (nodes without one are one zone):
// the keys that keep a copy when any one zone is lost, if there are two
// zones or more. Exact, from the arcs between points; 0 when n < 1.
func (r *Ring) ZoneSpread(n int) float64 {
	want := min(n, r.nzones, len(r.nodes))
	spread, total := 0.0, 0.0
	r.replicaArcs(n, func(chosen []int32, share float64) {
		total += share
		distinct := 0
		for i, o := range chosen {
			if !slices.ContainsFunc(chosen[:i], func(c int32) bool { return r.zones[c] == r.zones[o] }) {
				distinct++
			}
		}
		if distinct >= want {
			spread += share
		}
	})
	if total == 0 {
		return 0
	}
	// Over the sum of the arcs, which may round off 1: every key spread
	// is exactly 1.
	return spread / total
}

// MovedN returns the fraction of the hash space whose n replicas (see
// AppendLocateN), as a set of Names, differ between from and to: the keys
// that a migration of replicated keys copies to a node that lacks them.
// A key whose replicas are the same nodes in another order does not move.
// Exact, from the arcs of both rings; with n = 1 it is Moved.
func MovedN(from, to *Ring, n int) float64 {
	if n < 1 {
		return 0
	}
	pa, pb := from.arcs(), to.arcs()
	ownersA, ownersB := owners(pa), owners(pb)
	moved := 0.0
	overlayPoints(pa, pb, func(i, j int, length float64) {
		var a, b picker
		a.init(from.zones, from.nzones, n)
		walk(&a, i, ownersA, -1)
		b.init(to.zones, to.nzones, n)
		walk(&b, j, ownersB, -1)
		if !sameNames(from.nodes, a.chosen(), to.nodes, b.chosen()) {
			moved += length
		}
	})
	return min(moved/space, 1)
}

// sameNames reports whether the nodes chosen in two rings are the same set
// of names.
func sameNames(nodesA []Node, a []int32, nodesB []Node, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for _, i := range a {
		if !slices.ContainsFunc(b, func(j int32) bool { return nodesB[j].Name == nodesA[i].Name }) {
			return false
		}
	}
	return true
}

// replicaArcs calls fn for each arc between points with the n nodes that
// keep its keys (by index, as AppendLocateN chooses them) and its share of
// the hash space. Nothing when n < 1.
func (r *Ring) replicaArcs(n int, fn func(chosen []int32, share float64)) {
	if n < 1 {
		return
	}
	pts := r.arcs()
	owners := owners(pts)
	last := len(pts) - 1
	for i := range pts {
		// The arc (points[i-1], points[i]]: every hash in it starts the walk
		// at point i. The first wraps round from the last point.
		var arc float64
		if i == 0 {
			arc = space - float64(pts[last].hash-pts[0].hash)
		} else {
			arc = float64(pts[i].hash - pts[i-1].hash)
		}
		var p picker
		p.init(r.zones, r.nzones, n)
		walk(&p, i, owners, -1)
		fn(p.chosen(), arc/space)
	}
}

// owners returns the owner of each point, in order, for walk.
func owners(pts []point) []int32 {
	owners := make([]int32, len(pts))
	for i, p := range pts {
		owners[i] = p.owner
	}
	return owners
}

// AppendLocateN appends the n distinct servers that keep key to dst: its
// owner, then the servers of the points that follow on the continuum (see
// Replicas in replicas.go). Neither twemproxy nor libmemcached replicates:
// this is this package's rule over their continuum.
func (k *Ketama) AppendLocateN(dst []Node, key string, n int) []Node {
	if n < 1 {
		return dst
	}
	key = k.tag.of(key)
	var h uint32
	if k.fnv {
		h = twemproxyFNV1a64(key)
	} else {
		h = KetamaHash(key)
	}
	var p picker
	p.init(k.zones, k.nzones, n)
	walk(&p, k.index(h), k.owners, -1)
	return p.appendNodes(dst, k.nodes)
}

// AppendLocateN appends the n distinct servers that keep key to dst: that
// of its slot, hash(key) % N, then those of the next slots, wrapping round,
// a server listed twice counted once. A mod-N list has no zones.
func (m *Modulo) AppendLocateN(dst []Node, key string, n int) []Node {
	if n < 1 {
		return dst
	}
	h := m.sum(m.tag.of(key))
	var p picker
	p.init(m.zones, 1, n)
	walk(&p, int(h%uint64(len(m.slots))), m.server, -1)
	return p.appendNodes(dst, m.nodes)
}

// AppendLocateN appends the n distinct shards that keep key to dst: the n
// of highest score, highest first, distinct zones first (see Replicas in
// replicas.go). go-redis places one copy: this is the rule's natural
// extension.
func (r *Rendezvous) AppendLocateN(dst []Node, key string, n int) []Node {
	if n < 1 {
		return dst
	}
	kh := RendezvousHash(key)
	var p picker
	p.init(r.zones, r.nzones, n)
	// Each choice is the best score among the nodes the picker would take:
	// the next node of the walk down the scores.
	for !p.done() {
		best, bestScore := int32(-1), uint64(0)
		for i, h := range r.hashes {
			if s := mix64(kh ^ h); (best < 0 || s > bestScore) && p.takes(int32(i)) {
				best, bestScore = int32(i), s
			}
		}
		p.add(best)
	}
	return p.appendNodes(dst, r.nodes)
}

// takes reports whether offer would choose node o now.
func (p *picker) takes(o int32) bool {
	for _, c := range p.chosen() {
		if c == o || p.spreading() && p.zones[c] == p.zones[o] {
			return false
		}
	}
	return true
}
