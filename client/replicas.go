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
	"github.com/shardcache/shardcache/ring"
)

// Replicas (Options.Replicas = R > 1): every key is kept on the R distinct
// nodes ring.LocateN gives it, nodes of zones not used yet first. The
// client places each key on its replica set, which it handles as one node
// (replicaSet) made of its members' clients, so that routing, migrations
// (old set → new set: a key moves when its set changes) and sweeps work on
// sets as they do on nodes.
//
//   - A write (Set, SetMulti, Touch) goes to every member at once, one
//     held down skipped, and succeeds only when every member took it: a
//     write another process may not see on the member it reads first is
//     not acknowledged. It still lands on the members that answer, so
//     reads find it there; with FailOpen a write the live members took is
//     acknowledged (FailOpen's trade, as for one copy). Add reads the key
//     first (a value on any member is ErrNotStored), then is decided by
//     the first member in ring order that answers, and written to the
//     others. A copy (a backfill, a repair, a sweep's) goes to every
//     member that lacks the key, each on its own.
//   - A delete buries the key on every member (a tombstone of
//     replicaTombTTL, node.Bury), and fails if a member missed it: a
//     surviving copy would come back. The tombstone refuses a read's
//     repair that read the value before the delete.
//   - Incr, and the Items updates that depend on the present value (CAS,
//     replace, append, prepend, get-and-touch, incr/decr), run on the
//     first member in ring order alone, which must be up (ErrNodeDown
//     otherwise: a counter elsewhere would restart), and bury the key on
//     the others, which read it from the first member again.
//   - A read goes to the members in read order (Options.Zone's first,
//     then ring order), skipping those held down, to the next on a miss or
//     a failure; a value found past members that answered a miss is copied
//     back to them as a backfill is (never over a value or a tombstone),
//     when its TTL is known and the read took less than repairWithin. A
//     read fails only when every member failed; when some failed and the
//     others answered a miss, it is a miss.
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
	conn    atomic.Pointer[replicaSet]
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

// replicaSet is a replica set's client: its members' clients, in ring
// order and in read order.
type replicaSet struct {
	ring []*member // ring order: ring[0] decides Add and runs Incr
	read []*member // Options.Zone's first, then ring order
	// tomb and repairWithin are the placement's (replicaPlacement).
	tomb, repairWithin time.Duration
}

// newReplicaSet returns the client of e, its members' clients from
// conns; nil if one is missing.
func (p *replicaPlacement) newReplicaSet(e *replicaEntry, conns map[string]*member) *replicaSet {
	s := &replicaSet{tomb: p.tomb, repairWithin: p.repairWithin}
	for _, n := range e.members {
		m := conns[n.Addr]
		if m == nil {
			return nil
		}
		s.ring = append(s.ring, m)
	}
	for _, local := range []bool{true, false} {
		for i, m := range s.ring {
			if (p.zone != "" && e.members[i].Zone == p.zone) == local {
				s.read = append(s.read, m)
			}
		}
	}
	return s
}

var (
	_ node.Node    = (*replicaSet)(nil)
	_ node.Items   = (*replicaSet)(nil)
	_ node.Sweeper = (*replicaSet)(nil)
	_ node.Sender  = (*replicaSet)(nil)
)

// missed records that m missed a write of keys that reached another
// member: m is held down at once if it did not answer (err is a
// connection-level failure), and the keys are m's hints, replayed as
// deletes before it serves again (member.wrote: at once if m is up, the
// caller's context having ended, say, or the server answering with an
// error).
func (m *member) missed(ctx context.Context, err error, keys ...string) {
	m.h.replicaMissed.Add(1)
	if err != ErrNodeDown && classify(ctx, err) == unreachable {
		m.h.holdDown(err)
	}
	m.wrote(ctx, keys...)
}

// each runs op on every member at once, a member held down skipped (its
// error ErrNodeDown), and returns the errors in ring order.
func (s *replicaSet) each(o node.Op, op func(i int, m *member) error) []error {
	errs := make([]error, len(s.ring))
	var wg sync.WaitGroup
	last := -1 // run on this goroutine
	for i, m := range s.ring {
		if m.h.isDown() {
			errs[i] = m.down.fail(o)
			continue
		}
		if j := last; j >= 0 {
			wg.Go(func() { errs[j] = op(j, s.ring[j]) })
		}
		last = i
	}
	if last >= 0 {
		errs[last] = op(last, s.ring[last])
	}
	wg.Wait()
	return errs
}

