// Package fanout splits a multi-key operation into one batch per node and
// runs them: each node's round trip in parallel with the others', a
// multi-get's requests all written before any answer is read, and the keys
// a replica set's first member missed read from its other members.
//
//	bs := fanout.Read(conns, keys, func(i int) ring.Node { return r.Locate(keys[i]) })
//	bs.Gets(ctx, false)
//	for _, b := range bs.List {
//		for i := range b.Answered() { _ = b.Answer(i, &scratch) }
//	}
package fanout

import (
	"context"
	"slices"
	"sync"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/replica"
	"github.com/shardcache/shardcache/ring"
)

// Batch is the part of a multi-key operation that goes to one node: one
// round trip, run in parallel with the other nodes' batches.
type Batch struct {
	Node  ring.Node
	Conn  node.Node
	Keys  []string    // the batch's keys, in order
	Items []node.Item // for writes: Keys[i]'s item; reads have keys alone
	Old   []bool      // for writes during a migration: Items[i] is a copy to an old owner
	Idx   []int       // Idx[i] is the position of Keys[i] in the caller's keys
	Err   error       // the round trip's

	// A read round's answer (Batches.Gets): Got, one item per key, or Ans,
	// one answer per key of a multi-get sent and received (pend);
	// Batch.Answer reads either.
	Got  []node.Item
	Ans  []node.Answer
	pend node.Pending
	// set is the multi-get of a replica set, whose misses are read from
	// its other members once every answer is in.
	set *replica.Pending
	// sets, for a read batch of a replica set's first member (from),
	// holds each key's set: its misses are read from the set's other
	// members once every answer is in (readReplicas).
	sets []*replica.Set
	from replica.Member
}

// Answer returns the read round's answer for b.Keys[i]: b.Got[i], or the
// answer made into scratch, which the next call reuses.
func (b *Batch) Answer(i int, scratch *node.Item) *node.Item {
	if b.Ans != nil {
		*scratch = node.AnswerItem(b.Keys[i], &b.Ans[i])
		return scratch
	}
	return &b.Got[i]
}

// Answered is how many keys b's read round answered: all or none.
func (b *Batch) Answered() int { return max(len(b.Got), len(b.Ans)) }

// Split divides a write batch by in(key): parts[1] holds the items whose
// key is in, parts[0] the others, each nil when empty; b itself when all
// agree.
func (b *Batch) Split(in func(string) bool) (parts [2]*Batch) {
	n := 0
	for _, k := range b.Keys {
		if in(k) {
			n++
		}
	}
	switch n {
	case 0:
		return [2]*Batch{b, nil}
	case len(b.Keys):
		return [2]*Batch{nil, b}
	}
	for j, k := range b.Keys {
		p := 0
		if in(k) {
			p = 1
		}
		if parts[p] == nil {
			parts[p] = &Batch{Node: b.Node, Conn: b.Conn}
		}
		parts[p].Keys = append(parts[p].Keys, k)
		parts[p].Items = append(parts[p].Items, b.Items[j])
		parts[p].Idx = append(parts[p].Idx, b.Idx[j])
	}
	return parts
}

// Conns gives the node client of each node: the client's routing, which
// hands out a stand-in for a node held down.
type Conns interface {
	Conn(n ring.Node) node.Node
}

// Batches groups items by node.
type Batches struct {
	conns Conns
	// List holds one batch per node, in the order of the nodes' first key.
	List  []*Batch
	index addrs // List's positions by address
}

// New returns no batches yet, whose nodes' clients conns gives.
func New(conns Conns) *Batches {
	return &Batches{conns: conns}
}

// Add puts a write of node.Item it into the batch of node n; old marks a
// migration's copy to an old owner.
func (bs *Batches) Add(n ring.Node, it node.Item, idx int, old bool) {
	b := bs.Get(n)
	b.Items = append(b.Items, it)
	b.Keys = append(b.Keys, it.Key)
	b.Idx = append(b.Idx, idx)
	if old || b.Old != nil {
		if b.Old == nil {
			b.Old = make([]bool, len(b.Items)-1, cap(b.Items))
		}
		b.Old = append(b.Old, old)
	}
}

// AddKey puts a read of key into the batch of node n.
func (bs *Batches) AddKey(n ring.Node, key string, idx int) {
	b := bs.Get(n)
	b.Keys = append(b.Keys, key)
	b.Idx = append(b.Idx, idx)
}

