package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/shardcache/shardcache/ring"
)

// maxSlots bounds the slots of a ModN: the sum of its nodes' weights.
const maxSlots = 1 << 20

// ModN places keys the way a plain sharded client does, hash(key) % N: the
// key's slot is ring.Hash(key) modulo the number of slots, and the slots
// list the nodes in the order given, each Weight times. ring.Hash is the
// ring's murmur3 of the key (of its hash tag, if any), so ModN and the ring
// differ only in how they map a hash to a node.
//
// A ModN is immutable and implements ring.Locator, so the client can run on
// it through Options.Placement and ReshardTo.
type ModN struct {
	slots []ring.Node // in the order given, node i repeated Weight times
	nodes []ring.Node // sorted by Name, for Nodes
}

// NewModN returns the mod-N placement of nodes, in their order. Nodes are
// checked by the rules of ring.New (names default to addresses, weight 0 is
// 1, no duplicates).
func NewModN(nodes []ring.Node) (*ModN, error) {
	slots := 0
	for _, n := range nodes {
		if slots += max(n.Weight, 1); slots > maxSlots {
			return nil, fmt.Errorf("%w: node %q: more than %d slots in all", ring.ErrBadWeight, n.Addr, maxSlots)
		}
	}
	r, err := ring.New(nodes, ring.WithVnodes(1)) // validation and defaults only
	if err != nil {
		return nil, err
	}
	m := &ModN{nodes: r.Nodes(), slots: make([]ring.Node, 0, slots)}
	for _, n := range nodes {
		if n.Name == "" {
			n.Name = n.Addr
		}
		n.Weight = max(n.Weight, 1)
		for range n.Weight {
			m.slots = append(m.slots, n)
		}
	}
	return m, nil
}

// Locate returns the node of key's slot.
func (m *ModN) Locate(key string) ring.Node {
	return m.slots[ring.Hash(key)%uint64(len(m.slots))]
}

// Nodes returns the nodes sorted by Name; the slice is a copy.
func (m *ModN) Nodes() []ring.Node { return slices.Clone(m.nodes) }

// ModNMoved returns the fraction of keys whose node differs between two
// mod-N placements, by Name. A hash h keeps its node when both slot lists
// name the same node at h mod their lengths, which repeats every lcm of the
// lengths: the fraction is exact over that period when it is at most 2^24
// slots (up to the 2^64 mod lcm hashes left over, a 2^-40 error), else
// estimated from 2^22 pseudo-random hashes.
func ModNMoved(from, to *ModN) float64 {
	n1, n2 := uint64(len(from.slots)), uint64(len(to.slots))
	moved := func(h uint64) bool { return from.slots[h%n1].Name != to.slots[h%n2].Name }
	count := 0
	if period := n1 / gcd(n1, n2) * n2; period <= 1<<24 {
		for h := range period {
			if moved(h) {
				count++
			}
		}
		return float64(count) / float64(period)
	}
	const samples = 1 << 22
	r := rand.New(rand.NewPCG(1, 2))
	for range samples {
		if moved(r.Uint64()) {
			count++
		}
	}
	return float64(count) / samples
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