// write runs a write of keys on every member; it fails only when it
// reached none (the first member's error), and every member that missed it
// is hinted (missed). ok says which errors are answers (a Touch's miss).
func (s *replicaSet) write(ctx context.Context, o node.Op, keys []string, ok func(error) bool, op func(n node.Node) error) error {
	errs := s.each(o, func(_ int, m *member) error { return op(m.Node) })
	var first, miss error
	reached := false
	for _, err := range errs {
		if err == nil || ok != nil && ok(err) {
			reached = true
			if first == nil {
				first = err
			}
		}
	}
	for i, err := range errs {
		// A write that reached none changed nothing where it was answered;
		// a member held down or that failed to answer is hinted anyway
		// (FailOpen may drop the write, and it may have landed there).
		if err != nil && !(ok != nil && ok(err)) && (reached || err == ErrNodeDown || classify(ctx, err) == unreachable) {
			s.ring[i].missed(ctx, err, keys...)
			if s.ring[i].h.isDown() {
				err = ErrNodeDown // held down now: what FailOpen forgives
			}
			if miss == nil {
				miss = err
			}
		}
	}
	switch {
	case !reached:
		return errs[0]
	case miss != nil:
		return miss // reached some replicas, not all: not acknowledged
	}
	return first
}

// buryAll buries keys on every member, and fails if one missed it.
func (s *replicaSet) buryAll(ctx context.Context, keys []string, ttl time.Duration, kind node.TombKind) ([]bool, error) {
	founds := make([][]bool, len(s.ring))
	errs := s.each(node.OpDeleteMulti, func(i int, m *member) (err error) {
		founds[i], err = m.Node.Bury(ctx, keys, max(ttl, s.tomb), kind)
		return err
	})
	found := make([]bool, len(keys))
	var failed error
	for i, err := range errs {
		if err != nil {
			s.ring[i].missed(ctx, err, keys...)
			if failed == nil {
				failed = err
			}
		}
		for j, f := range founds[i] {
			found[j] = found[j] || f
		}
	}
	return found, failed
}

// decider returns the first member in ring order not held down, nil when
// all are: the one that decides an Add and runs an Incr.
func (s *replicaSet) decider() *member {
	for _, m := range s.ring {
		if !m.h.isDown() {
			return m
		}
	}
	return nil
}

// update runs op, which depends on the key's present value, on the first
// member alone, then buries key on the others (update, in the package
// doc's terms).
func (s *replicaSet) update(ctx context.Context, o node.Op, key string, op func(n node.Node) error) error {
	p := s.ring[0]
	if p.h.isDown() {
		return p.down.fail(o)
	}
	err := op(p.Node)
	if err != nil && classify(ctx, err) != unreachable {
		return err // it changed nothing
	}
	for _, m := range s.ring[1:] {
		berr := ErrNodeDown
		if !m.h.isDown() {
			_, berr = m.Node.Bury(ctx, []string{key}, s.tomb, node.TombDeleted)
		}
		if berr != nil {
			m.missed(ctx, berr, key)
			if err == nil {
				err = berr // a copy there may be read: not acknowledged
			}
		}
	}
	return err // the first's failure to answer: the update may have landed there
}

