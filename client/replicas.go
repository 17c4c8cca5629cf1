package client

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/replica"
	"github.com/shardcache/shardcache/ring"
)

// Replicas (Options.Replicas = R > 1): every key is kept on the R distinct
// nodes ring.LocateN gives it, nodes of zones not used yet first. The
// client places each key on its replica set (replicaPlacement), which it
// handles as one node, a replica.Set over its members' clients (package
// internal/node/replica says what each call does there), so that routing,
// migrations (old set → new set: a key moves when its set changes) and
// sweeps work on sets as they do on nodes.
//
// The rule for a member that missed a write (it failed there, or the
// member was held down): its key is kept as the member's hint (the gutter's
// mechanism, gutter.go), the member is held down at once, and before it
// serves again the probe deletes the hinted keys there (past
// DefaultGutterHints keys, flushes it), after replaySettle: a member that
// was paused, not killed, comes back with the values it held, and runs the
// commands it had read before its pause. So a member does not keep the old
// values of the keys written meanwhile, whether it is back or first in a
// key's read order; and since a write a member missed is not acknowledged
// (without FailOpen), no process reads a value older than an acknowledged
// write, the one that missed the hint included.

// MaxReplicas is the most copies of a key Options.Replicas may ask for.
const MaxReplicas = 4

// replaySettle is how long a replica that answers again waits before its
// hints are replayed: a paused server runs the commands it had read before
// its pause first, which a replay made before them would not undo.
const replaySettle = 100 * time.Millisecond

// repairWithin is how long after a read began its repair may still be
// sent.
func repairWithin(o *Options) time.Duration { return o.ReadTimeout + o.WriteTimeout }

// replicaTomb is the life of a replica set's tombstones: a repair sent
// within repairWithin of its read lands within its own round trip, well
// before the tombstone that refuses it ends.
func replicaTomb(o *Options) time.Duration {
	return max(5*time.Second, 2*(o.DialTimeout+o.ReadTimeout+o.WriteTimeout)+repairWithin(o))
}

// setPrefix starts the address of a replica set's node, which no real
// address may (ring.CheckAddr refuses it).
const setPrefix = "replicas:"

// checkReplicas rejects the options Replicas does not work with yet.
func (o *Options) checkReplicas() error {
	switch r := o.Replicas; {
	case r < 0 || r > MaxReplicas:
		return fmt.Errorf("%w: Replicas %d (want 1 to %d)", ErrBadOptions, r, MaxReplicas)
	case r <= 1:
		return nil
	}
	for _, f := range []struct {
		set  bool
		name string
	}{
		{len(o.Gutter) > 0, "Gutter"}, {o.NearCache != nil, "NearCache"}, {o.Topology != nil, "Topology"},
		{o.Lease > 0, "Lease"}, {o.MetaLeases, "MetaLeases"}, {o.StaleWhileRevalidate > 0, "StaleWhileRevalidate"},
		{o.EarlyRefresh > 0, "EarlyRefresh"}, {o.FailureThreshold < 0, "a negative FailureThreshold"},
	} {
		if f.set {
			return fmt.Errorf("%w: Replicas with %s is not supported", ErrBadOptions, f.name)
		}
	}
	return nil
}

// replicaPlacement places each key on its replica set: Locate returns the
// set as a node (its address setPrefix and its members'), Nodes the
// physical nodes.
type replicaPlacement struct {
	base ring.LocatorN
	n    int
	zone string // Options.Zone, read first
	// tomb is the life of a delete's tombstone, within which every repair
	// that read the value before the delete lands: repairWithin, then the
	// copy's own round trip.
	tomb, repairWithin time.Duration
	index              map[string]int // base's nodes by address
	// minus, for the old placement of a migration, is the new one: a key's
	// set here leaves out the nodes of its new set (without).
	minus *replicaPlacement
	// sets holds the replica sets met so far, by id (Locate) and by their
	// node's address: replaced whole under mu when one is added, read
	// without a lock or an allocation.
	sets atomic.Pointer[replicaSets]
	mu   sync.Mutex
}

// replicaSets are a placement's replica sets, by id and by address.
type replicaSets struct {
	byID   map[uint64]*replicaEntry
	byAddr map[string]*replicaEntry
}

// replicaEntry is one replica set of a placement: its node, its members
// in ring order, and the set's client, made on first use.
type replicaEntry struct {
	node    ring.Node
	members []ring.Node
	conn    atomic.Pointer[replica.Set]
}

func newReplicaPlacement(p ring.Locator, o *Options) (*replicaPlacement, error) {
	base, ok := p.(ring.LocatorN)
	if !ok {
		return nil, fmt.Errorf("%w: Replicas needs a placement that places replicas (ring.LocatorN), not %T", ErrBadOptions, p)
	}
	nodes := base.Nodes()
	if len(nodes) >= 1<<16 {
		return nil, fmt.Errorf("%w: Replicas over %d nodes", ErrBadOptions, len(nodes))
	}
	rp := &replicaPlacement{base: base, n: o.Replicas, zone: o.Zone, index: make(map[string]int, len(nodes)),
		repairWithin: repairWithin(o), tomb: replicaTomb(o)}
	for i, nd := range nodes {
		rp.index[nd.Addr] = i
	}
	return rp, nil
}