// linearBatches is the most positions addrs finds by a scan of its
// addresses, the placements' own strings (equal pointers compare at once);
// beyond it, by a map.
const linearBatches = 8

// addrs finds the position of an address in a list that grows by one at a
// time: by a scan while it is short, by a map once it is long.
type addrs struct {
	list   []string
	byAddr map[string]int
}

// find returns the position of addr, or false when it is not listed.
func (x *addrs) find(addr string) (int, bool) {
	if x.byAddr != nil {
		i, ok := x.byAddr[addr]
		return i, ok
	}
	for i, a := range x.list {
		if a == addr {
			return i, true
		}
	}
	return 0, false
}

// add lists addr, which is not listed yet, and returns its position.
func (x *addrs) add(addr string) int {
	x.list = append(x.list, addr)
	switch {
	case x.byAddr != nil:
		x.byAddr[addr] = len(x.list) - 1
	case len(x.list) > linearBatches:
		x.byAddr = make(map[string]int, 2*len(x.list))
		for i, a := range x.list {
			x.byAddr[a] = i
		}
	}
	return len(x.list) - 1
}

// Get returns the batch of node n, made on first use.
func (bs *Batches) Get(n ring.Node) *Batch { return bs.List[bs.batch(n)] }

// batch returns the position in bs.List of node n's batch, made on first
// use.
func (bs *Batches) batch(n ring.Node) int {
	if i, ok := bs.index.find(n.Addr); ok {
		return i
	}
	bs.List = append(bs.List, &Batch{Node: n, Conn: bs.conns.Conn(n)})
	return bs.index.add(n.Addr)
}

// Read groups keys for a read round, key i going to node owner(i),
// in two passes so that the batches' keys and positions are cut from one
// allocation each, of the exact size. Each owner's client (and, for a
// replica set, its first member) is looked up once per call, on its first
// key: the batch of every later key of that owner is found by address.
func Read(conns Conns, keys []string, owner func(i int) ring.Node) *Batches {
	bs := New(conns)
	which := make([]int32, len(keys)) // key i's batch, by index in bs.List
	count := make([]int, 0, 8)
	var seen owners
	var sets []*replica.Set     // with replicas: key i's set, its batch its first member's
	var firsts []replica.Member // and that member
	for i := range keys {
		o := seen.of(bs, owner(i))
		if o.set != nil {
			if sets == nil {
				sets, firsts = make([]*replica.Set, len(keys)), make([]replica.Member, len(keys))
			}
			sets[i], firsts[i] = o.set, o.first
		}
		if o.batch == len(count) {
			count = append(count, 0)
		}
		which[i] = int32(o.batch)
		count[o.batch]++
	}
	ks, idx := make([]string, len(keys)), make([]int, len(keys))
	off := 0
	for j, b := range bs.List {
		b.Keys, b.Idx = ks[off:off:off+count[j]], idx[off:off:off+count[j]]
		off += count[j]
	}
	for i, k := range keys {
		b := bs.List[which[i]]
		b.Keys, b.Idx = append(b.Keys, k), append(b.Idx, i)
		if sets != nil { // b.sets[j] is b.Keys[j]'s set, nil for a key of the node itself
			if sets[i] != nil && b.from == nil {
				b.from = firsts[i]
			}
			b.sets = append(b.sets, sets[i])
		}
	}
	return bs
}

// owner is what Read found for one owner: the position in Batches.List of
// the batch its keys go to and, for a replica set read from its first
// member, the set and that member.
type owner struct {
	batch int
	set   *replica.Set
	first replica.Member
}

// owners are the owners a Read has seen, by address.
type owners struct {
	list  []owner
	index addrs
}

// of returns what is known of owner n, looked up in bs on its first key.
func (os *owners) of(bs *Batches, n ring.Node) *owner {
	if i, ok := os.index.find(n.Addr); ok {
		return &os.list[i]
	}
	addr, o := n.Addr, owner{}
	if s, ok := bs.conns.Conn(n).(*replica.Set); ok {
		if m := s.First(); m != nil {
			n, o.set, o.first = m.RingNode(), s, m
		}
	}
	o.batch = bs.batch(n)
	os.list = append(os.list, o)
	return &os.list[os.index.add(addr)]
}