// rest reads keys from the members after from in read order (from's
// answered a miss, or failed: tried), and copies what it finds back to
// the members that answered a miss. It returns one item per key; err is
// a failure of every member tried, when nothing answered.
func (s *replicaSet) rest(ctx context.Context, keys []string, from *member, fromMissed bool) ([]node.Item, error) {
	start := time.Now()
	out := make([]node.Item, len(keys))
	for i, k := range keys {
		out[i].Key = k
	}
	left := make([]int, len(keys)) // positions in keys still missing
	for i := range left {
		left[i] = i
	}
	var missedOn []*member // members that answered a miss for every key of left, in turn
	if fromMissed {
		missedOn = append(missedOn, from)
	}
	var failure error
	answered := fromMissed
	past := false
	for _, m := range s.read {
		if !past {
			past = m == from
			continue
		}
		if len(left) == 0 {
			break
		}
		if m.h.isDown() {
			m.down.fail(node.OpGetMulti)
			continue
		}
		ks := make([]string, len(left))
		for j, i := range left {
			ks[j] = keys[i]
		}
		got, err := m.Node.GetMulti(ctx, ks, true)
		if err != nil {
			if failure == nil {
				failure = err
			}
			continue
		}
		answered = true
		var found []node.Item
		next := left[:0]
		for j, i := range left {
			if got[j].Found {
				out[i] = got[j]
				found = append(found, got[j])
			} else {
				next = append(next, i)
			}
		}
		left = next
		s.repair(ctx, start, found, missedOn)
		missedOn = append(missedOn, m)
	}
	if !answered {
		if failure == nil {
			failure = s.allDown(node.OpGetMulti)
		}
		return nil, failure
	}
	return out, nil
}

// repair copies found, read since start, to the members that answered a
// miss for them, as a backfill (AddMulti: never over a value or a
// tombstone), when their TTLs are known and the read was quick enough for
// a delete's tombstone to outlive the copy (replicaSet.tomb).
func (s *replicaSet) repair(ctx context.Context, start time.Time, found []node.Item, to []*member) {
	if len(found) == 0 || len(to) == 0 || time.Since(start) > s.repairWithin {
		return
	}
	copies := make([]node.Item, 0, len(found))
	for _, it := range found {
		if it.TTLKnown {
			copies = append(copies, node.Item{Key: it.Key, Value: it.Value, Flags: it.Flags, TTL: it.TTL})
		}
	}
	if len(copies) == 0 {
		return
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(s.tomb/2))
	defer cancel()
	for _, m := range to {
		if !m.h.isDown() {
			_, _ = m.Node.AddMulti(rctx, copies) // a copy lost is a miss there, nothing worse
		}
	}
}

// first returns the first member in read order not held down, nil when
// all are.
func (s *replicaSet) first() *member {
	for _, m := range s.read {
		if !m.h.isDown() {
			return m
		}
	}
	return nil
}

// allDown is the error of a read when every member is held down.
func (s *replicaSet) allDown(o node.Op) error { return s.read[0].down.fail(o) }

func (s *replicaSet) Get(ctx context.Context, key string) ([]byte, error) {
	m := s.first()
	if m == nil {
		return nil, s.allDown(node.OpGet)
	}
	v, err := m.Node.Get(ctx, key)
	if err == nil {
		return v, nil
	}
	got, rerr := s.rest(ctx, []string{key}, m, err == ErrCacheMiss)
	switch {
	case rerr != nil:
		return nil, rerr
	case !got[0].Found:
		return nil, ErrCacheMiss
	}
	return got[0].Value, nil
}

func (s *replicaSet) GetMulti(ctx context.Context, keys []string, withTTL bool) ([]node.Item, error) {
	m := s.first()
	if m == nil {
		return nil, s.allDown(node.OpGetMulti)
	}
	got, err := m.Node.GetMulti(ctx, keys, withTTL)
	if err != nil {
		return s.rest(ctx, keys, m, false)
	}
	s.fill(ctx, keys, m, func(i int) bool { return got[i].Found }, func(i int, it *node.Item) { got[i] = *it })
	return got, nil
}

// fill reads the keys that m answered a miss for (found(i) false) from the
// other members, calling put for each found.
func (s *replicaSet) fill(ctx context.Context, keys []string, m *member, found func(i int) bool, put func(i int, it *node.Item)) {
	var miss []string
	var at []int
	for i := range keys {
		if !found(i) {
			miss, at = append(miss, keys[i]), append(at, i)
		}
	}
	if len(miss) == 0 {
		return
	}
	more, err := s.rest(ctx, miss, m, true)
	if err != nil {
		return
	}
	for j := range more {
		if more[j].Found {
			put(at[j], &more[j])
		}
	}
}

// Send sends to the first member in read order; the keys it misses are
// read from the others once every node's answer is in (readRest).
func (s *replicaSet) Send(ctx context.Context, keys []string) node.Pending {
	m := s.first()
	if m == nil {
		return &failedPending{s.allDown(node.OpGetMulti)}
	}
	return &setPending{Pending: m.Node.Send(ctx, keys), m: m}
}

