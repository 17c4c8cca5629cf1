package ring

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"unsafe"

	"github.com/twmb/murmur3"
)

// ErrBadHash is returned for a hash a placement does not know.
var ErrBadHash = errors.New("shardcache/ring: unknown hash")

// ModuloHash names the hash a Modulo takes of a key. Each is the plain
// function of the key's bytes (of its hash tag, with WithModuloHashTag), with
// no seed, as a hand-written hash(key) % N uses it.
type ModuloHash string

// The hashes a Modulo can place keys by.
const (
	// ModuloCRC32 is crc32.ChecksumIEEE, gomemcache's ServerList. The
	// default. (ServerList hashes at most the first 256 bytes of a key, but
	// refuses keys over 250, so the two agree on every key it accepts.)
	ModuloCRC32 ModuloHash = "crc32"
	// ModuloMurmur3 is the 64-bit murmur3 the ring uses: x64_128, seed 0,
	// first half (twmb/murmur3 StringSum64, spaolacci/murmur3 Sum64).
	ModuloMurmur3 ModuloHash = "murmur3"
	// ModuloMurmur3x86 is 32-bit murmur3, x86_32 with seed 0 (Sum32 of
	// twmb/murmur3 and spaolacci/murmur3, Guava's murmur3_32).
	ModuloMurmur3x86 ModuloHash = "murmur3-32"
	// ModuloFNV1a is 64-bit FNV-1a (hash/fnv New64a).
	ModuloFNV1a ModuloHash = "fnv1a"
	// ModuloFNV1a32 is 32-bit FNV-1a (hash/fnv New32a).
	ModuloFNV1a32 ModuloHash = "fnv1a-32"
)

// ModuloHashes lists every ModuloHash, the default first.
var ModuloHashes = []ModuloHash{ModuloCRC32, ModuloMurmur3, ModuloMurmur3x86, ModuloFNV1a, ModuloFNV1a32}

// sum returns the hash function and its width in bits, or ok false for an
// unknown name.
func (h ModuloHash) sum() (fn func(string) uint64, width uint, ok bool) {
	switch h {
	case ModuloCRC32:
		return crc32String, 32, true
	case ModuloMurmur3:
		return murmur3.StringSum64, 64, true
	case ModuloMurmur3x86:
		return func(s string) uint64 { return uint64(murmur3.StringSum32(s)) }, 32, true
	case ModuloFNV1a:
		return fnv1a64, 64, true
	case ModuloFNV1a32:
		return func(s string) uint64 { return uint64(fnv1a32(s)) }, 32, true
	}
	return nil, 0, false
}

// crc32String is crc32.ChecksumIEEE of s's bytes, read in place: []byte(s)
// would be copied to the heap on every call, as crc32 reaches its
// implementation through a function variable that escape analysis cannot
// see through. crc32 only reads the bytes.
func crc32String(s string) uint64 {
	return uint64(crc32.ChecksumIEEE(unsafe.Slice(unsafe.StringData(s), len(s))))
}

func fnv1a64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

func fnv1a32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// ModuloOption configures NewModulo.
type ModuloOption func(*moduloConfig)

type moduloConfig struct {
	hash ModuloHash
	tag  string
}

// WithModuloHash sets the hash of keys (default ModuloCRC32).
func WithModuloHash(h ModuloHash) ModuloOption {
	return func(c *moduloConfig) { c.hash = h }
}

// WithModuloHashTag hashes a key by its hash tag: tag is its two delimiters,
// such as "{}" (see HashTag); "" (the default) hashes every key whole.
func WithModuloHashTag(tag string) ModuloOption {
	return func(c *moduloConfig) { c.tag = tag }
}

// Modulo places keys by hash(key) % N over a list of servers, in the order
// given: gomemcache's ServerList (crc32), or any hand-written sharding of
// that form with the hash it uses. An address listed k times holds k of the
// N slots, as it does in a ServerList: that is how such a list weights a
// server. Each address is a node named after it, so placements compare
// servers.
//
// A Modulo is immutable and safe for concurrent use; it implements Locator,
// so a client can run on it (Options.Placement) or migrate from it to a ring
// without emptying the cache (Options.MigrateFrom, ReshardTo).
type Modulo struct {
	// Inputs.
	slots []Node // one per address given, in order
	hash  ModuloHash
	tag   hashTag

	// Internal data.
	nodes []Node // distinct addresses, sorted, Weight = slots held
	sum   func(string) uint64
	width uint // bits of the hash: 32 or 64
	crc32 bool // hash is ModuloCRC32, which Locate calls directly

	// For AppendLocateN: server[i] is the index in nodes of slot i's
	// server, and zones numbers the nodes' zones (all "": one zone).
	server []int32
	zones  []int32
}