// without returns p as the old placement of a migration to q: a key's set
// leaves out the nodes of its set in q, and is its set in q when nothing is
// left, so that the migration sees no move. A node in both sets then gets
// the new set's operations alone: an Incr there, and the delete the old
// owner gets after it, would otherwise undo each other.
func (p *replicaPlacement) without(q *replicaPlacement) *replicaPlacement {
	return &replicaPlacement{base: p.base, n: p.n, zone: p.zone, tomb: p.tomb, repairWithin: p.repairWithin, index: p.index, minus: q}
}

// appendSet appends key's replicas in p's base to dst: on the caller's
// stack for a *ring.Ring, whose concrete call lets dst stay there; another
// placement's, through the interface, in a slice of their own.
func (p *replicaPlacement) appendSet(dst []ring.Node, key string) []ring.Node {
	if r, ok := p.base.(*ring.Ring); ok {
		return r.AppendLocateN(dst, key, p.n)
	}
	return p.base.AppendLocateN(make([]ring.Node, 0, p.n), key, p.n)
}

// Locate returns key's replica set, as a node.
func (p *replicaPlacement) Locate(key string) ring.Node {
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
func (p *replicaPlacement) add(id uint64, ms []ring.Node) *replicaEntry {
	names, addrs := make([]string, len(ms)), make([]string, len(ms))
	for i, m := range ms {
		names[i], addrs[i] = m.Name, m.Addr
	}
	e := &replicaEntry{
		node:    ring.Node{Name: strings.Join(names, "+"), Addr: setPrefix + strings.Join(addrs, ","), Weight: 1},
		members: append([]ring.Node(nil), ms...),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.sets.Load()
	if old == nil {
		old = &replicaSets{}
	}
	if got, ok := old.byID[id]; ok {
		return got
	}
	next := &replicaSets{byID: maps.Clone(old.byID), byAddr: maps.Clone(old.byAddr)}
	if next.byID == nil {
		next.byID, next.byAddr = map[uint64]*replicaEntry{}, map[string]*replicaEntry{}
	}
	next.byID[id], next.byAddr[e.node.Addr] = e, e
	p.sets.Store(next)
	return e
}

// entry returns the replica set whose node's address is addr, nil if p
// has met none.
func (p *replicaPlacement) entry(addr string) *replicaEntry {
	if sets := p.sets.Load(); sets != nil {
		return sets.byAddr[addr]
	}
	return nil
}

// Nodes returns the physical nodes.
func (p *replicaPlacement) Nodes() []ring.Node { return p.base.Nodes() }

// primary returns the first member of key's set: the node Client.Locate
// reports.
func (p *replicaPlacement) primary(key string) ring.Node {
	return p.base.Locate(key)
}

// keeps reports whether the node at addr keeps key in p, as its owner or,
// with replicas, as one of them.
func keeps(p ring.Locator, key, addr string) bool {
	rp, ok := p.(*replicaPlacement)
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

// setConn returns the client of the replica set n of st's placements, or
// nil when n is not one.
func setConn(st *state, n ring.Node) node.Node {
	if !strings.HasPrefix(n.Addr, setPrefix) {
		return nil
	}
	for _, p := range [2]ring.Locator{st.placement, st.oldPlacement()} {
		rp, ok := p.(*replicaPlacement)
		if !ok {
			continue
		}
		e := rp.entry(n.Addr)
		if e == nil {
			continue
		}
		if s := e.conn.Load(); s != nil {
			return s
		}
		s := rp.newReplicaSet(e, st.conns)
		if s == nil {
			return nil
		}
		e.conn.CompareAndSwap(nil, s)
		return e.conn.Load()
	}
	return nil
}

// oldPlacement is the placement a migration moves from, nil without one.
func (st *state) oldPlacement() ring.Locator {
	if st.mig == nil {
		return nil
	}
	return st.mig.Old()
}

// newReplicaSet returns the client of e, its members' clients from
// conns; nil if one is missing.
func (p *replicaPlacement) newReplicaSet(e *replicaEntry, conns map[string]*member) *replica.Set {
	var ring, read []replica.Member
	for _, n := range e.members {
		m := conns[n.Addr]
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
	return replica.New(ring, read, replica.Config{Tomb: p.tomb, RepairWithin: p.repairWithin, Unreachable: unreachableErr})
}

// unreachableErr reports whether err, from a call made under ctx, is a
// connection-level failure of the node (classify).
func unreachableErr(ctx context.Context, err error) bool { return classify(ctx, err) == unreachable }

// A member is a replica set's member (replica.Member).
var _ replica.Member = (*member)(nil)

// Conn is the member's node client.
func (m *member) Conn() node.Node { return m.Node }

// Down reports whether the breaker holds the member down.
func (m *member) Down() bool { return m.h.isDown() }

// Fail is the counted ErrNodeDown of a call of kind op to the member held
// down.
func (m *member) Fail(op node.Op) error { return m.down.fail(op) }

// Missed records that m missed a write of keys that reached another
// member: m is held down at once if it did not answer (err is a
// connection-level failure), and the keys are m's hints, replayed as
// deletes before it serves again (member.Wrote: at once if m is up, the
// caller's context having ended, say, or the server answering with an
// error).
func (m *member) Missed(ctx context.Context, err error, keys ...string) {
	m.h.replicaMissed.Add(1)
	if err != ErrNodeDown && classify(ctx, err) == unreachable {
		m.h.holdDown(err)
	}
	m.Wrote(ctx, keys...)
}