func (s *replicaSet) SendIdle(ctx context.Context, keys []string) (node.Pending, bool) {
	return s.trySend(ctx, keys, node.Sender.SendIdle)
}

func (s *replicaSet) TrySend(ctx context.Context, keys []string) (node.Pending, bool) {
	return s.trySend(ctx, keys, node.Sender.TrySend)
}

func (s *replicaSet) trySend(ctx context.Context, keys []string, send func(node.Sender, context.Context, []string) (node.Pending, bool)) (node.Pending, bool) {
	m := s.first()
	if m == nil {
		return &failedPending{s.allDown(node.OpGetMulti)}, true
	}
	sn, ok := m.Node.(node.Sender)
	if !ok {
		return &setPending{Pending: m.Node.Send(ctx, keys), m: m}, true
	}
	p, ok := send(sn, ctx, keys)
	if !ok {
		return nil, false
	}
	return &setPending{Pending: p, m: m}, true
}

// setPending is a replica set's multi-get: sent to its first member m,
// whose misses and failure readRest takes to the others.
type setPending struct {
	node.Pending
	m      *member
	failed bool // Recv failed: every key is to be read from the others
}

func (p *setPending) Recv(out []node.Answer) error {
	if err := p.Pending.Recv(out); err != nil {
		p.failed = true
		clear(out)
	}
	return nil
}

// readRest reads from the other members the keys b's first member missed
// or failed: batches.gets calls it once every answer is in, holding no
// connection.
func (s *replicaSet) readRest(ctx context.Context, b *batch, p *setPending) {
	if p.failed {
		got, err := s.rest(ctx, b.keys, p.m, false)
		if err != nil {
			b.err, b.ans = err, nil
			return
		}
		for i := range got {
			b.ans[i] = node.Answer{Value: got[i].Value, Found: got[i].Found, Flags: got[i].Flags, CAS: got[i].CAS}
		}
		return
	}
	s.fill(ctx, b.keys, p.m, func(i int) bool { return b.ans[i].Found }, func(i int, it *node.Item) {
		b.ans[i] = node.Answer{Value: it.Value, Found: true, Flags: it.Flags, CAS: it.CAS}
	})
}

func (s *replicaSet) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return s.write(ctx, node.OpSet, []string{key}, nil, func(n node.Node) error { return n.Set(ctx, key, value, ttl) })
}

func (s *replicaSet) SetMulti(ctx context.Context, items []node.Item) error {
	return s.write(ctx, node.OpSetMulti, itemKeys(items), nil, func(n node.Node) error { return n.SetMulti(ctx, items) })
}

// Add finds the key absent on every member that answers (a read, as Get),
// then is decided by the first member in ring order that answers, and
// written to the others.
func (s *replicaSet) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return s.add(ctx, node.OpAdd, key, func(n node.Node) error { return n.Add(ctx, key, value, ttl) },
		func(n node.Node) error { return n.Set(ctx, key, value, ttl) })
}

// add reads key from the members (a value on any is ErrNotStored: a member
// may have lost its copy); then runs add on the members in ring order
// until one answers; once one stores, set runs on the members after it
// (those before failed: hinted).
func (s *replicaSet) add(ctx context.Context, o node.Op, key string, add, set func(n node.Node) error) error {
	switch _, err := s.Get(ctx, key); {
	case err == nil:
		return ErrNotStored
	case err != ErrCacheMiss:
		return err
	}
	var failure error
	for i, m := range s.ring {
		if m.h.isDown() {
			continue
		}
		err := add(m.Node)
		if err == ErrNotStored {
			return err
		}
		if err != nil && classify(ctx, err) == unreachable {
			m.missed(ctx, err, key)
			failure = err
			continue
		}
		if err != nil {
			return err
		}
		var miss error
		for _, other := range s.ring[:i] { // failed or down: their copy is gone at their return
			if other.h.isDown() {
				other.missed(ctx, ErrNodeDown, key)
				if miss == nil {
					miss = ErrNodeDown
				}
			}
		}
		if rest := (&replicaSet{ring: s.ring[i+1:], tomb: s.tomb}); len(rest.ring) > 0 {
			if err := rest.write(ctx, o, []string{key}, nil, set); err != nil {
				miss = err
			}
		}
		return miss // stored, on every replica unless miss says otherwise
	}
	if failure == nil {
		return s.allDown(o)
	}
	return failure
}