// NewModulo returns the mod-N placement over addrs, in their order. It
// returns ErrNoNodes for an empty list, ErrEmptyAddr for an empty address,
// ErrBadHash for an unknown hash and ErrBadHashTag for a tag that is not two
// characters.
func NewModulo(addrs []string, opts ...ModuloOption) (*Modulo, error) {
	cfg := moduloConfig{hash: ModuloCRC32}
	for _, o := range opts {
		o(&cfg)
	}
	sum, width, ok := cfg.hash.sum()
	if !ok {
		return nil, fmt.Errorf("%w: %q (want one of %v)", ErrBadHash, cfg.hash, ModuloHashes)
	}
	tag, err := parseHashTag(cfg.tag)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, ErrNoNodes
	}
	if len(addrs) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %d addresses (want at most %d)", ErrBadWeight, len(addrs), uint32(math.MaxUint32))
	}
	m := &Modulo{slots: make([]Node, len(addrs)), hash: cfg.hash, tag: tag, sum: sum, width: width, crc32: cfg.hash == ModuloCRC32}
	weight := map[string]int{}
	for i, a := range addrs {
		if a == "" {
			return nil, fmt.Errorf("%w: address %d", ErrEmptyAddr, i)
		}
		if weight[a] == 0 {
			m.nodes = append(m.nodes, Node{Name: a, Addr: a})
		}
		weight[a]++
	}
	for i := range m.nodes {
		m.nodes[i].Weight = float64(weight[m.nodes[i].Addr])
	}
	slices.SortFunc(m.nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	index := make(map[string]int32, len(m.nodes))
	for i, n := range m.nodes {
		index[n.Addr] = int32(i)
	}
	m.server = make([]int32, len(addrs))
	for i, a := range addrs {
		m.slots[i] = Node{Name: a, Addr: a, Weight: float64(weight[a])}
		m.server[i] = index[a]
	}
	m.zones = make([]int32, len(m.nodes))
	return m, nil
}

// Locate returns the server of key's slot: hash(key) % N. It does not
// allocate.
func (m *Modulo) Locate(key string) Node {
	if m.tag.set {
		key = m.tag.of(key)
	}
	// The default hash called directly, and a 32-bit hash reduced with a
	// 32-bit division, cheaper than a 64-bit one: the paired benchmark
	// against gomemcache's PickServer is in bench/ (docs/performance.md).
	var i uint32
	switch {
	case m.crc32:
		i = crc32.ChecksumIEEE(unsafe.Slice(unsafe.StringData(key), len(key))) % uint32(len(m.slots))
	case m.width == 32:
		i = uint32(m.sum(key)) % uint32(len(m.slots))
	default:
		i = uint32(m.sum(key) % uint64(len(m.slots)))
	}
	// Field by field, as Ring.Locate does: cheaper than copying the Node.
	n := &m.slots[i]
	return Node{Name: n.Name, Addr: n.Addr, Weight: n.Weight}
}

// Nodes returns the distinct servers sorted by Name (their address), each
// with the number of slots it holds as its Weight. The slice is a copy.
func (m *Modulo) Nodes() []Node { return slices.Clone(m.nodes) }

// Addrs returns the list of slots, in order, as given to NewModulo.
func (m *Modulo) Addrs() []string {
	a := make([]string, len(m.slots))
	for i, n := range m.slots {
		a[i] = n.Addr
	}
	return a
}

// Hash returns the hash the placement takes of keys.
func (m *Modulo) Hash() ModuloHash { return m.hash }

// Shares returns the fraction of the hash space each server owns, by Name:
// exact, counting the hashes of each residue.
func (m *Modulo) Shares() map[string]float64 {
	n := uint64(len(m.slots))
	s := make(map[string]float64, len(m.nodes))
	for i, node := range m.slots {
		s[node.Name] += residueCount(m.width, n, uint64(i)) / math.Ldexp(1, int(m.width))
	}
	return s
}

// residueCount returns how many values below 2^width are r modulo n, as a
// float64.
func residueCount(width uint, n, r uint64) float64 {
	if width == 64 {
		q, rem := math.MaxUint64/n, math.MaxUint64%n // 2^64-1 = q n + rem: values up to q n + rem
		if r <= rem {
			q++
		}
		return float64(q)
	}
	total := uint64(1) << width
	q := total / n
	if r < total%n {
		q++
	}
	return float64(q)
}