// Gets runs the multi-get of every batch (withTTL: with TTLs and flags, as
// node.GetMulti) and stores its answer in the batch. Without TTLs, every
// node's request is sent before any answer is read, and the answers are
// read on this goroutine, into one allocation for all of them: first on
// idle connections, then to the other nodes at once (their dials overlap),
// and last, once those answers are read and no connection is held, to the
// nodes whose connections were all busy (see node.Sender).
func (bs *Batches) Gets(ctx context.Context, withTTL bool) {
	if withTTL {
		bs.Run(func(b *Batch) (err error) {
			b.Got, err = b.Conn.GetMulti(ctx, b.Keys, true)
			return err
		})
		bs.readRest(ctx)
		return
	}
	var cold, busy []*Batch
	for _, b := range bs.List {
		s, ok := b.Conn.(node.Sender)
		if !ok {
			b.pend = b.Conn.Send(ctx, b.Keys)
			continue
		}
		if b.pend, ok = s.SendIdle(ctx, b.Keys); !ok {
			cold = append(cold, b)
		}
	}
	trySend := func(b *Batch) {
		var ok bool
		if b.pend, ok = b.Conn.(node.Sender).TrySend(ctx, b.Keys); !ok {
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
	for _, b := range bs.List {
		n += len(b.Keys)
	}
	all := make([]node.Answer, n)
	for _, b := range bs.List {
		b.Ans, all = all[:len(b.Keys):len(b.Keys)], all[len(b.Keys):]
		if b.pend == nil {
			busy = append(busy, b)
			continue
		}
		b.recv()
	}
	for _, b := range busy { // one at a time, holding no other connection
		b.pend = b.Conn.Send(ctx, b.Keys)
		b.recv()
	}
	bs.readRest(ctx)
}

// recv reads the answer of the multi-get b sent into b.Ans.
func (b *Batch) recv() {
	if b.Err = b.pend.Recv(b.Ans); b.Err != nil {
		b.Ans = nil
	}
	b.set, _ = b.pend.(*replica.Pending)
	b.pend = nil
}

// readRest reads the keys the replica sets' first members missed from
// their other members (replica.Set.ReadRest, Batch.readReplicas), every
// batch at once.
func (bs *Batches) readRest(ctx context.Context) {
	var wg sync.WaitGroup
	for _, b := range bs.List {
		switch {
		case b.set != nil:
			s := b.Conn.(*replica.Set)
			wg.Go(func() {
				if err := s.ReadRest(ctx, b.Keys, b.Ans, b.set); err != nil {
					b.Err, b.Ans = err, nil
				}
			})
		case b.sets != nil && b.from != nil && b.missedAny():
			wg.Go(func() { b.readReplicas(ctx) })
		}
	}
	wg.Wait()
}

// missedAny reports whether b failed or missed a key.
func (b *Batch) missedAny() bool {
	if b.Err != nil {
		return true
	}
	var scratch node.Item
	for i := range b.Answered() {
		if !b.Answer(i, &scratch).Found {
			return true
		}
	}
	return false
}

// readReplicas reads the keys of b, a batch of replica sets' first member,
// that it missed (all of them if it failed) from their sets' other
// members. b's failure stands if a set could not answer for its keys.
func (b *Batch) readReplicas(ctx context.Context) {
	failed := b.Err != nil
	if failed {
		if b.Ans == nil && b.Got == nil {
			b.Got = make([]node.Item, len(b.Keys))
			for i := range b.Got {
				b.Got[i].Key = b.Keys[i]
			}
		}
	}
	var scratch node.Item
	groups := make(map[*replica.Set][]int, 2)
	for i, s := range b.sets {
		if s != nil && (failed || !b.Answer(i, &scratch).Found) {
			groups[s] = append(groups[s], i)
		}
	}
	answered := true
	for s, at := range groups {
		ks := make([]string, len(at))
		for j, i := range at {
			ks[j] = b.Keys[i]
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
			if b.Ans != nil {
				b.Ans[i] = node.Answer{Value: got[j].Value, Found: true, Flags: got[j].Flags, CAS: got[j].CAS}
			} else {
				b.Got[i] = got[j]
			}
		}
	}
	if failed && answered && !slices.Contains(b.sets, nil) { // the node's own keys failed with it
		b.Err = nil
	}
}

// Run calls fn on every batch, in parallel, and stores its error in the
// batch.
func (bs *Batches) Run(fn func(b *Batch) error) {
	var wg sync.WaitGroup
	for i, b := range bs.List {
		if i == len(bs.List)-1 { // the last one on this goroutine
			b.Err = fn(b)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.Err = fn(b)
		}()
	}
	wg.Wait()
}
