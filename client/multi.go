package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/replica"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// item is a key with its value and metadata, going to or coming from a
// node.
type item = node.Item

// batch is the part of a multi-key operation that goes to one node: one
// round trip, run in parallel with the other nodes' batches.
type batch struct {
	node  ring.Node
	conn  node.Node
	keys  []string // the batch's keys, in order
	items []item   // for writes: keys[i]'s item; reads have keys alone
	old   []bool   // for writes during a migration: items[i] is a copy to an old owner
	idx   []int    // idx[i] is the position of keys[i] in the caller's keys
	err   error    // the round trip's

	// A read round's answer (batches.gets): got, one item per key, or ans,
	// one answer per key of a multi-get sent and received (pend);
	// batch.answer reads either.
	got  []item
	ans  []node.Answer
	pend node.Pending
	// set is the multi-get of a replica set (replicas.go), whose misses
	// are read from its other members once every answer is in.
	set *replica.Pending
	// sets, for a read batch of a replica set's first member (from),
	// holds each key's set: its misses are read from the set's other
	// members once every answer is in (readReplicas).
	sets []*replica.Set
	from *member
}

// answer returns the read round's answer for b.keys[i]: b.got[i], or the
// answer made into scratch, which the next call reuses.
func (b *batch) answer(i int, scratch *item) *item {
	if b.ans != nil {
		*scratch = node.AnswerItem(b.keys[i], &b.ans[i])
		return scratch
	}
	return &b.got[i]
}

// answered is how many keys b's read round answered: all or none.
func (b *batch) answered() int { return max(len(b.got), len(b.ans)) }

// split divides a write batch by in(key): parts[1] holds the items whose
// key is in, parts[0] the others, each nil when empty; b itself when all
// agree.
func (b *batch) split(in func(string) bool) (parts [2]*batch) {
	n := 0
	for _, k := range b.keys {
		if in(k) {
			n++
		}
	}
	switch n {
	case 0:
		return [2]*batch{b, nil}
	case len(b.keys):
		return [2]*batch{nil, b}
	}
	for j, k := range b.keys {
		p := 0
		if in(k) {
			p = 1
		}
		if parts[p] == nil {
			parts[p] = &batch{node: b.node, conn: b.conn}
		}
		parts[p].keys = append(parts[p].keys, k)
		parts[p].items = append(parts[p].items, b.items[j])
		parts[p].idx = append(parts[p].idx, b.idx[j])
	}
	return parts
}

// batches groups items by node.
type batches struct {
	st     *state
	list   []*batch
	byAddr map[string]int // positions in list by address, once it is long
}

func newBatches(st *state) *batches {
	return &batches{st: st}
}

// add puts a write of item it into the batch of node n; old marks a
// migration's copy to an old owner.
func (bs *batches) add(n ring.Node, it item, idx int, old bool) {
	b := bs.get(n)
	b.items = append(b.items, it)
	b.keys = append(b.keys, it.Key)
	b.idx = append(b.idx, idx)
	if old || b.old != nil {
		if b.old == nil {
			b.old = make([]bool, len(b.items)-1, cap(b.items))
		}
		b.old = append(b.old, old)
	}
}

// addKey puts a read of key into the batch of node n.
func (bs *batches) addKey(n ring.Node, key string, idx int) {
	b := bs.get(n)
	b.keys = append(b.keys, key)
	b.idx = append(b.idx, idx)
}

// linearBatches is the most batches get finds by a scan of the list, whose
// addresses are the placements' own strings (equal pointers compare at
// once); beyond it, by a map.
const linearBatches = 8

// get returns the batch of node n, made on first use.
func (bs *batches) get(n ring.Node) *batch { return bs.list[bs.index(n)] }

// index returns the position in bs.list of node n's batch, made on first
// use.
func (bs *batches) index(n ring.Node) int {
	if bs.byAddr != nil {
		if i, ok := bs.byAddr[n.Addr]; ok {
			return i
		}
	} else {
		for i, b := range bs.list {
			if b.node.Addr == n.Addr {
				return i
			}
		}
	}
	bs.list = append(bs.list, &batch{node: n, conn: bs.st.conn(n)})
	switch {
	case bs.byAddr != nil:
		bs.byAddr[n.Addr] = len(bs.list) - 1
	case len(bs.list) > linearBatches:
		bs.byAddr = make(map[string]int, 2*len(bs.list))
		for i, b := range bs.list {
			bs.byAddr[b.node.Addr] = i
		}
	}
	return len(bs.list) - 1
}

