// Package replica is a replica set as one node: a key kept on several
// nodes (the client's Options.Replicas) is read, written and deleted
// through a Set, a node.Node over its members' clients, so that routing,
// migrations and sweeps handle sets as they handle nodes. The policy of
// each call is in the client's package doc ("Replicas") and in
// docs/failures.md:
//
//   - A write (Set, SetMulti, Touch) goes to every member at once, one
//     held down skipped, and succeeds only when every member took it: a
//     write another process may not see on the member it reads first is
//     not acknowledged. It still lands on the members that answer, so
//     reads find it there. Add reads the key first (a value on any member
//     is node.ErrNotStored), then is decided by the first member in ring
//     order that answers, and written to the others. A copy (a backfill,
//     a repair, a sweep's) goes to every member that lacks the key, each
//     on its own.
//   - A delete buries the key on every member (a tombstone of Config.Tomb,
//     node.Bury), and fails if a member missed it: a surviving copy would
//     come back. The tombstone refuses a read's repair that read the value
//     before the delete.
//   - Incr, and the Items updates that depend on the present value (CAS,
//     replace, append, prepend, incr/decr), run on the first member in ring
//     order alone, which must be up (a counter elsewhere would restart),
//     and bury the key on the others, which read it from the first member
//     again; GetItem and GetAndTouch read the first member (its CAS id).
//   - A read goes to the members in read order, skipping those held down,
//     to the next on a miss or a failure; a value found past members that
//     answered a miss is copied back to them as a backfill is (never over
//     a value or a tombstone), when its TTL is known and the read took
//     less than Config.RepairWithin. A read fails only when every member
//     failed; when some failed and the others answered a miss, it is a
//     miss.
//
// A member that misses a write is told (Member.Missed): the client holds
// it down and deletes the key there before it serves again.
//
// A Placement places each key on its set over a ring.LocatorN, hands the
// set out as a node (ring.Locator), and makes each set's client on first
// use.
package replica

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
)

// Member is one node of a set as the client holds it.
type Member interface {
	// Conn is the member's node client.
	Conn() node.Node
	// RingNode is the member's node, as placements list it.
	RingNode() ring.Node
	// Down reports whether the member is held down: a set skips it.
	Down() bool
	// Fail returns the failure, counted, of a call of kind op to the member
	// held down (node.ErrNodeDown).
	Fail(op node.Op) error
	// Missed tells the member it missed a write of keys, with err (the
	// member's failure, or node.ErrNodeDown when it was held down).
	Missed(ctx context.Context, err error, keys ...string)
}

// Config is what a Set needs of its client's policy.
type Config struct {
	// Tomb is the life of a delete's tombstone, longer than RepairWithin
	// plus a copy's round trip.
	Tomb time.Duration
	// RepairWithin is how long after a read began its repair may still be
	// sent.
	RepairWithin time.Duration
	// Unreachable reports whether err, from a call made under ctx, says
	// the member did not answer (a connection-level failure).
	Unreachable func(ctx context.Context, err error) bool
}

// New returns the set of members, in ring order, read in the order of
// read (the same members, the caller's zone first).
func New(ring, read []Member, cfg Config) *Set {
	return &Set{ring: ring, read: read, cfg: cfg}
}

// failedPending is a multi-get that failed before it was sent.
type failedPending struct{ err error }

func (p *failedPending) Recv([]node.Answer) error { return p.err }

// Set is a replica set's client: its members' clients, in ring order and
// in read order. It is a node.Node, with the Items, Sweeper and Sender
// capabilities.
type Set struct {
	ring []Member // ring order: ring[0] decides Add and runs Incr
	read []Member // the caller's zone first, then ring order
	cfg  Config
}

var (
	_ node.Node    = (*Set)(nil)
	_ node.Items   = (*Set)(nil)
	_ node.Sweeper = (*Set)(nil)
	_ node.Sender  = (*Set)(nil)
)

