// Package ring places cache keys on nodes with a weighted consistent-hash ring
// of virtual nodes.
//
// Placement is a compatibility contract: once a fleet runs it, changing which
// node a key maps to empties the cache. The exact bytes hashed are therefore
// part of the API and frozen by the golden vectors in testdata/:
//
//   - Every hash is murmur3 x64_128 with seed 0, truncated to its first 64-bit
//     half (github.com/twmb/murmur3 StringSum64, equal to spaolacci/murmur3
//     Sum64). The ring is the 64-bit space [0, 2^64).
//   - A node of weight w owns round(w×vnodes) points (half away from zero),
//     exactly w×vnodes for a whole w. Point i (0-based) is the hash of the
//     UTF-8 bytes of Name + "#VN" + decimal(i), for example "cache-a#VN0".
//     With WithEqualize there are no points: a key goes to the slot of
//     the top 20 bits of its hash and the slot to a node by weighted
//     rendezvous hashing, of multipliers chosen from the whole membership
//     (see "The slot table" in slots.go), frozen by golden vectors of its
//     own.
//   - A key is hashed as its bytes, unless it holds a hash tag: if the key
//     contains '{' and a later '}' with at least one byte between the first
//     '{' and the first '}' after it, only those bytes are hashed (as Redis
//     Cluster and twemproxy do), so "{user42}:cart" and "{user42}:profile"
//     share a node.
//   - The owner of a key is the node of the first point clockwise at or after
//     the key's hash, wrapping past 2^64-1 to the first point.
//   - When two points hash to the same value, the point of the node whose Name
//     sorts first (byte order) keeps the position and the other is dropped.
//     The result depends only on the set of nodes, not on their order.
//   - A key's n replicas (AppendLocateN) are its owner, then the nodes of
//     the points that follow clockwise, each node once, nodes of distinct
//     zones first (see Replicas in replicas.go); on an equalized ring,
//     the nodes of the slots that follow, as if each slot ended at a point.
//
// A Ring is immutable and safe for concurrent use. Shares, ReplicaShares,
// Moved and Flows compute exact fractions of the hash space from the arcs
// between points; no keys are sampled.
//
// Beside Ring, the package reproduces the placements fleets run before they
// adopt it, so that a migration can start from them without a cold cache:
// Ketama (twemproxy, libmemcached), Modulo (gomemcache's ServerList, any
// hash % N) and Rendezvous (go-redis's Ring), each a LocatorN; Compare gives
// the share of keys that changes server between any two placements.
package ring

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/murmur3"
)

// DefaultVnodes is the number of points per unit of weight when WithVnodes is
// not given. The largest share of ten equal nodes is 1+1.5/sqrt(vnodes) of the
// mean, give or take: over five naming schemes it reached 1.19 at 160 vnodes,
// 1.17 at 256 and 1.09 at 512, the smallest count that keeps every scheme
// tried within 1.10. A look-up reads two adjacent table entries at any count
// (see "The look-up table"), but more points make a bigger table.
const DefaultVnodes = 512

// Limits that keep a configuration sane. Beyond them a ring costs memory and
// build time without improving balance measurably.
const (
	MaxVnodes = 1 << 14 // points per unit of weight
	MaxPoints = 1 << 24 // points in a whole ring (450 MiB of points and tables at most)
)

// Errors returned by New, wrapped with the offending value.
var (
	ErrNoNodes       = errors.New("shardcache/ring: no nodes")
	ErrDuplicateName = errors.New("shardcache/ring: duplicate node name")
	ErrDuplicateAddr = errors.New("shardcache/ring: duplicate node address")
	ErrEmptyAddr     = errors.New("shardcache/ring: empty node address")
	ErrBadAddr       = errors.New("shardcache/ring: bad node address (want host:port, port 1-65535)")
	ErrBadWeight     = errors.New("shardcache/ring: bad node weight")
	ErrBadVnodes     = errors.New("shardcache/ring: bad vnode count")
	ErrBadTolerance  = errors.New("shardcache/ring: bad equalization tolerance")
	ErrTooManyNodes  = errors.New("shardcache/ring: too many nodes to equalize")
)

