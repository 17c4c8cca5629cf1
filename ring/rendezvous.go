package ring

import (
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Rendezvous is the placement of go-redis v9's Ring with its default
// NewConsistentHash: rendezvous (highest random weight) hashing over the
// shard names, byte for byte.
//
//   - A shard's hash is xxhash64 of its name (the key of RingOptions.Addrs,
//     here Node.Name) and a key's hash is xxhash64 of the key, or of its hash
//     tag: the bytes between the first '{' and the first '}' after it, when
//     there are any (go-redis's hashtag.Key; the rule of HashTag).
//   - A shard's score for a key is mix64(keyHash ^ shardHash), where mix64
//     is x ^= x>>12; x ^= x<<25; x ^= x>>27; x × 2685821657736338717; the
//     key goes to the shard of the highest score.
//
// mix64 is a bijection, so two shards of different hashes never tie and the
// order of shards (go-redis takes them from a map) does not matter; NewRendezvous
// refuses names whose hashes are equal, as go-redis would then pick between them
// by map order. dgryski/go-rendezvous with xxhash.Sum64String, which
// earlier go-redis versions used, is the same rule. go-redis places keys on
// the shards it deems up: a Rendezvous models every shard up.
//
// A Rendezvous is immutable and safe for concurrent use; it implements
// Locator, so a client can migrate from a go-redis Ring to a ring
// (Options.MigrateFrom, ReshardTo) without emptying the cache.
type Rendezvous struct {
	nodes  []Node   // sorted by Name
	hashes []uint64 // hashes[i] is the xxhash of nodes[i].Name

	// zones[i] numbers nodes[i].Zone, of nzones distinct, for AppendLocateN.
	zones  []int32
	nzones int
}

// NewRendezvous returns go-redis Ring's placement over nodes: Name is the
// shard's name in RingOptions.Addrs and Addr its address (Name defaults to
// Addr). A go-redis Ring has no weights: a weight other than 0 or 1 is
// ErrBadWeight. Bad input gets the ring's typed errors (ErrNoNodes,
// ErrEmptyAddr, ErrDuplicateName, ErrDuplicateAddr).
func NewRendezvous(nodes []Node) (*Rendezvous, error) {
	ns, err := normalize(nodes)
	if err != nil {
		return nil, err
	}
	r := &Rendezvous{nodes: ns, hashes: make([]uint64, len(ns))}
	seen := make(map[uint64]string, len(ns))
	for i, n := range ns {
		if n.Weight != 1 {
			return nil, fmt.Errorf("%w: node %q: %v (a go-redis Ring has no weights: want 0 or 1)", ErrBadWeight, n.Name, n.Weight)
		}
		r.hashes[i] = xxhash.Sum64String(n.Name)
		if other, ok := seen[r.hashes[i]]; ok {
			return nil, fmt.Errorf("%w: %q and %q have the same xxhash, and go-redis would pick between them at random", ErrDuplicateName, other, n.Name)
		}
		seen[r.hashes[i]] = n.Name
	}
	r.zones, r.nzones = numberZones(ns)
	return r, nil
}

// RendezvousHash returns the hash of key that Rendezvous scores shards by:
// xxhash64 of its hash tag if it has one, else of the whole key.
func RendezvousHash(key string) uint64 {
	if hasBrace(key) {
		key = HashTag(key)
	}
	return xxhash.Sum64String(key)
}

// Locate returns the shard that owns key. It does not allocate.
func (r *Rendezvous) Locate(key string) Node {
	return r.nodes[r.owner(RendezvousHash(key))]
}

// owner returns the index of the shard of highest score for a key hash.
func (r *Rendezvous) owner(kh uint64) int {
	best, bestScore := 0, mix64(kh^r.hashes[0])
	for i := 1; i < len(r.hashes); i++ {
		if s := mix64(kh ^ r.hashes[i]); s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// mix64 is go-redis's (and go-rendezvous's) xorshift-multiply mixing.
func mix64(x uint64) uint64 {
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	return x * 2685821657736338717
}

// Nodes returns the shards sorted by Name, Weight 1. The slice is a copy.
func (r *Rendezvous) Nodes() []Node { return slices.Clone(r.nodes) }