// each runs op on every member at once, a member held down skipped (its
// error node.ErrNodeDown), and returns the errors in ring order.
func (s *Set) each(o node.Op, op func(i int, m Member) error) []error {
	errs := make([]error, len(s.ring))
	var wg sync.WaitGroup
	last := -1 // run on this goroutine
	for i, m := range s.ring {
		if m.Down() {
			errs[i] = m.Fail(o)
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

// write runs a write of keys on every member and succeeds only when every
// member took it: otherwise it returns the first missed member's error
// (node.ErrNodeDown for one held down), or the first member's when it
// reached none. Every member that missed a write that reached another, or
// that may have taken it unanswered, is told (Missed). ok says which
// errors are answers (a Touch's miss).
func (s *Set) write(ctx context.Context, o node.Op, keys []string, ok func(error) bool, op func(n node.Node) error) error {
	errs := s.each(o, func(_ int, m Member) error { return op(m.Conn()) })
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
		if err != nil && !(ok != nil && ok(err)) && (reached || err == node.ErrNodeDown || s.cfg.Unreachable(ctx, err)) {
			s.ring[i].Missed(ctx, err, keys...)
			if s.ring[i].Down() {
				err = node.ErrNodeDown // held down now: what FailOpen forgives
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
func (s *Set) buryAll(ctx context.Context, keys []string, ttl time.Duration, kind node.TombKind) ([]bool, error) {
	founds := make([][]bool, len(s.ring))
	errs := s.each(node.OpDeleteMulti, func(i int, m Member) (err error) {
		founds[i], err = m.Conn().Bury(ctx, keys, max(ttl, s.cfg.Tomb), kind)
		return err
	})
	found := make([]bool, len(keys))
	var failed error
	for i, err := range errs {
		if err != nil {
			s.ring[i].Missed(ctx, err, keys...)
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
func (s *Set) decider() Member {
	for _, m := range s.ring {
		if !m.Down() {
			return m
		}
	}
	return nil
}

// update runs op, which depends on the key's present value, on the first
// member alone, then buries key on the others (update, in the package
// doc's terms).
func (s *Set) update(ctx context.Context, o node.Op, key string, op func(n node.Node) error) error {
	p := s.ring[0]
	if p.Down() {
		return p.Fail(o)
	}
	err := op(p.Conn())
	if err != nil && !s.cfg.Unreachable(ctx, err) {
		return err // it changed nothing
	}
	for _, m := range s.ring[1:] {
		berr := node.ErrNodeDown
		if !m.Down() {
			_, berr = m.Conn().Bury(ctx, []string{key}, s.cfg.Tomb, node.TombDeleted)
		}
		if berr != nil {
			m.Missed(ctx, berr, key)
			if err == nil {
				err = berr // a copy there may be read: not acknowledged
			}
		}
	}
	return err // the first's failure to answer: the update may have landed there
}

// Rest reads keys from the members after from in read order (from's
// answered a miss, or failed: tried), and copies what it finds back to
// the members that answered a miss. It returns one item per key; err is
// a failure of every member tried, when nothing answered.
func (s *Set) Rest(ctx context.Context, keys []string, from Member, fromMissed bool) ([]node.Item, error) {
	start := time.Now()
	out := make([]node.Item, len(keys))
	for i, k := range keys {
		out[i].Key = k
	}
	left := make([]int, len(keys)) // positions in keys still missing
	for i := range left {
		left[i] = i
	}
	var missedOn []Member // members that answered a miss for every key of left, in turn
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
		if m.Down() {
			m.Fail(node.OpGetMulti)
			continue
		}
		ks := make([]string, len(left))
		for j, i := range left {
			ks[j] = keys[i]
		}
		got, err := m.Conn().GetMulti(ctx, ks, true)
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
// a delete's tombstone to outlive the copy (Set.tomb).
func (s *Set) repair(ctx context.Context, start time.Time, found []node.Item, to []Member) {
	if len(found) == 0 || len(to) == 0 || time.Since(start) > s.cfg.RepairWithin {
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
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(s.cfg.Tomb/2))
	defer cancel()
	for _, m := range to {
		if !m.Down() {
			_, _ = m.Conn().AddMulti(rctx, copies) // a copy lost is a miss there, nothing worse
		}
	}
}

// First returns the first member in read order not held down, nil when
// all are.
func (s *Set) First() Member {
	for _, m := range s.read {
		if !m.Down() {
			return m
		}
	}
	return nil
}

// allDown is the error of a read when every member is held down.
func (s *Set) allDown(o node.Op) error { return s.read[0].Fail(o) }

// Get reads key from the members in read order (see the package doc).
func (s *Set) Get(ctx context.Context, key string) ([]byte, error) {
	m := s.First()
	if m == nil {
		return nil, s.allDown(node.OpGet)
	}
	v, err := m.Conn().Get(ctx, key)
	if err == nil {
		return v, nil
	}
	got, rerr := s.Rest(ctx, []string{key}, m, err == node.ErrCacheMiss)
	switch {
	case rerr != nil:
		return nil, rerr
	case !got[0].Found:
		return nil, node.ErrCacheMiss
	}
	return got[0].Value, nil
}

// GetMulti reads keys from the first member up in read order, then the
// keys it missed from the others.
func (s *Set) GetMulti(ctx context.Context, keys []string, withTTL bool) ([]node.Item, error) {
	m := s.First()
	if m == nil {
		return nil, s.allDown(node.OpGetMulti)
	}
	got, err := m.Conn().GetMulti(ctx, keys, withTTL)
	if err != nil {
		return s.Rest(ctx, keys, m, false)
	}
	s.fill(ctx, keys, m, func(i int) bool { return got[i].Found }, func(i int, it *node.Item) { got[i] = *it })
	return got, nil
}

// fill reads the keys that m answered a miss for (found(i) false) from the
// other members, calling put for each found.
func (s *Set) fill(ctx context.Context, keys []string, m Member, found func(i int) bool, put func(i int, it *node.Item)) {
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
	more, err := s.Rest(ctx, miss, m, true)
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
func (s *Set) Send(ctx context.Context, keys []string) node.Pending {
	m := s.First()
	if m == nil {
		return &failedPending{s.allDown(node.OpGetMulti)}
	}
	return &Pending{Pending: m.Conn().Send(ctx, keys), m: m}
}

// SendIdle is Send on an idle connection of the first member up.
func (s *Set) SendIdle(ctx context.Context, keys []string) (node.Pending, bool) {
	return s.trySend(ctx, keys, node.Sender.SendIdle)
}

// TrySend is Send on the first member up, which may dial.
func (s *Set) TrySend(ctx context.Context, keys []string) (node.Pending, bool) {
	return s.trySend(ctx, keys, node.Sender.TrySend)
}

func (s *Set) trySend(ctx context.Context, keys []string, send func(node.Sender, context.Context, []string) (node.Pending, bool)) (node.Pending, bool) {
	m := s.First()
	if m == nil {
		return &failedPending{s.allDown(node.OpGetMulti)}, true
	}
	sn, ok := m.Conn().(node.Sender)
	if !ok {
		return &Pending{Pending: m.Conn().Send(ctx, keys), m: m}, true
	}
	p, ok := send(sn, ctx, keys)
	if !ok {
		return nil, false
	}
	return &Pending{Pending: p, m: m}, true
}

// Pending is a replica set's multi-get: sent to its first member m,
// whose misses and failure readRest takes to the others.
type Pending struct {
	node.Pending
	m      Member
	failed bool // Recv failed: every key is to be read from the others
}

// Recv reads the first member's answer; a failure is kept for ReadRest,
// which asks the others, and out left empty.
func (p *Pending) Recv(out []node.Answer) error {
	if err := p.Pending.Recv(out); err != nil {
		p.failed = true
		clear(out)
	}
	return nil
}

// ReadRest reads from the other members the keys of p, the multi-get of
// keys whose answer ans holds, that its first member missed or failed: a
// client that sends to several nodes calls it once every answer is in,
// holding no connection. An error is a failure of every member tried.
func (s *Set) ReadRest(ctx context.Context, keys []string, ans []node.Answer, p *Pending) error {
	if p.failed {
		got, err := s.Rest(ctx, keys, p.m, false)
		if err != nil {
			return err
		}
		for i := range got {
			ans[i] = node.Answer{Value: got[i].Value, Found: got[i].Found, Flags: got[i].Flags, CAS: got[i].CAS}
		}
		return nil
	}
	s.fill(ctx, keys, p.m, func(i int) bool { return ans[i].Found }, func(i int, it *node.Item) {
		ans[i] = node.Answer{Value: it.Value, Found: true, Flags: it.Flags, CAS: it.CAS}
	})
	return nil
}

// Set writes key on every member.
func (s *Set) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return s.write(ctx, node.OpSet, []string{key}, nil, func(n node.Node) error { return n.Set(ctx, key, value, ttl) })
}

// SetMulti writes the items on every member.
func (s *Set) SetMulti(ctx context.Context, items []node.Item) error {
	return s.write(ctx, node.OpSetMulti, node.ItemKeys(items), nil, func(n node.Node) error { return n.SetMulti(ctx, items) })
}

// Add finds the key absent on every member that answers (a read, as Get),
// then is decided by the first member in ring order that answers, and
// written to the others.
func (s *Set) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return s.add(ctx, node.OpAdd, key, func(n node.Node) error { return n.Add(ctx, key, value, ttl) },
		func(n node.Node) error { return n.Set(ctx, key, value, ttl) })
}

// add reads key from the members (a value on any is node.ErrNotStored: a member
// may have lost its copy); then runs add on the members in ring order
// until one answers; once one stores, set runs on the members after it
// (those before failed: hinted).
func (s *Set) add(ctx context.Context, o node.Op, key string, add, set func(n node.Node) error) error {
	switch _, err := s.Get(ctx, key); {
	case err == nil:
		return node.ErrNotStored
	case err != node.ErrCacheMiss:
		return err
	}
	var failure error
	for i, m := range s.ring {
		if m.Down() {
			continue
		}
		err := add(m.Conn())
		if err == node.ErrNotStored {
			return err
		}
		if err != nil && s.cfg.Unreachable(ctx, err) {
			m.Missed(ctx, err, key)
			failure = err
			continue
		}
		if err != nil {
			return err
		}
		var miss error
		for _, other := range s.ring[:i] { // failed or down: their copy is gone at their return
			if other.Down() {
				other.Missed(ctx, node.ErrNodeDown, key)
				if miss == nil {
					miss = node.ErrNodeDown
				}
			}
		}
		if rest := (&Set{ring: s.ring[i+1:], cfg: s.cfg}); len(rest.ring) > 0 {
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
func (s *Set) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	storeds := make([][]bool, len(s.ring))
	errs := s.each(node.OpAddMulti, func(i int, m Member) (err error) {
		storeds[i], err = m.Conn().AddMulti(ctx, items)
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

// Delete buries key on every member.
func (s *Set) Delete(ctx context.Context, key string) error {
	_, err := s.buryAll(ctx, []string{key}, 0, node.TombDeleted)
	return err
}

// DeleteMulti buries keys on every member.
func (s *Set) DeleteMulti(ctx context.Context, keys []string) error {
	_, err := s.buryAll(ctx, keys, 0, node.TombDeleted)
	return err
}

// Bury buries keys on every member, for ttl or Config.Tomb if longer.
func (s *Set) Bury(ctx context.Context, keys []string, ttl time.Duration, kind node.TombKind) ([]bool, error) {
	return s.buryAll(ctx, keys, ttl, kind)
}

// Incr runs on the first member in ring order and buries key on the
// others.
func (s *Set) Incr(ctx context.Context, key string, delta int64) (v int64, err error) {
	err = s.update(ctx, node.OpIncr, key, func(n node.Node) (err error) {
		v, err = n.Incr(ctx, key, delta)
		return err
	})
	return v, err
}

// Touch reaches every member; a member's miss is an answer.
func (s *Set) Touch(ctx context.Context, key string, ttl time.Duration) error {
	errs := s.each(node.OpTouch, func(_ int, m Member) error { return m.Conn().Touch(ctx, key, ttl) })
	touched, missed := false, false
	var miss error
	for i, err := range errs {
		switch err {
		case nil:
			touched = true
		case node.ErrCacheMiss:
			missed = true
		default:
			s.ring[i].Missed(ctx, err, key)
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
		return node.ErrCacheMiss
	}
	return errs[0]
}

// Ping answers when a member does: members are probed one by one anyway.
func (s *Set) Ping(ctx context.Context) error {
	if m := s.First(); m != nil {
		return m.Conn().Ping(ctx)
	}
	return node.ErrNodeDown
}

// Close closes nothing: the members are the pool's.
func (s *Set) Close() error { return nil }

// Refuse returns node.ErrUnsupported: a command beyond the node interface
// cannot be told which member must take it.
func (s *Set) Refuse() error {
	return fmt.Errorf("%w: a Redis command on a replica set (Options.Replicas)", node.ErrUnsupported)
}

// GetItem reads from the members in ring order, without repair (its TTL
// is unknown): the first member's CAS id is the one a StoreCAS, run there,
// compares.
func (s *Set) GetItem(ctx context.Context, key string) (node.Item, error) {
	var failure error
	answered := false
	for _, m := range s.ring {
		if m.Down() {
			continue
		}
		it, err := node.ItemsOf(m.Conn()).GetItem(ctx, key)
		switch {
		case err == nil:
			return it, nil
		case err == node.ErrCacheMiss:
			answered = true
		case failure == nil:
			failure = err
		}
	}
	if answered || failure == nil && s.First() != nil {
		return node.Item{}, node.ErrCacheMiss
	}
	if failure == nil {
		failure = s.allDown(node.OpGet)
	}
	return node.Item{}, failure
}

// Store writes on every member for set, decides on the first member for
// add (as Add), and runs the others (replace, append, prepend, cas) on the
// first member alone, burying the key on the others.
func (s *Set) Store(ctx context.Context, op node.StoreOp, it node.Item) error {
	store := func(op node.StoreOp) func(n node.Node) error {
		return func(n node.Node) error { return node.ItemsOf(n).Store(ctx, op, it) }
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
func (s *Set) GetAndTouch(ctx context.Context, key string, ttl time.Duration) (node.Item, error) {
	p := s.ring[0]
	if p.Down() {
		return node.Item{}, p.Fail(node.OpTouch)
	}
	it, err := node.ItemsOf(p.Conn()).GetAndTouch(ctx, key, ttl)
	if err != nil {
		return it, err
	}
	rest := &Set{ring: s.ring[1:], read: s.ring[1:], cfg: s.cfg}
	_ = rest.Touch(ctx, key, ttl) // each member that missed it is hinted
	return it, nil
}

// IncrDecr runs on the first member in ring order and buries key on the
// others.
func (s *Set) IncrDecr(ctx context.Context, key string, delta uint64, decr bool) (v uint64, err error) {
	err = s.update(ctx, node.OpIncr, key, func(n node.Node) (err error) {
		v, err = node.ItemsOf(n).IncrDecr(ctx, key, delta, decr)
		return err
	})
	return v, err
}

// DeleteFound buries key on every member and reports whether one held it.
func (s *Set) DeleteFound(ctx context.Context, key string) (bool, error) {
	found, err := s.buryAll(ctx, []string{key}, 0, node.TombDeleted)
	return len(found) == 1 && found[0], err
}

// Flush flushes every member.
func (s *Set) Flush(ctx context.Context) error {
	return s.write(ctx, node.OpDeleteMulti, nil, nil, func(n node.Node) error { return node.ItemsOf(n).Flush(ctx) })
}

// Scan is not a set's: a sweep lists the physical nodes.
func (s *Set) Scan(context.Context, node.ScanOptions, func([]node.Item) error) error {
	return fmt.Errorf("%w: listing a replica set", node.ErrUnsupported)
}

// Dump reads each key from the members in read order.
func (s *Set) Dump(ctx context.Context, keys []node.Item) ([]node.Item, error) {
	out := make([]node.Item, len(keys))
	left := make([]int, len(keys))
	for i := range left {
		left[i] = i
	}
	var failure error
	answered := false
	for _, m := range s.read {
		sw := node.SweeperOf(m.Conn())
		if m.Down() || sw == nil || len(left) == 0 {
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
func (s *Set) Restore(ctx context.Context, dumped []node.Item) ([]bool, error) {
	storeds := make([][]bool, len(s.ring))
	errs := s.each(node.OpAddMulti, func(i int, m Member) (err error) {
		sw := node.SweeperOf(m.Conn())
		if sw == nil {
			return node.ErrSweepUnsupported
		}
		storeds[i], err = sw.Restore(ctx, dumped)
		return err
	})
	return orAll(len(dumped), storeds, errs)
}

// Exists reports the keys some member holds.
func (s *Set) Exists(ctx context.Context, keys []string) ([]bool, error) {
	per := make([][]bool, len(s.ring))
	errs := s.each(node.OpGetMulti, func(i int, m Member) (err error) {
		sw := node.SweeperOf(m.Conn())
		if sw == nil {
			return node.ErrSweepUnsupported
		}
		per[i], err = sw.Exists(ctx, keys)
		return err
	})
	return orAll(len(keys), per, errs)
}

// Size is the first member's.
func (s *Set) Size(ctx context.Context) (int64, error) {
	if m := s.First(); m != nil {
		if sw := node.SweeperOf(m.Conn()); sw != nil {
			return sw.Size(ctx)
		}
	}
	return 0, node.ErrSweepUnsupported
}