// MaxWeight is the largest weight a node may have: beyond it no placement
// could give it its points (MaxPoints at one vnode).
const MaxWeight = MaxPoints

// Node is a physical cache server.
type Node struct {
	// Name is the node's identity on the ring; it defaults to Addr. Keep it
	// stable when a server moves to a new address and its keys stay put.
	Name string
	// Addr is where to connect, "host:port".
	Addr string
	// Weight is the node's relative capacity: 0 means 1. It is fractional,
	// so that a correction of a few percent (1.05) needs no rescaling of
	// the whole fleet; a whole weight places keys exactly as the integer
	// weights of earlier versions did, and a node file's "weight": 2 still
	// reads as 2. Negative, NaN, infinite or above MaxWeight is
	// ErrBadWeight. A Ring gives a node round(Weight×vnodes) points; Ketama,
	// Modulo and Rendezvous, which reproduce placements of whole weights,
	// take whole weights only.
	Weight float64
	// Zone is the failure domain the node is in (an availability zone, a
	// rack): LocateN spreads a key's replicas over distinct zones first.
	// It plays no part in where a key's first node is. Nodes without a zone
	// are all in the zone "".
	Zone string
}

// Locator maps keys to nodes. *Ring implements it; the client and the
// migration depend only on this interface, so other placements can be used.
type Locator interface {
	// Locate returns the node that owns key.
	Locate(key string) Node
	// Nodes returns every node of the placement, sorted by Name.
	Nodes() []Node
}

// Option configures New.
type Option func(*config)

type config struct {
	vnodes    int
	equalize  bool
	tolerance float64 // of the equalization; 0 means DefaultTolerance
}

// WithVnodes sets the number of points per unit of weight (default
// DefaultVnodes, at most MaxVnodes).
func WithVnodes(n int) Option {
	return func(c *config) { c.vnodes = n }
}

// Ring is an immutable weighted consistent-hash ring.
type Ring struct {
	// Inputs.
	nodes     []Node // sorted by Name, weights normalised (0 becomes 1)
	vnodes    int
	tolerance float64 // of the equalization, 0 for a classic ring

	// Internal data.
	// points are sorted by hash, with distinct hashes: the ring itself. The
	// analysis walks them; Locate reads them only for the few hashes its
	// table cannot place alone.
	points []point
	// counts[i] is the length of the prefix of nodes[i]'s point sequence
	// the ring holds, round(Weight×vnodes); on an equalized ring, its
	// slots.
	counts []int
	// slots places the keys of an equalized ring, which has no points
	// (see "The slot table" in slots.go); nil on a classic ring.
	slots *slotTable

	// The table Locate reads (see "The look-up table"), of 16-bit entries up
	// to narrowNodes nodes and of 32-bit entries beyond: exactly one is set.
	narrow *table[uint16]
	wide   *table[uint32]

	// zones[i] numbers nodes[i].Zone among the ring's distinct zones, of
	// which there are nzones: LocateN compares numbers, not strings.
	zones  []int32
	nzones int
}

// point is one virtual node: a position on the ring and the index of its node.
type point struct {
	hash  uint64
	owner int32
}