// maxModuloPeriod bounds the residues moduloFlows walks to be exact.
const maxModuloPeriod = 1 << 22

// moduloFlows returns the flows between the servers of two Modulo placements
// of the same hash (see Compare), exact over the whole hash space, when the
// period of the two slot lists, the lcm of their lengths, is at most 2^22;
// else ok is false.
func moduloFlows(from, to *Modulo) (flows map[[2]string]float64, ok bool) {
	n1, n2 := uint64(len(from.slots)), uint64(len(to.slots))
	flows = map[[2]string]float64{}
	period := n1 / gcd(n1, n2) * n2
	if n1 > maxModuloPeriod || n2 > maxModuloPeriod || period > maxModuloPeriod {
		return nil, false
	}
	// The hash space is q whole periods and the first rest hashes of one
	// more: hash h of the period counts q+1 times if below rest, else q.
	var q, rest uint64
	if from.width == 64 {
		q, rest = math.MaxUint64/period, math.MaxUint64%period+1
		if rest == period {
			q, rest = q+1, 0
		}
	} else {
		q, rest = (uint64(1)<<from.width)/period, (uint64(1)<<from.width)%period
	}
	// Count by pair of servers, numbered: one map operation per hash of
	// the period.
	fromIdx, fromAddr := serverIndex(from.slots)
	toIdx, toAddr := serverIndex(to.slots)
	count := map[int]float64{}
	for h := range period {
		c := float64(q)
		if h < rest {
			c++
		}
		count[fromIdx[h%n1]*len(toAddr)+toIdx[h%n2]] += c
	}
	space := math.Ldexp(1, int(from.width))
	for ij, c := range count {
		flows[[2]string{fromAddr[ij/len(toAddr)], toAddr[ij%len(toAddr)]}] += c / space
	}
	return flows, true
}

// moduloSampleFlows counts the flows between two Modulo placements of the
// same hash over samples pseudo-random hashes.
func moduloSampleFlows(from, to *Modulo, samples int) map[[2]string]float64 {
	n1, n2 := uint64(len(from.slots)), uint64(len(to.slots))
	flows := map[[2]string]float64{}
	r := rand.New(rand.NewPCG(1, 2))
	for range samples {
		h := r.Uint64() >> (64 - from.width)
		flows[[2]string{from.slots[h%n1].Addr, to.slots[h%n2].Addr}] += 1 / float64(samples)
	}
	return flows
}

// serverIndex numbers the distinct addresses of slots: idx[i] is slot i's
// number, addrs the addresses by number.
func serverIndex(slots []Node) (idx []int, addrs []string) {
	num := map[string]int{}
	idx = make([]int, len(slots))
	for i, n := range slots {
		k, ok := num[n.Addr]
		if !ok {
			k = len(addrs)
			num[n.Addr] = k
			addrs = append(addrs, n.Addr)
		}
		idx[i] = k
	}
	return idx, addrs
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// MaxModuloSlots bounds the slots ModuloSlots makes of weighted nodes.
const MaxModuloSlots = 1 << 20

// ModuloSlots returns the slot list of a weighted node list, the way a
// hand-written hash % N weights a server: each node's Addr repeated Weight
// times (0 counts as 1), in the order given. Names play no part in mod-N.
// It returns ErrBadWeight for a negative weight or more than MaxModuloSlots
// slots in all, and ErrEmptyAddr for an empty address.
func ModuloSlots(nodes []Node) ([]string, error) {
	total := 0
	for i, n := range nodes {
		if n.Addr == "" {
			return nil, fmt.Errorf("%w: node %d (name %q)", ErrEmptyAddr, i, n.Name)
		}
		if !(n.Weight >= 0) || n.Weight != math.Trunc(n.Weight) { // NaN and -Inf fail here, +Inf below
			return nil, fmt.Errorf("%w: node %q: %v (want a whole number >= 0: a slot list repeats an address)", ErrBadWeight, n.Addr, n.Weight)
		}
		if n.Weight > MaxModuloSlots-float64(total) {
			return nil, fmt.Errorf("%w: node %q: more than %d slots in all", ErrBadWeight, n.Addr, MaxModuloSlots)
		}
		if total += max(int(n.Weight), 1); total > MaxModuloSlots {
			return nil, fmt.Errorf("%w: node %q: more than %d slots in all", ErrBadWeight, n.Addr, MaxModuloSlots)
		}
	}
	addrs := make([]string, 0, total)
	for _, n := range nodes {
		for range max(int(n.Weight), 1) {
			addrs = append(addrs, n.Addr)
		}
	}
	return addrs, nil
}