// AddMulti copies each item to every member that lacks it: a backfill or
// a sweep's copy to a set. stored[i] says some member stored it.
func (s *replicaSet) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	storeds := make([][]bool, len(s.ring))
	errs := s.each(node.OpAddMulti, func(i int, m *member) (err error) {
		storeds[i], err = m.Node.AddMulti(ctx, items)
		return err
	})
	return orAll(len(items), storeds, errs)
}

// orAll merges per-member reports: out[i] if some member says so, and the
// first member's error when none answered.
func orAll(n int, per [][]bool, errs []error) ([]bool, error) {
	out := make([]bool, n)
	answered := false
	for i, err := range errs {
		if err == nil {
			answered = true
		}
		for j, v := range per[i] {
			if j < n {
				out[j] = out[j] || v
			}
		}
	}
	if !answered {
		return out, errs[0]
	}
	return out, nil
}

func (s *replicaSet) Delete(ctx context.Context, key string) error {
	_, err := s.buryAll(ctx, []string{key}, 0, node.TombDeleted)
	return err
}

func (s *replicaSet) DeleteMulti(ctx context.Context, keys []string) error {
	_, err := s.buryAll(ctx, keys, 0, node.TombDeleted)
	return err
}

func (s *replicaSet) Bury(ctx context.Context, keys []string, ttl time.Duration, kind node.TombKind) ([]bool, error) {
	return s.buryAll(ctx, keys, ttl, kind)
}

func (s *replicaSet) Incr(ctx context.Context, key string, delta int64) (v int64, err error) {
	err = s.update(ctx, node.OpIncr, key, func(n node.Node) (err error) {
		v, err = n.Incr(ctx, key, delta)
		return err
	})
	return v, err
}

// Touch reaches every member; a member's miss is an answer.
func (s *replicaSet) Touch(ctx context.Context, key string, ttl time.Duration) error {
	errs := s.each(node.OpTouch, func(_ int, m *member) error { return m.Node.Touch(ctx, key, ttl) })
	touched, missed := false, false
	var miss error
	for i, err := range errs {
		switch err {
		case nil:
			touched = true
		case ErrCacheMiss:
			missed = true
		default:
			s.ring[i].missed(ctx, err, key)
			if miss == nil {
				miss = err
			}
		}
	}
	switch {
	case touched && miss != nil:
		return miss // touched on some replicas, not all
	case touched:
		return nil
	case missed:
		return ErrCacheMiss
	}
	return errs[0]
}

// Ping answers when a member does: members are probed one by one anyway.
func (s *replicaSet) Ping(ctx context.Context) error {
	if m := s.first(); m != nil {
		return m.Node.Ping(ctx)
	}
	return ErrNodeDown
}

// Close closes nothing: the members are the pool's.
func (s *replicaSet) Close() error { return nil }

// GetItem reads from the members in ring order, without repair (its TTL
// is unknown): the first member's CAS id is the one a StoreCAS, run there,
// compares.
func (s *replicaSet) GetItem(ctx context.Context, key string) (node.Item, error) {
	var failure error
	answered := false
	for _, m := range s.ring {
		if m.h.isDown() {
			continue
		}
		it, err := items(m.Node).GetItem(ctx, key)
		switch {
		case err == nil:
			return it, nil
		case err == ErrCacheMiss:
			answered = true
		case failure == nil:
			failure = err
		}
	}
	if answered || failure == nil && s.first() != nil {
		return node.Item{}, ErrCacheMiss
	}
	if failure == nil {
		failure = s.allDown(node.OpGet)
	}
	return node.Item{}, failure
}

func (s *replicaSet) Store(ctx context.Context, op node.StoreOp, it node.Item) error {
	store := func(op node.StoreOp) func(n node.Node) error {
		return func(n node.Node) error { return items(n).Store(ctx, op, it) }
	}
	switch op {
	case node.StoreSet:
		return s.write(ctx, node.OpSet, []string{it.Key}, nil, store(node.StoreSet))
	case node.StoreAdd:
		return s.add(ctx, node.OpAdd, it.Key, store(node.StoreAdd), store(node.StoreSet))
	}
	return s.update(ctx, node.OpSet, it.Key, store(op))
}

