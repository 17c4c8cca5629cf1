package replica

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/shardcache/shardcache/ring"
)

// MaxReplicas is the most members a Placement's sets have: a set's id
// packs its members' indices, 16 bits each, into 64.
const MaxReplicas = 4

// MaxNodes is the most nodes a Placement's base may have, for the same
// reason.
const MaxNodes = 1<<16 - 1

// AddrPrefix starts the address of a replica set's node, which no real
// address may (ring.CheckAddr refuses it).
const AddrPrefix = "replicas:"

// Placement places each key on its replica set, the n distinct nodes its
// base gives it (ring.LocatorN): Locate returns the set as a node (named
// after its members, its address AddrPrefix and theirs), Nodes the
// physical nodes, and Set the set's client, so that routing, migrations
// and sweeps handle sets as they handle nodes.
type Placement struct {
	base  ring.LocatorN
	n     int
	zone  string         // the caller's zone: its members are read first
	cfg   Config         // each Set's
	index map[string]int // base's nodes by address
	// minus, for the old placement of a migration, is the new one: a key's
	// set here leaves out the nodes of its new set (Without).
	minus *Placement
	// sets holds the replica sets met so far, by id (Locate) and by their
	// node's address: replaced whole under mu when one is added, read
	// without a lock or an allocation.
	sets atomic.Pointer[sets]
	mu   sync.Mutex
}

// sets are a placement's replica sets, by id and by address.
type sets struct {
	byID   map[uint64]*entry
	byAddr map[string]*entry
}

// entry is one replica set of a placement: its node, its members in ring
// order, and the set's client, made on first use.
type entry struct {
	node    ring.Node
	members []ring.Node
	conn    atomic.Pointer[Set]
}

// NewPlacement returns the placement of n replicas a key over base, the
// members of zone read first, each set's client made with cfg. It panics
// if n is not 1 to MaxReplicas or base has more than MaxNodes nodes: the
// caller checks its options.
func NewPlacement(base ring.LocatorN, n int, zone string, cfg Config) *Placement {
	nodes := base.Nodes()
	if n < 1 || n > MaxReplicas || len(nodes) > MaxNodes {
		panic(fmt.Sprintf("replica: a placement of %d replicas over %d nodes", n, len(nodes)))
	}
	p := &Placement{base: base, n: n, zone: zone, cfg: cfg, index: make(map[string]int, len(nodes))}
	for i, nd := range nodes {
		p.index[nd.Addr] = i
	}
	return p
}

// Without returns p as the old placement of a migration to q: a key's set
// leaves out the nodes of its set in q, and is its set in q when nothing is
// left, so that the migration sees no move. A node in both sets then gets
// the new set's operations alone: an Incr there, and the delete the old
// owner gets after it, would otherwise undo each other.
func (p *Placement) Without(q *Placement) *Placement {
	return &Placement{base: p.base, n: p.n, zone: p.zone, cfg: p.cfg, index: p.index, minus: q}
}

// appendSet appends key's replicas in p's base to dst: on the caller's
// stack for a *ring.Ring, whose concrete call lets dst stay there; another
// placement's, through the interface, in a slice of their own.
func (p *Placement) appendSet(dst []ring.Node, key string) []ring.Node {
	if r, ok := p.base.(*ring.Ring); ok {
		return r.AppendLocateN(dst, key, p.n)
	}
	return p.base.AppendLocateN(make([]ring.Node, 0, p.n), key, p.n)
}

// Locate returns key's replica set, as a node.
func (p *Placement) Locate(key string) ring.Node {
	var buf [MaxReplicas]ring.Node
	ms := p.appendSet(buf[:0], key)
	if p.minus != nil {
		var nb [MaxReplicas]ring.Node
		drop := p.minus.appendSet(nb[:0], key)
		kept := ms[:0]
		for _, m := range ms {
			in := false
			for _, d := range drop {
				in = in || d.Addr == m.Addr
			}
			if !in {
				kept = append(kept, m)
			}
		}
		if ms = kept; len(ms) == 0 {
			return p.minus.Locate(key)
		}
	}
	if len(ms) == 1 {
		return ms[0]
	}
	var id uint64
	for i, m := range ms {
		id |= uint64(p.index[m.Addr]+1) << (16 * i)
	}
	if sets := p.sets.Load(); sets != nil {
		if e, ok := sets.byID[id]; ok {
			return e.node
		}
	}
	return p.add(id, ms).node
}

// add records the replica set ms, of id.
func (p *Placement) add(id uint64, ms []ring.Node) *entry {
	names, addrs := make([]string, len(ms)), make([]string, len(ms))
	for i, m := range ms {
		names[i], addrs[i] = m.Name, m.Addr
	}
	e := &entry{
		node:    ring.Node{Name: strings.Join(names, "+"), Addr: AddrPrefix + strings.Join(addrs, ","), Weight: 1},
		members: append([]ring.Node(nil), ms...),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.sets.Load()
	if old == nil {
		old = &sets{}
	}
	if got, ok := old.byID[id]; ok {
		return got
	}
	next := &sets{byID: maps.Clone(old.byID), byAddr: maps.Clone(old.byAddr)}
	if next.byID == nil {
		next.byID, next.byAddr = map[uint64]*entry{}, map[string]*entry{}
	}
	next.byID[id], next.byAddr[e.node.Addr] = e, e
	p.sets.Store(next)
	return e
}

// Nodes returns the physical nodes.
func (p *Placement) Nodes() []ring.Node { return p.base.Nodes() }

// Primary returns the first member of key's set.
func (p *Placement) Primary(key string) ring.Node {
	return p.base.Locate(key)
}

// Keeps reports whether the node at addr keeps key in p, as its owner or,
// in a Placement, as one of its replicas.
func Keeps(p ring.Locator, key, addr string) bool {
	rp, ok := p.(*Placement)
	if !ok {
		return p.Locate(key).Addr == addr
	}
	var buf [MaxReplicas]ring.Node
	for _, m := range rp.appendSet(buf[:0], key) {
		if m.Addr == addr {
			return true
		}
	}
	return false
}

// Set returns the client of the replica set whose node's address is addr
// (Locate's), its members found by member (nil: none at that address);
// nil if p has met no such set, or a member is missing. It is made on
// first use, and kept.
func (p *Placement) Set(addr string, member func(addr string) Member) *Set {
	ss := p.sets.Load()
	if ss == nil {
		return nil
	}
	e := ss.byAddr[addr]
	if e == nil {
		return nil
	}
	if s := e.conn.Load(); s != nil {
		return s
	}
	s := p.newSet(e, member)
	if s == nil {
		return nil
	}
	e.conn.CompareAndSwap(nil, s)
	return e.conn.Load()
}

// newSet returns the client of e, its members from member; nil if one is
// missing.
func (p *Placement) newSet(e *entry, member func(addr string) Member) *Set {
	var ring, read []Member
	for _, n := range e.members {
		m := member(n.Addr)
		if m == nil {
			return nil
		}
		ring = append(ring, m)
	}
	for _, local := range []bool{true, false} {
		for i, m := range ring {
			if (p.zone != "" && e.members[i].Zone == p.zone) == local {
				read = append(read, m)
			}
		}
	}
	return New(ring, read, p.cfg)
}
