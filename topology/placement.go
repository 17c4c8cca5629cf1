package topology

import (
	"fmt"
	"slices"

	"github.com/shardcache/shardcache/ring"
)

// Kind names a placement, as the CLI's --from-kind does.
type Kind string

// The placements a migration can start from. The new placement is always
// a ring.
const (
	KindRing       Kind = "ring"       // our ring (ring.New); also the empty Kind
	KindKetama     Kind = "ketama"     // twemproxy's or libmemcached's (ring.NewKetama)
	KindModulo     Kind = "modulo"     // hash % N, gomemcache's ServerList (ring.NewModulo)
	KindRendezvous Kind = "rendezvous" // go-redis v9's Ring (ring.NewRendezvous)
)

// Kinds are the known kinds, in the order the CLI lists them.
var Kinds = []Kind{KindRing, KindKetama, KindModulo, KindRendezvous}

// checkKind checks a kind and the hash options that go with it.
func checkKind(kind Kind, hash, tag string) error {
	switch {
	case kind != "" && !slices.Contains(Kinds, kind):
		return fmt.Errorf("%w: %q (want one of ring, ketama, modulo, rendezvous)", ErrBadKind, kind)
	case hash != "" && kind != KindKetama && kind != KindModulo:
		return fmt.Errorf("%w: a key hash (%q) is only for ketama or modulo", ErrBadKind, hash)
	case tag != "" && kind != KindKetama && kind != KindModulo:
		return fmt.Errorf("%w: a hash tag (%q) is only for ketama or modulo", ErrBadKind, tag)
	}
	return nil
}

// Placement builds the placement kind of nodes: for ketama, hash is
// ring.KetamaKeyHash (default md5), for modulo ring.ModuloHash (default
// crc32, gomemcache's), and tag is a two-character hash tag such as "{}";
// vnodes is the ring's points per unit of weight. The ring's own errors
// (ring.ErrBadHash, ring.ErrBadHashTag, ...) come back wrapped.
func Placement(kind Kind, hash, tag string, nodes []ring.Node, vnodes int) (ring.Locator, error) {
	if err := checkKind(kind, hash, tag); err != nil {
		return nil, err
	}
	switch kind {
	case KindKetama:
		h := ring.KetamaMD5
		if hash != "" {
			h = ring.KetamaKeyHash(hash)
		}
		return ring.NewKetama(nodes, ring.WithKetamaHashTag(tag), ring.WithKetamaKeyHash(h))
	case KindModulo:
		slots, err := ring.ModuloSlots(nodes)
		if err != nil {
			return nil, err
		}
		h := ring.ModuloCRC32
		if hash != "" {
			h = ring.ModuloHash(hash)
		}
		return ring.NewModulo(slots, ring.WithModuloHash(h), ring.WithModuloHashTag(tag))
	case KindRendezvous:
		return ring.NewRendezvous(nodes)
	}
	return ring.New(nodes, ring.WithVnodes(vnodes))
}

// Ring builds the ring of nodes at vnodes points per unit of weight
// (ring.DefaultVnodes when 0), equalized to the tolerance equalize when it
// is above 0, classic when it is 0: Equalize's meaning, not
// ring.WithEqualize's, whose 0 is ring.DefaultTolerance.
func Ring(nodes []ring.Node, vnodes int, equalize float64) (*ring.Ring, error) {
	if vnodes == 0 {
		vnodes = ring.DefaultVnodes
	}
	if equalize == 0 {
		return ring.New(nodes, ring.WithVnodes(vnodes))
	}
	return ring.New(nodes, ring.WithVnodes(vnodes), ring.WithEqualize(equalize))
}

// Placements builds what t places: the new ring of t.Nodes (equalized to
// t.Equalize) and, with a migration, the old placement of t.OldNodes (a
// ring equalized to FromEqualize, or FromKind's placement; nil without a
// migration). vnodes is the ring's points per unit of weight
// (ring.DefaultVnodes when 0).
func (t *Topology) Placements(vnodes int) (old ring.Locator, new *ring.Ring, err error) {
	if vnodes == 0 {
		vnodes = ring.DefaultVnodes
	}
	if new, err = Ring(t.Nodes, vnodes, t.Equalize); err != nil {
		return nil, nil, err
	}
	if m := t.Migration; m != nil {
		if m.FromKind == "" || m.FromKind == KindRing {
			old, err = Ring(t.OldNodes(), vnodes, m.FromEqualize)
		} else {
			old, err = Placement(m.FromKind, m.FromHash, m.FromHashTag, t.OldNodes(), vnodes)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("migration from: %w", err)
		}
	}
	return old, new, nil
}