// readBatches groups keys for a read round, key i going to node owner(i),
// in two passes so that the batches' keys and positions are cut from one
// allocation each, of the exact size.
func readBatches(st *state, keys []string, owner func(i int) ring.Node) *batches {
	bs := newBatches(st)
	which := make([]int32, len(keys)) // key i's batch, by index in bs.list
	count := make([]int, 0, len(st.own))
	var sets []*replica.Set // with replicas: key i's set, its batch its first member's
	for i := range keys {
		n := owner(i)
		if s, ok := st.conn(n).(*replica.Set); ok {
			if m, _ := s.First().(*member); m != nil {
				if sets == nil {
					sets = make([]*replica.Set, len(keys))
				}
				n, sets[i] = m.rn, s
			}
		}
		j := bs.index(n)
		if j == len(count) {
			count = append(count, 0)
		}
		which[i] = int32(j)
		count[j]++
	}
	ks, idx := make([]string, len(keys)), make([]int, len(keys))
	off := 0
	for j, b := range bs.list {
		b.keys, b.idx = ks[off:off:off+count[j]], idx[off:off:off+count[j]]
		off += count[j]
	}
	for i, k := range keys {
		b := bs.list[which[i]]
		b.keys, b.idx = append(b.keys, k), append(b.idx, i)
		if sets != nil { // b.sets[j] is b.keys[j]'s set, nil for a key of the node itself
			if sets[i] != nil && b.from == nil {
				b.from = st.conns[b.node.Addr]
			}
			b.sets = append(b.sets, sets[i])
		}
	}
	return bs
}

// gets runs the multi-get of every batch (withTTL: with TTLs and flags, as
// node.GetMulti) and stores its answer in the batch. Without TTLs, every
// node's request is sent before any answer is read, and the answers are
// read on this goroutine, into one allocation for all of them: first on
// idle connections, then to the other nodes at once (their dials overlap),
// and last, once those answers are read and no connection is held, to the
// nodes whose connections were all busy (see node.Sender).
func (bs *batches) gets(ctx context.Context, withTTL bool) {
	if withTTL {
		bs.run(func(b *batch) (err error) {
			b.got, err = b.conn.GetMulti(ctx, b.keys, true)
			return err
		})
		bs.readRest(ctx)
		return
	}
	var cold, busy []*batch
	for _, b := range bs.list {
		s, ok := b.conn.(node.Sender)
		if !ok {
			b.pend = b.conn.Send(ctx, b.keys)
			continue
		}
		if b.pend, ok = s.SendIdle(ctx, b.keys); !ok {
			cold = append(cold, b)
		}
	}
	trySend := func(b *batch) {
		var ok bool
		if b.pend, ok = b.conn.(node.Sender).TrySend(ctx, b.keys); !ok {
			b.pend = nil
		}
	}
	if len(cold) == 1 {
		trySend(cold[0])
	} else if len(cold) > 1 {
		var dials sync.WaitGroup
		for _, b := range cold {
			dials.Go(func() { trySend(b) })
		}
		dials.Wait()
	}
	n := 0
	for _, b := range bs.list {
		n += len(b.keys)
	}
	all := make([]node.Answer, n)
	for _, b := range bs.list {
		b.ans, all = all[:len(b.keys):len(b.keys)], all[len(b.keys):]
		if b.pend == nil {
			busy = append(busy, b)
			continue
		}
		b.recv()
	}
	for _, b := range busy { // one at a time, holding no other connection
		b.pend = b.conn.Send(ctx, b.keys)
		b.recv()
	}
	bs.readRest(ctx)
}

// recv reads the answer of the multi-get b sent into b.ans.
func (b *batch) recv() {
	if b.err = b.pend.Recv(b.ans); b.err != nil {
		b.ans = nil
	}
	b.set, _ = b.pend.(*replica.Pending)
	b.pend = nil
}

// readRest reads the keys the replica sets' first members missed from
// their other members (replicaSet.readRest, batch.readReplicas), every
// batch at once.
func (bs *batches) readRest(ctx context.Context) {
	var wg sync.WaitGroup
	for _, b := range bs.list {
		switch {
		case b.set != nil:
			s := b.conn.(*replica.Set)
			wg.Go(func() {
				if err := s.ReadRest(ctx, b.keys, b.ans, b.set); err != nil {
					b.err, b.ans = err, nil
				}
			})
		case b.sets != nil && b.from != nil && b.missedAny():
			wg.Go(func() { b.readReplicas(ctx) })
		}
	}
	wg.Wait()
}

// missedAny reports whether b failed or missed a key.
func (b *batch) missedAny() bool {
	if b.err != nil {
		return true
	}
	var scratch item
	for i := range b.answered() {
		if !b.answer(i, &scratch).Found {
			return true
		}
	}
	return false
}

