package ring

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net"
	"slices"
	"strconv"
)

// ErrLongName is returned for a Ketama server name too long for twemproxy's
// point names.
var ErrLongName = errors.New("shardcache/ring: server name too long for ketama")

// Ketama constants, as twemproxy's nc_ketama.c and libmemcached's hosts.cc
// define them.
const (
	ketamaPointsPerServer = 160 // points of the mean server: 40 digests of 4 points
	ketamaMaxHostLen      = 86  // twemproxy's buffer for a point name, NUL included
	ketamaDefaultPort     = "11211"
)

// KetamaOption configures NewKetama.
type KetamaOption func(*ketamaConfig)

type ketamaConfig struct {
	tag  string
	hash KetamaKeyHash
}

// KetamaKeyHash names twemproxy's "hash:", the hash of keys on a ketama
// continuum; the points are MD5 digests whatever it is.
type KetamaKeyHash string

// The key hashes a Ketama can place keys by.
const (
	// KetamaMD5 is "hash: md5", libmemcached's weighted ketama's: the first
	// 4 bytes of the key's MD5, little-endian. The default.
	KetamaMD5 KetamaKeyHash = "md5"
	// KetamaFNV1a64 is twemproxy's default "hash: fnv1a_64", as nc_fnv.c
	// computes it: FNV-1a with the 64-bit offset basis and prime cut to
	// 32 bits, over the key's bytes as C's signed char (a byte of 0x80 or
	// more is sign-extended), 32 bits out.
	KetamaFNV1a64 KetamaKeyHash = "fnv1a_64"
)

// WithKetamaKeyHash sets the hash of keys (default KetamaMD5).
func WithKetamaKeyHash(h KetamaKeyHash) KetamaOption {
	return func(c *ketamaConfig) { c.hash = h }
}

// twemproxyFNV1a64 is nc_fnv.c's hash_fnv1a_64.
func twemproxyFNV1a64(key string) uint32 {
	h := uint32(0xcbf29ce484222325 & 0xffffffff)
	for i := 0; i < len(key); i++ {
		h ^= uint32(int32(int8(key[i])))
		h *= uint32(0x100000001b3 & 0xffffffff)
	}
	return h
}

// WithKetamaHashTag sets twemproxy's hash_tag: two characters, such as "{}",
// between which the part of a key that is hashed lies (see HashTag); ""
// (the default, as in twemproxy) hashes every key whole.
func WithKetamaHashTag(tag string) KetamaOption {
	return func(c *ketamaConfig) { c.tag = tag }
}

// Ketama is the ketama consistent hashing of twemproxy (nutcracker) with
// "distribution: ketama" and "hash: md5" (or its default "hash: fnv1a_64",
// with WithKetamaKeyHash), and of libmemcached's weighted
// ketama (MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, or any server of weight above
// 1), byte for byte:
//
//   - A server's name is Node.Name when set (twemproxy's "host:port:weight
//     name"), else the host of Node.Addr when its port is 11211 and the
//     whole Addr otherwise, as both form it for backward compatibility with
//     libmemcached (which has no names).
//   - Of n servers with total weight W, a server of weight w gets
//     floor(w/W × 160/4 × n + 1e-10) × 4 points, computed in float32 as the
//     C code does (so a share that is a whole number in exact arithmetic
//     may round one digest down, as it does there: 25 servers of equal
//     weight get 156 points each, not 160). Point group i (from 0)
//     is the MD5 digest of the bytes Name + "-" + decimal(i): its 16 bytes
//     are 4 points, each 4 bytes read little-endian.
//   - A key's position is the first 4 bytes of the MD5 of the key (of its
//     hash tag, with WithKetamaHashTag), little-endian, or its
//     KetamaFNV1a64 with WithKetamaKeyHash; its owner is the
//     server of the first point at or above it, wrapping to the first point.
//   - Ties, two points at the same position: the point of the server listed
//     first wins (of one server, the earlier point, which changes nothing).
//     libmemcached sorts points by value, then server index, so; twemproxy
//     sorts by value only and leaves ties to the C library's qsort, which
//     in glibc is a merge sort (when it can allocate its buffer) that keeps
//     them in the order built: the same rule. (Two servers' 32-bit points collide with a chance of
//     about 2 in 100000 for 3 servers, 3 in 100 for 100 servers.)
//
// The order of nodes therefore matters only for ties; keep it as in the
// proxy's configuration. Weight 0 counts as 1, as everywhere in this
// package (twemproxy refuses it). A Ketama models every server up: twemproxy's
// auto_eject_hosts, which rebuilds the continuum without failed servers,
// and libmemcached's non-weighted ketama (100 points of one hash each) are
// other placements.
//
// A Ketama is immutable and safe for concurrent use; it implements Locator,
// so a client can migrate from a twemproxy or libmemcached fleet to a ring
// (Options.MigrateFrom, ReshardTo) without emptying the cache.
type Ketama struct {
	// Inputs.
	nodes []Node // in the order given, names formed, weights normalised
	tag   hashTag
	fnv   bool // keys hashed with KetamaFNV1a64, else KetamaMD5

	// Internal data.
	sorted []Node   // nodes sorted by Name, for Nodes
	values []uint32 // the continuum: point positions, sorted
	owners []int32  // owners[i] is the index in nodes of values[i]'s server
	points []int    // points[i] is the number of points of nodes[i]

	// starts[b] is the index of the first point at or above bucket b, the
	// hashes of top bits b: one to two points a bucket, so a look-up
	// searches a few points instead of the whole continuum. The last entry
	// is len(values).
	starts []int32
	shift  uint // a hash's bucket is h >> shift

	// zones[i] numbers nodes[i].Zone, of nzones distinct, for AppendLocateN.
	zones  []int32
	nzones int
}