// New builds a ring from nodes. The order of nodes does not matter.
func New(nodes []Node, opts ...Option) (*Ring, error) {
	cfg := config{vnodes: DefaultVnodes}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.vnodes < 1 || cfg.vnodes > MaxVnodes {
		return nil, fmt.Errorf("%w: %d (want 1..%d)", ErrBadVnodes, cfg.vnodes, MaxVnodes)
	}
	if cfg.equalize && cfg.tolerance == 0 {
		cfg.tolerance = DefaultTolerance
	}
	if cfg.equalize && !(cfg.tolerance > 0 && cfg.tolerance < 1) { // NaN fails
		return nil, fmt.Errorf("%w: %v (want above 0 and below 1)", ErrBadTolerance, cfg.tolerance)
	}
	ns, err := normalize(nodes)
	if err != nil {
		return nil, err
	}
	if cfg.equalize {
		if len(ns) > maxSlotNodes {
			return nil, fmt.Errorf("%w: %d (want at most %d)", ErrTooManyNodes, len(ns), maxSlotNodes)
		}
		t := equalizeSlots(ns, cfg.tolerance)
		r := &Ring{nodes: ns, vnodes: cfg.vnodes, tolerance: cfg.tolerance, counts: t.counts, slots: t}
		r.zones, r.nzones = numberZones(ns)
		return r, nil
	}
	counts, err := classicCounts(ns, cfg.vnodes)
	if err != nil {
		return nil, err
	}
	return build(ns, counts, ringPoints(ns, counts), cfg.vnodes, cfg.tolerance), nil
}

// ringPoints returns the points of a ring of ns, node i holding the first
// counts[i] points of its sequence: sorted, of distinct hashes.
func ringPoints(ns []Node, counts []int) []point {
	total := 0
	for _, c := range counts {
		total += c
	}
	pts := make([]point, 0, total)
	for i, n := range ns {
		pts = appendPoints(pts, n.Name, int32(i), 0, counts[i])
	}
	sortPoints(pts)
	return slices.CompactFunc(pts, func(a, b point) bool { return a.hash == b.hash })
}

// build returns the ring of ns whose node i holds counts[i] points, pts
// (see ringPoints).
func build(ns []Node, counts []int, pts []point, vnodes int, tolerance float64) *Ring {

	r := &Ring{nodes: ns, vnodes: vnodes, tolerance: tolerance, points: slices.Clip(pts), counts: counts}
	if len(ns) <= narrowNodes {
		r.narrow = newTable[uint16](r.points, len(ns))
	} else {
		r.wide = newTable[uint32](r.points, len(ns))
	}
	r.zones, r.nzones = numberZones(ns)
	return r
}

// classicCounts returns each node's number of points: its weight times
// vnodes, rounded. It returns ErrBadWeight for a node that would get none,
// or for a ring of more than MaxPoints points.
func classicCounts(ns []Node, vnodes int) ([]int, error) {
	counts := make([]int, len(ns))
	total := 0
	for i, n := range ns {
		// Exact for a whole weight: w×vnodes is below 2^53.
		c := math.Round(n.Weight * float64(vnodes))
		if c > float64(MaxPoints-total) {
			return nil, fmt.Errorf("%w: node %q: weight %v × %d vnodes exceeds %d points in the ring",
				ErrBadWeight, n.Name, n.Weight, vnodes, MaxPoints)
		}
		if c < 1 {
			return nil, fmt.Errorf("%w: node %q: weight %v × %d vnodes is less than one point",
				ErrBadWeight, n.Name, n.Weight, vnodes)
		}
		counts[i] = int(c)
		total += counts[i]
	}
	return counts, nil
}

// appendPoints appends points from to to-1 of the node called name, of
// index owner: the hashes of name + "#VN" + decimal(v).
func appendPoints(pts []point, name string, owner int32, from, to int) []point {
	buf := make([]byte, 0, len(name)+3+20)
	buf = append(buf, name...)
	buf = append(buf, "#VN"...)
	base := len(buf)
	for v := from; v < to; v++ {
		buf = strconv.AppendInt(buf[:base], int64(v), 10)
		pts = append(pts, point{murmur3.Sum64(buf), owner})
	}
	return pts
}

// sortPoints sorts points by hash. Nodes are sorted by name, so on equal
// hashes the smaller owner index is the node whose name sorts first: it
// comes first, and keeps the point once the others are compacted away.
func sortPoints(pts []point) {
	slices.SortFunc(pts, func(a, b point) int {
		if a.hash != b.hash {
			if a.hash < b.hash {
				return -1
			}
			return 1
		}
		return int(a.owner - b.owner)
	})
}