// readReplicas reads the keys of b, a batch of replica sets' first member,
// that it missed (all of them if it failed) from their sets' other
// members. b's failure stands if a set could not answer for its keys.
func (b *batch) readReplicas(ctx context.Context) {
	failed := b.err != nil
	if failed {
		if b.ans == nil && b.got == nil {
			b.got = make([]item, len(b.keys))
			for i := range b.got {
				b.got[i].Key = b.keys[i]
			}
		}
	}
	var scratch item
	groups := make(map[*replica.Set][]int, 2)
	for i, s := range b.sets {
		if s != nil && (failed || !b.answer(i, &scratch).Found) {
			groups[s] = append(groups[s], i)
		}
	}
	answered := true
	for s, at := range groups {
		ks := make([]string, len(at))
		for j, i := range at {
			ks[j] = b.keys[i]
		}
		got, err := s.Rest(ctx, ks, b.from, !failed)
		if err != nil {
			answered = false
			continue
		}
		for j, i := range at {
			if !got[j].Found {
				continue
			}
			if b.ans != nil {
				b.ans[i] = node.Answer{Value: got[j].Value, Found: true, Flags: got[j].Flags, CAS: got[j].CAS}
			} else {
				b.got[i] = got[j]
			}
		}
	}
	if failed && answered && !slices.Contains(b.sets, nil) { // the node's own keys failed with it
		b.err = nil
	}
}

// run calls fn on every batch, in parallel, and stores its error in the
// batch.
func (bs *batches) run(fn func(b *batch) error) {
	var wg sync.WaitGroup
	for i, b := range bs.list {
		if i == len(bs.list)-1 { // the last one on this goroutine
			b.err = fn(b)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.err = fn(b)
		}()
	}
	wg.Wait()
}

// GetMulti returns the values of the keys that are present; a key missing
// from the map is a miss. Keys are sent one round trip per node, every
// node's request written before any answer is read (see the package doc on
// multi-gets). When a node fails, the hits of the others are returned with
// an error that joins one *NodeError per failed node. During a migration
// the new owners' misses are looked up on their old owners in a second
// round, and backfilled in a third. The values of one node's answer may
// share a buffer: a value kept keeps it alive, so copy the few kept for
// long.
func (c *Client) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	hits, err := c.getMulti(ctx, keys)
	for k, v := range hits {
		if isNegative(v) { // GetOrLoad's "not found" (see ErrNotFound)
			delete(hits, k)
		}
	}
	return hits, err
}

// getMulti is GetMulti with negative entries among the hits.
func (c *Client) getMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	st, now, err := c.beginMulti(ctx, keys)
	if err != nil {
		return nil, err
	}
	hits := make(map[string][]byte, len(keys))
	keys = c.nearMulti(st, now, keys, func(k string, v []byte) { hits[k] = v }) // the keys held near (nearcache.go)
	return hits, c.collect(ctx, st, now, keys, func(it *item, _ bool) { hits[it.Key] = it.Value })
}

// beginMulti validates ctx and keys and loads the state to route them
// with.
func (c *Client) beginMulti(ctx context.Context, keys []string) (*state, time.Time, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, time.Time{}, err
	}
	for _, k := range keys {
		if err := c.checkKey(k); err != nil {
			return nil, time.Time{}, err
		}
	}
	st, now := c.load()
	if st == nil {
		return nil, time.Time{}, ErrClosed
	}
	return st, now, nil
}

// collect is GetMulti's mechanism: it calls hit for every key found, on
// this goroutine, with copied set for a value found on an old owner; a key
// may be reported twice, the later report current.
func (c *Client) collect(ctx context.Context, st *state, now time.Time, keys []string, hit func(it *item, copied bool)) error {
	if len(keys) == 0 {
		return nil
	}
	var routes []migration.Route
	var first *batches
	if st.mig == nil {
		first = readBatches(st, keys, func(i int) ring.Node { return st.placement.Locate(keys[i]) })
	} else {
		routes = make([]migration.Route, len(keys))
		first = readBatches(st, keys, func(i int) ring.Node {
			routes[i] = st.mig.Route(keys[i], now)
			return routes[i].New
		})
	}
	first.gets(ctx, false)
	var errs []error
	var scratch item
	var missed []int // keys to look up on their old owners
	for _, b := range first.list {
		if b.err != nil {
			if !c.openBatch(st, b, len(b.keys), true) {
				errs = append(errs, nodeErr("get_multi", b.node, b.keys, b.err))
			}
			continue
		}
		for i := range b.answered() {
			switch it, k := b.answer(i, &scratch), b.idx[i]; {
			case it.Found:
				hit(it, false)
				if routes != nil {
					st.mig.Counters.NewHits.Add(1)
				}
			case routes != nil && routes[k].Fallback:
				missed = append(missed, k)
			}
		}
	}
	if len(missed) > 0 {
		ks := make([]string, len(missed))
		rs := make([]migration.Route, len(missed))
		for i, k := range missed {
			ks[i], rs[i] = keys[k], routes[k]
		}
		c.fromOld(ctx, st, now, ks, rs, copyRead, func(it *item) { hit(it, true) })
	}
	return errors.Join(errs...)
}