// KetamaName returns the name twemproxy and libmemcached give a server of
// address addr when its configuration names none: the host alone when the
// port is 11211, else addr whole.
func KetamaName(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && port == ketamaDefaultPort {
		return host
	}
	return addr
}

// NewKetama returns the ketama placement of nodes, in their order (see
// Ketama). Bad input gets the ring's typed errors: ErrNoNodes,
// ErrEmptyAddr, ErrBadWeight, ErrDuplicateName, ErrDuplicateAddr, and
// ErrLongName for a name twemproxy cannot hash, ErrBadHashTag for a hash
// tag that is not two characters.
func NewKetama(nodes []Node, opts ...KetamaOption) (*Ketama, error) {
	cfg := ketamaConfig{hash: KetamaMD5}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.hash != KetamaMD5 && cfg.hash != KetamaFNV1a64 {
		return nil, fmt.Errorf("%w: %q (want %q or %q)", ErrBadHash, cfg.hash, KetamaMD5, KetamaFNV1a64)
	}
	tag, err := parseHashTag(cfg.tag)
	if err != nil {
		return nil, err
	}
	named := make([]Node, len(nodes))
	for i, n := range nodes {
		if n.Name == "" && n.Addr != "" {
			n.Name = KetamaName(n.Addr)
		}
		named[i] = n
	}
	sorted, err := normalize(named) // validation, defaults and Nodes' order
	if err != nil {
		return nil, err
	}
	total := 0
	for i := range named {
		w := named[i].Weight
		if w != math.Trunc(w) {
			return nil, fmt.Errorf("%w: node %q: %v (twemproxy and libmemcached weights are whole numbers)", ErrBadWeight, named[i].Name, w)
		}
		w = max(w, 1) // normalize checked it; 0 counts as 1
		named[i].Weight = w
		if total += int(w); total > math.MaxInt32 {
			return nil, fmt.Errorf("%w: node %q: weights add up to more than %d", ErrBadWeight, named[i].Name, math.MaxInt32)
		}
	}

	k := &Ketama{nodes: named, tag: tag, fnv: cfg.hash == KetamaFNV1a64, sorted: sorted, points: make([]int, len(named))}
	type point struct {
		value uint32
		owner int32
	}
	var pts []point
	n := float32(len(named))
	for i, node := range named {
		// As C computes it: pct, then pct*160/4*n in float, then + 1e-10 in
		// double, back to float, floored. Each conversion rounds, so the
		// compiler cannot fuse the operations.
		pct := float32(int(node.Weight)) / float32(total)
		x := float32(float32(float32(pct*ketamaPointsPerServer)/4) * n)
		digests := int(math.Floor(float64(float32(float64(x) + 0.0000000001))))
		if last := strconv.Itoa(digests - 1); len(node.Name)+1+len(last) >= ketamaMaxHostLen {
			return nil, fmt.Errorf("%w: %q (a point name %q-%s would be over %d bytes)", ErrLongName, node.Name, node.Name, last, ketamaMaxHostLen-1)
		}
		k.points[i] = digests * 4
		buf := []byte(node.Name + "-")
		base := len(buf)
		for d := range digests {
			sum := md5.Sum(strconv.AppendInt(buf[:base], int64(d), 10))
			for x := range 4 {
				pts = append(pts, point{binary.LittleEndian.Uint32(sum[4*x:]), int32(i)})
			}
		}
	}
	// Built in server order, so a stable sort by value leaves a tie to the
	// server listed first.
	slices.SortStableFunc(pts, func(a, b point) int {
		switch {
		case a.value < b.value:
			return -1
		case a.value > b.value:
			return 1
		}
		return 0
	})
	k.values, k.owners = make([]uint32, len(pts)), make([]int32, len(pts))
	for i, p := range pts {
		k.values[i], k.owners[i] = p.value, p.owner
	}
	b := uint(bits.Len(uint(len(pts)))) // len(pts) < 2^b <= 2 len(pts)
	k.shift = 32 - b
	k.starts = make([]int32, 1<<b+1)
	i := 0
	for bucket := range 1 << b {
		for i < len(k.values) && int(k.values[i]>>k.shift) < bucket {
			i++
		}
		k.starts[bucket] = int32(i)
	}
	k.starts[1<<b] = int32(len(k.values))
	k.zones, k.nzones = numberZones(k.nodes)
	return k, nil
}