// numberZones numbers the distinct zones of ns in order of first
// appearance (ns is sorted by name, so the numbers depend on the set only).
func numberZones(ns []Node) (zones []int32, n int) {
	zones = make([]int32, len(ns))
	num := map[string]int32{}
	for i, nd := range ns {
		z, ok := num[nd.Zone]
		if !ok {
			z = int32(len(num))
			num[nd.Zone] = z
		}
		zones[i] = z
	}
	return zones, len(num)
}

// normalize validates nodes and returns a copy sorted by Name with defaults
// applied.
func normalize(nodes []Node) ([]Node, error) {
	if len(nodes) == 0 {
		return nil, ErrNoNodes
	}
	ns := make([]Node, len(nodes))
	addrs := make(map[string]bool, len(nodes))
	for i, n := range nodes {
		if n.Addr == "" {
			return nil, fmt.Errorf("%w: node %d (name %q)", ErrEmptyAddr, i, n.Name)
		}
		if err := CheckAddr(n.Addr); err != nil {
			return nil, fmt.Errorf("node %d (name %q): %w", i, n.Name, err)
		}
		if !(n.Weight >= 0 && n.Weight <= MaxWeight) { // NaN fails both
			return nil, fmt.Errorf("%w: node %q: %v (want 0 to %d)", ErrBadWeight, n.Addr, n.Weight, MaxWeight)
		}
		if n.Name == "" {
			n.Name = n.Addr
		}
		if n.Weight == 0 {
			n.Weight = 1
		}
		if addrs[n.Addr] {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateAddr, n.Addr)
		}
		addrs[n.Addr] = true
		ns[i] = n
	}
	slices.SortFunc(ns, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(ns); i++ {
		if ns[i].Name == ns[i-1].Name {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateName, ns[i].Name)
		}
	}
	return ns, nil
}

// CheckAddr checks that addr is host:port with a numeric port in range and
// nothing around it (no space, no control character), as
// New does for every node, so that a typo fails there rather than at the
// first call to the node. It resolves nothing. Its errors wrap ErrBadAddr.
func CheckAddr(addr string) error {
	if i := strings.IndexFunc(addr, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		// A padded " 10.0.0.1:6379" would fail every call with "no such host".
		return fmt.Errorf("%w: %q: space or control character at byte %d", ErrBadAddr, addr, i)
	}
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %q: %s", ErrBadAddr, addr, strings.TrimPrefix(err.Error(), "address "+addr+": "))
	case host == "":
		return fmt.Errorf("%w: %q: no host", ErrBadAddr, addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%w: %q: port %q", ErrBadAddr, addr, port)
	}
	return nil
}

// The look-up table.
//
// Hashing the key is the one cost of a look-up that cannot be avoided; what
// follows should be a single read, and of a small table: at 1000 nodes of 512
// vnodes the points take 8 MiB, and a read at a random place there misses the
// caches. So the hash space is cut into buckets by the top bits of the hash,
// 2 to 4 buckets per point (a power of two), and each bucket gets an entry of
// 16 bits, or of 32 bits beyond narrowNodes nodes:
//
//	top bit       several: the bucket holds two points or more
//	middle bits   split: the offset of the bucket's point in the bucket, cut
//	              to the bits there are room for; zero if it has none
//	low m bits    owner: the node of the first point at or after the
//	              bucket's start, where m = bits.Len(len(nodes)-1)
//
// A hash in a bucket of one point or none belongs to owner if its offset is
// below split and to the owner of the next entry if above (an empty bucket
// and the next entry name the same node): two adjacent entries, in one cache
// line nearly always. A fraction e^-x(1+x) of hashes, for x points per
// bucket, falls in such buckets: 91% at 2 buckets per point, 97% at 4 (which
// makes the table too big to stay in cache at 1000 nodes). A hash whose
// offset equals split at that precision (one in 32 at most) needs more
// precision, unless both owners are the same node.
//
// Those hashes and the ones in buckets of several points, one in ten at
// most, are placed by a scan of the points of the hash's group of groupSize
// buckets. The scan reads more, a copy of points in 4 bytes a point (offset
// in the group, cut, and owner): the second read at a random place, which
// the CPU can start only once it knows the entry, costs less there than in
// points, four times the size.
//
// The table takes 8.25 to 12.5 bytes per point with 16-bit entries and 12.25
// to 20.5 with 32-bit ones, on top of the 16 of points: a 1000-node ring of
// 512 vnodes keeps 8 MiB of points, 2 MiB of entries, 2 MiB of more and 128
// KiB of group starts.