// SetMulti stores every item with the same TTL, one round trip per node,
// all nodes in parallel. When a node fails, the others' items are stored
// and the error joins one *NodeError per failed node, naming its keys.
func (c *Client) SetMulti(ctx context.Context, items map[string][]byte, ttl time.Duration) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	keys := make([]string, 0, len(items))
	for k, v := range items {
		if err := c.checkKey(k); err != nil {
			return err
		}
		if err := c.checkValue(k, v); err != nil {
			return err
		}
		keys = append(keys, k)
	}
	return c.multiWrite(ctx, "set_multi", keys, func(i int) item {
		return item{Key: keys[i], Value: items[keys[i]], TTL: ttl}
	}, func(b *batch) error { return b.conn.SetMulti(ctx, b.items) })
}

// DeleteMulti deletes the keys, one round trip per node, all nodes in
// parallel. During a migration it deletes from old owners too, and a failure
// there is an error like any other.
func (c *Client) DeleteMulti(ctx context.Context, keys []string) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	for _, k := range keys {
		if err := c.checkKey(k); err != nil {
			return err
		}
	}
	if c.leasing() && len(keys) > 0 { // first, as Delete does
		if err := c.clearLeases(ctx, keys); err != nil {
			return err
		}
	}
	return c.multiWrite(ctx, "delete_multi", keys, func(i int) item {
		return item{Key: keys[i]}
	}, func(b *batch) error { return b.conn.DeleteMulti(ctx, b.keys) })
}

// multiWrite sends item(i) for every key to its owner and, during a
// migration, to its old owner too, all nodes at once: a failure on either
// owner is an error (write, in ops.go). A migration's deletes bury the
// moved keys on their new owners (copy.go).
func (c *Client) multiWrite(ctx context.Context, op string, keys []string, mk func(i int) item, send func(*batch) error) error {
	c.follower.WroteAll(keys) // before the state is loaded: see beginWrite
	st, now := c.load()
	for st != nil && st.hold {
		if err := waitRelease(ctx, st); err != nil {
			return err
		}
		st, now = c.load()
	}
	if st == nil {
		return ErrClosed
	}
	del := op == "delete_multi"
	bs := newBatches(st)
	tombs := newBatches(st) // deletes of moved keys, on their new owners
	copies := 0
	for i, k := range keys {
		if st.mig == nil {
			bs.add(st.placement.Locate(k), mk(i), i, false)
			continue
		}
		r := st.mig.Route(k, now)
		// The new owner buries; before the start it is r.Old, and a write
		// reaches it as a tombstone too (onOld).
		tombAt, plainAt := r.New, r.Old
		if r.Before {
			tombAt, plainAt = r.Old, r.New
		}
		switch {
		case !r.Dual:
			bs.add(r.New, mk(i), i, false)
			continue
		case del:
			tombs.add(tombAt, mk(i), i, false)
			if !bugNoDualDelete { // a seeded bug (seeded.go)
				bs.add(plainAt, mk(i), i, true)
			}
		case r.Before:
			bs.add(r.New, mk(i), i, false)
			tombs.add(r.Old, mk(i), i, false)
		default:
			bs.add(r.New, mk(i), i, false)
			bs.add(r.Old, mk(i), i, true)
		}
		copies++
	}
	if copies > 0 {
		if del {
			st.mig.Counters.DualDeletes.Add(int64(copies))
		} else {
			st.mig.Counters.DualWrites.Add(int64(copies))
		}
	}
	var wg sync.WaitGroup
	if len(tombs.list) > 0 {
		ttl := tombTTL(st, now)
		// Before the start every tombstone is a write's, a Delete's
		// included; in the window a Delete's.
		kind := tombKind(!del || now.Before(st.mig.Start()))
		wg.Go(func() {
			tombs.run(func(b *batch) error {
				_, err := c.bury(ctx, b.conn, b.keys, ttl, kind)
				return err
			})
		})
	}
	bs.run(send)
	wg.Wait()
	var errs []error
	for _, b := range append(bs.list, tombs.list...) {
		if b.err == nil {
			continue
		}
		for i := range b.items {
			if b.old != nil && b.old[i] {
				st.mig.Counters.DualWriteErrors.Add(1)
			}
		}
		if del && !st.goneFailed(b.node.Addr, b.err) || !del && !c.openBatch(st, b, len(b.items), false) {
			errs = append(errs, nodeErr(op, b.node, b.keys, b.err))
		}
	}
	return errors.Join(errs...)
}