// KetamaHash returns the position of key on a ketama continuum: the first 4
// bytes of its MD5, little-endian (twemproxy's hash_md5). No hash tag is
// taken.
func KetamaHash(key string) uint32 {
	sum := md5.Sum([]byte(key))
	return binary.LittleEndian.Uint32(sum[:4])
}

// Locate returns the server that owns key.
func (k *Ketama) Locate(key string) Node {
	key = k.tag.of(key)
	var h uint32
	if k.fnv {
		h = twemproxyFNV1a64(key)
	} else {
		h = KetamaHash(key)
	}
	return k.nodes[k.owners[k.index(h)]]
}

// index returns the index of the first point at or above h, wrapping to 0:
// the point twemproxy's ketama_dispatch finds with a binary search of the
// whole continuum, found with one among the points of h's bucket.
func (k *Ketama) index(h uint32) int {
	b := h >> k.shift
	lo, hi := int(k.starts[b]), int(k.starts[b+1])
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if k.values[mid] < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(k.values) {
		return 0
	}
	return lo
}

// Nodes returns the servers sorted by Name, with their names formed (see
// Ketama) and weights at least 1. The slice is a copy.
func (k *Ketama) Nodes() []Node { return slices.Clone(k.sorted) }

// Points returns the number of points of each server, in the order given:
// the counts twemproxy logs as "points per server".
func (k *Ketama) Points() []int { return slices.Clone(k.points) }

// Shares returns the fraction of the 32-bit hash space each server owns, by
// Name: exact, from the arcs between points.
func (k *Ketama) Shares() map[string]float64 {
	s := make(map[string]float64, len(k.nodes))
	for _, n := range k.nodes {
		s[n.Name] = 0
	}
	overlay32(k, k, func(a, _ int32, length float64) { s[k.nodes[a].Name] += length / (1 << 32) })
	return s
}

// overlay32 walks the union of two continuums' points and calls fn for every
// arc with the index of its owner in a and in b and its length. An arc runs
// from a point (excluded) to the next (included); a hash above the last
// point wraps to the first.
func overlay32(a, b *Ketama, fn func(ownerA, ownerB int32, length float64)) {
	prev := int64(-1) // the arc [0, first point] starts at 0
	i, j := 0, 0
	for i < len(a.values) || j < len(b.values) {
		var u uint32
		switch {
		case j == len(b.values) || i < len(a.values) && a.values[i] <= b.values[j]:
			u = a.values[i]
		default:
			u = b.values[j]
		}
		fn(a.owners[i%len(a.values)], b.owners[j%len(b.values)], float64(int64(u)-prev))
		prev = int64(u)
		for i < len(a.values) && a.values[i] == u {
			i++
		}
		for j < len(b.values) && b.values[j] == u {
			j++
		}
	}
	if rest := float64(math.MaxUint32 - prev); rest > 0 {
		fn(a.owners[0], b.owners[0], rest)
	}
}