// narrowNodes is the most nodes a 16-bit entry can hold: it leaves 5 bits of
// split, so that a hash in a bucket of one point meets the split once in 32.
const narrowNodes = 1 << 10

// groupSize is the number of buckets whose points a scan may go through: 8
// to 16 points, one or two cache lines of more. Bigger groups make start
// smaller, small enough to stay in cache at 1000 nodes, for a longer scan.
const groupSize = 32

// table is the look-up index of a ring, with entries of type E.
type table[E uint16 | uint32] struct {
	entries []E      // one per bucket, and the last for the bucket after the last: it wraps round to the first point
	start   []int32  // start[g] is the index in points of the first point at or after group g; the last is len(points)
	more    []uint32 // more[i] is points[i]: the top bits of its offset in its group, then its owner in the low m bits
	bits    uint     // log2 of the number of buckets: a hash's bucket is its top bits bits
	group   uint     // a hash's group is h >> group
	mask    E        // the owner field, of entries and of more
}

func newTable[E uint16 | uint32](points []point, nodes int) *table[E] {
	n := len(points)
	t := &table[E]{bits: uint(bits.Len(uint(2*n - 1)))} // 2n <= 1<<bits < 4n
	t.mask = 1<<bits.Len(uint(nodes-1)) - 1
	gbits := min(t.bits, uint(bits.Len(groupSize-1)))
	t.group = 64 - t.bits + gbits
	t.entries = make([]E, 1<<t.bits+1)
	t.start = make([]int32, 1<<(t.bits-gbits)+1)
	t.more = make([]uint32, n)
	shift := 64 - t.bits
	several := ^(^E(0) >> 1)
	i := 0 // the first point at or after bucket b's start
	for b := range uint64(1) << t.bits {
		if b%(1<<gbits) == 0 {
			t.start[b>>gbits] = int32(i)
		}
		j := i // the first point after bucket b
		for j < n && points[j].hash>>shift == b {
			j++
		}
		e := E(points[i%n].owner)
		switch j - i {
		case 0: // no split: the next entry has the same owner
		case 1:
			e |= t.offset(points[i].hash)
		default:
			e |= several
		}
		t.entries[b] = e
		i = j
	}
	t.entries[1<<t.bits] = E(points[0].owner)
	t.start[len(t.start)-1] = int32(n)
	for i, p := range points {
		t.more[i] = t.inGroup(p.hash) | uint32(p.owner)
	}
	return t
}

// offset returns the offset of h in its bucket, cut to the width of split and
// in its place.
func (t *table[E]) offset(h uint64) E {
	width := bits.Len64(uint64(^E(0)))
	return E(h<<(t.bits&63)>>(65-width)) &^ t.mask
}

// inGroup returns the offset of h in its group, cut to the bits more has room
// for and in their place.
func (t *table[E]) inGroup(h uint64) uint32 {
	return uint32(h<<((64-t.group)&63)>>32) &^ uint32(t.mask)
}

// owner returns the index in nodes of the owner of h. The choice between the
// two entries is a conditional move, as a branch would mispredict on half the
// hashes; the one branch left is taken by one hash in ten at most.
func (t *table[E]) owner(h uint64, points []point) int {
	several := ^(^E(0) >> 1)
	b := h >> ((64 - t.bits) & 63)
	e, next := t.entries[b], t.entries[b+1]
	at, split := t.offset(h), e&^t.mask // the split of several is above any offset
	o := e
	if at > split {
		o = next
	}
	if e&several != 0 || at == split && (e^next)&t.mask != 0 {
		return t.scan(h, next, points)
	}
	return int(o & t.mask)
}