// GetAndTouch reads and touches the first member, whose CAS id it
// returns, and touches the others.
func (s *replicaSet) GetAndTouch(ctx context.Context, key string, ttl time.Duration) (node.Item, error) {
	p := s.ring[0]
	if p.h.isDown() {
		return node.Item{}, p.down.fail(node.OpTouch)
	}
	it, err := items(p.Node).GetAndTouch(ctx, key, ttl)
	if err != nil {
		return it, err
	}
	rest := &replicaSet{ring: s.ring[1:], read: s.ring[1:], tomb: s.tomb}
	_ = rest.Touch(ctx, key, ttl) // each member that missed it is hinted
	return it, nil
}

func (s *replicaSet) IncrDecr(ctx context.Context, key string, delta uint64, decr bool) (v uint64, err error) {
	err = s.update(ctx, node.OpIncr, key, func(n node.Node) (err error) {
		v, err = items(n).IncrDecr(ctx, key, delta, decr)
		return err
	})
	return v, err
}

func (s *replicaSet) DeleteFound(ctx context.Context, key string) (bool, error) {
	found, err := s.buryAll(ctx, []string{key}, 0, node.TombDeleted)
	return len(found) == 1 && found[0], err
}

func (s *replicaSet) Flush(ctx context.Context) error {
	return s.write(ctx, node.OpDeleteMulti, nil, nil, func(n node.Node) error { return items(n).Flush(ctx) })
}

// Scan is not a set's: a sweep lists the physical nodes.
func (s *replicaSet) Scan(context.Context, string, int, func([]node.Item) error) error {
	return fmt.Errorf("%w: listing a replica set", ErrUnsupported)
}

// Dump reads each key from the members in read order.
func (s *replicaSet) Dump(ctx context.Context, keys []node.Item) ([]node.Item, error) {
	out := make([]node.Item, len(keys))
	left := make([]int, len(keys))
	for i := range left {
		left[i] = i
	}
	var failure error
	answered := false
	for _, m := range s.read {
		sw := sweeper(m.Node)
		if m.h.isDown() || sw == nil || len(left) == 0 {
			continue
		}
		ask := make([]node.Item, len(left))
		for j, i := range left {
			ask[j] = keys[i]
		}
		got, err := sw.Dump(ctx, ask)
		if err != nil {
			failure = err
			continue
		}
		answered = true
		next := left[:0]
		for j, i := range left {
			if j < len(got) && got[j].Found {
				out[i] = got[j]
			} else {
				out[i] = keys[i]
				out[i].Found = false
				next = append(next, i)
			}
		}
		left = next
	}
	if !answered {
		if failure == nil {
			failure = s.allDown(node.OpGetMulti)
		}
		return nil, failure
	}
	return out, nil
}

// Restore copies to every member that lacks the key.
func (s *replicaSet) Restore(ctx context.Context, dumped []node.Item) ([]bool, error) {
	storeds := make([][]bool, len(s.ring))
	errs := s.each(node.OpAddMulti, func(i int, m *member) (err error) {
		sw := sweeper(m.Node)
		if sw == nil {
			return ErrSweepUnsupported
		}
		storeds[i], err = sw.Restore(ctx, dumped)
		return err
	})
	return orAll(len(dumped), storeds, errs)
}

// Exists reports the keys some member holds.
func (s *replicaSet) Exists(ctx context.Context, keys []string) ([]bool, error) {
	per := make([][]bool, len(s.ring))
	errs := s.each(node.OpGetMulti, func(i int, m *member) (err error) {
		sw := sweeper(m.Node)
		if sw == nil {
			return ErrSweepUnsupported
		}
		per[i], err = sw.Exists(ctx, keys)
		return err
	})
	return orAll(len(keys), per, errs)
}

// Size is the first member's.
func (s *replicaSet) Size(ctx context.Context) (int64, error) {
	if m := s.first(); m != nil {
		if sw := sweeper(m.Node); sw != nil {
			return sw.Size(ctx)
		}
	}
	return 0, ErrSweepUnsupported
}