// scan returns the owner of h from more: that of the first point of h's group
// at or after h, else that of next, the entry after h's.
func (t *table[E]) scan(h uint64, next E, points []point) int {
	g := h >> t.group
	i, end := int(t.start[g]), int(t.start[g+1])
	at, mask := t.inGroup(h), uint32(t.mask)
	for i < end && t.more[i]&^mask < at {
		i++
	}
	switch {
	case i == end: // past the group's points, so past the bucket's
		return int(next & t.mask)
	case t.more[i]&^mask == at: // too close for more to tell
		return int(points[t.search(h, points)].owner)
	}
	return int(t.more[i] & mask)
}

// search returns the index of the first point at or after h, wrapping round to
// 0: a scan of points from the first point of h's group.
func (t *table[E]) search(h uint64, points []point) int {
	i := int(t.start[h>>t.group])
	for i < len(points) && points[i].hash < h {
		i++
	}
	if i == len(points) {
		return 0
	}
	return i
}

// Hash returns the position of key on the ring: the murmur3 hash of its hash
// tag if it has one, else of the whole key.
func Hash(key string) uint64 {
	if hasBrace(key) {
		key = HashTag(key)
	}
	return murmur3.StringSum64(key)
}

// hasBrace reports whether s holds a '{', without which HashTag returns s
// whole. Most keys have none, and reading them 8 bytes at a time here costs
// less than HashTag's strings.IndexByte, a call into assembly
// (docs/performance.md, "Placement").
func hasBrace(s string) bool {
	const ones, highs, braces = 0x0101010101010101, 0x8080808080808080, '{' * 0x0101010101010101
	n := len(s)
	if n < 8 {
		for i := range n {
			if s[i] == '{' {
				return true
			}
		}
		return false
	}
	// x has a zero byte where the word has a '{'. (x-ones)&^x&highs is not
	// zero exactly when x has a zero byte: a borrow starts only there.
	x := load64(s[n-8:]) ^ braces
	found := (x - ones) &^ x
	for ; len(s) > 8; s = s[8:] {
		x := load64(s[:8]) ^ braces
		found |= (x - ones) &^ x
	}
	return found&highs != 0
}

// load64 returns the first 8 bytes of b, little-endian: one load on the
// machines that allow unaligned ones.
func load64(b string) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// HashTag returns the part of key that is hashed: the bytes between the first
// '{' and the first '}' after it when that is not empty, else key itself.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// Locate returns the node that owns key. It does not allocate.
func (r *Ring) Locate(key string) Node {
	h := Hash(key)
	var i int
	switch {
	case r.narrow != nil:
		i = r.narrow.owner(h, r.points)
	case r.slots != nil:
		i = r.slots.owner(h)
	default:
		i = r.wide.owner(h, r.points)
	}
	// Field by field: "return r.nodes[i]" copies the node through the stack
	// in 16-byte moves and reloads it in 8-byte halves, which costs more.
	n := &r.nodes[i]
	return Node{Name: n.Name, Addr: n.Addr, Weight: n.Weight, Zone: n.Zone}
}

// Nodes returns the ring's nodes sorted by Name, with defaults applied (Name
// set, a Weight of 0 made 1). The slice is a copy.
func (r *Ring) Nodes() []Node {
	return slices.Clone(r.nodes)
}

// Vnodes returns the number of points per unit of weight, which an
// equalized ring, of slots, does not use.
func (r *Ring) Vnodes() int { return r.vnodes }

// Points returns the number of distinct points on the ring; on an equalized
// ring, the number of runs of slots of one node, each of which ends at a
// point for the analysis.
func (r *Ring) Points() int { return len(r.arcs()) }

// arcs returns the points of the ring: its own, or those of its slots
// (slotTable.points), made for each call: the analysis reads them once,
// and a look-up never.
func (r *Ring) arcs() []point {
	if r.slots != nil {
		return r.slots.points()
	}
	return r.points
}
