package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// batch is the part of a multi-key operation that goes to one node: one
// round trip, run in parallel with the other nodes' batches.
type batch struct {
	node  ring.Node
	conn  node
	keys  []string // the batch's keys, in order
	items []item   // for writes: keys[i]'s item; reads have keys alone
	idx   []int    // idx[i] is the position of keys[i] in the caller's keys
	err   error    // the round trip's

	// A read round's answer (batches.gets): got, one item per key, ans,
	// one answer per key from raw connections, or vals, a Redis MGET's
	// answer as go-redis gives it; batch.answer reads any.
	got    []item
	ans    []answer
	vals   []any
	pend   mcGets      // raw connections: the multi-get sent, its answer not yet read
	queued *queuedMget // Redis: the MGET queued on the auto-pipeliner
}

// answer returns the read round's answer for b.keys[i]: b.got[i], or the
// answer or MGET value made into scratch, which the next call reuses.
func (b *batch) answer(i int, scratch *item) *item {
	switch {
	case b.ans != nil:
		*scratch = b.ans[i].item(b.keys[i])
	case b.vals != nil:
		*scratch = mgetItem(b.keys[i], b.vals[i])
	default:
		return &b.got[i]
	}
	return scratch
}

// answered is how many keys b's read round answered: all or none.
func (b *batch) answered() int {
	return max(len(b.got), len(b.ans), len(b.vals))
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

// add puts a write of item it into the batch of node n.
func (bs *batches) add(n ring.Node, it item, idx int) {
	b := bs.get(n)
	b.items = append(b.items, it)
	b.keys = append(b.keys, it.key)
	b.idx = append(b.idx, idx)
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
	for i := range keys {
		j := bs.index(owner(i))
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
	}
	return bs
}

// gets runs the multi-get of every batch (withTTL: with TTLs, as
// node.getMulti) and stores its answer in the batch. Without TTLs, a node
// that takes a request before its answer (raw connections: splitGetter) is
// sent its request first, and the answers are read on this goroutine once
// every request is out, one allocation for all the answers; a Redis node
// with AutoPipeline and other calls under way gets its MGET queued on the
// auto-pipeliner; the others are called in parallel meanwhile, as run does,
// a Redis MGET keeping its answer as go-redis gives it.
func (bs *batches) gets(ctx context.Context, withTTL bool) {
	if withTTL {
		bs.run(func(b *batch) (err error) {
			b.got, err = b.conn.getMulti(ctx, b.keys, true)
			return err
		})
		return
	}
	var sent, cold, rest []*batch
	for _, b := range bs.list {
		if nd, ok := b.conn.(redisNode); ok {
			if b.queued = nd.mgetQueued(ctx, b.keys); b.queued != nil {
				continue
			}
		}
		if s, ok := b.conn.(splitGetter); ok && s.reserve() {
			var idle bool
			if b.pend, idle = s.sendIdle(ctx, b.keys); !idle {
				cold = append(cold, b)
			}
			sent = append(sent, b)
			continue
		}
		rest = append(rest, b)
	}
	// Where a connection must be dialed (TLS, a login), the nodes' dials
	// run at once, not one after another.
	var dials sync.WaitGroup
	for _, b := range cold {
		dials.Go(func() { b.pend = b.conn.(splitGetter).getsSend(ctx, b.keys) })
	}
	var wg sync.WaitGroup
	for i, b := range rest {
		if i == len(rest)-1 && len(sent) == 0 { // the last one on this goroutine
			b.fetch(ctx, nil)
			break
		}
		wg.Add(1)
		go b.fetch(ctx, &wg)
	}
	dials.Wait()
	recvAll(sent)
	for _, b := range sent {
		b.conn.(splitGetter).received()
	}
	wg.Wait()
	for _, b := range bs.list {
		if b.queued != nil {
			b.vals, b.err = b.queued.wait(ctx)
		}
	}
}

// recvAll reads the answers of the multi-gets sent on the batches of list
// (batch.pend), in turn, into one allocation for all of them.
func recvAll(list []*batch) {
	n := 0
	for _, b := range list {
		n += len(b.keys)
	}
	all := make([]answer, n)
	for _, b := range list {
		b.ans, all = all[:len(b.keys):len(b.keys)], all[len(b.keys):]
		if b.err = b.pend.recv(b.ans); b.err != nil {
			b.ans = nil
		}
	}
}

// fetch runs b's multi-get without TTLs and keeps the answer, then tells
// wg, if any: a Redis node's MGET, its answer as go-redis gives it, or the
// node's getMulti. A goroutine starts here rather than in a closure over
// runEach's fn: go-redis's calls are deep, and each frame fewer between
// the goroutine's start and them is stack it does not have to grow.
func (b *batch) fetch(ctx context.Context, wg *sync.WaitGroup) {
	if nd, ok := b.conn.(redisNode); ok {
		b.vals, b.err = nd.mget(ctx, b.keys)
	} else {
		b.got, b.err = b.conn.getMulti(ctx, b.keys, false)
	}
	if wg != nil {
		wg.Done()
	}
}

// splitGetter is a node that sends a multi-get before it reads the answer,
// on raw connections: Memcached's (mcgets.go), and Redis's when the client
// made its go-redis client (redis_raw.go). reserve takes a place among the
// calls under way on them, or says to call the node otherwise; in that
// place, sendIdle sends on an idle connection, or says there is none, and
// getsSend sends, dialing if need be; received is told once the answer is
// read.
type splitGetter interface {
	reserve() bool
	sendIdle(ctx context.Context, keys []string) (mcGets, bool)
	getsSend(ctx context.Context, keys []string) mcGets
	received()
}

// run calls fn on every batch, in parallel, and stores its error in the
// batch.
func (bs *batches) run(fn func(b *batch) error) { runEach(bs.list, fn) }

// runEach is run on the batches of list.
func runEach(list []*batch, fn func(b *batch) error) {
	var wg sync.WaitGroup
	for i, b := range list {
		if i == len(list)-1 { // the last one on this goroutine
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
// from the map is a miss. Keys are sent one round trip per node, all nodes in
// parallel: a Memcached "gets" or a Redis MGET per node, over connections
// of the client's own (the node's credentials, TLS and timeouts), all
// written before any answer is read on the caller's goroutine. A Redis
// node whose go-redis client a NewRedisClient hook made gets its MGET
// through that client instead, from a goroutine per node, so that its hooks
// see it. With AutoPipeline, an MGET joins the node's auto-pipeliner batch
// while other calls to it are under way, and is sent at once as above
// otherwise. Every answer is due one timeout after its request was sent,
// however many nodes are slow; one read late because a slower node's was
// read first has more time for as long as it brings bytes. The values of
// one node's answer may share a buffer (up to 64 KiB): a value kept keeps
// it alive, so copy the few kept for long. When a node fails, the hits of
// the others are returned with an error that joins one *NodeError per
// failed node. During a migration the new owners' misses are looked up on
// their old owners in a second parallel round, and backfilled in a third.
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
	st, now, err := c.beginMulti(keys)
	if err != nil {
		return nil, err
	}
	hits := make(map[string][]byte, len(keys))
	return hits, c.collect(ctx, st, now, keys, func(it *item) { hits[it.key] = it.value })
}

// beginMulti validates keys and loads the state to route them with.
func (c *Client) beginMulti(keys []string) (*state, time.Time, error) {
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
// this goroutine; a key may be reported twice, the later report current.
func (c *Client) collect(ctx context.Context, st *state, now time.Time, keys []string, hit func(*item)) error {
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
	fallback := newBatches(st)
	for _, b := range first.list {
		if b.err != nil {
			if !c.openBatch(st, b, len(b.keys), true) {
				errs = append(errs, nodeErr("get_multi", b.node, b.keys, b.err))
			}
			continue
		}
		for i := range b.answered() {
			switch it, k := b.answer(i, &scratch), b.idx[i]; {
			case it.found:
				hit(it)
				if routes != nil {
					st.mig.Counters.NewHits.Add(1)
				}
			case routes != nil && routes[k].Dual:
				fallback.addKey(routes[k].Old, it.key, k)
			}
		}
	}
	if len(fallback.list) > 0 {
		c.fallbackMulti(ctx, st, now, routes, fallback, hit)
	}
	return errors.Join(errs...)
}

// fallbackMulti reads the new owners' misses from their old owners, reports
// the hits to hit and backfills them.
func (c *Client) fallbackMulti(ctx context.Context, st *state, now time.Time, routes []migration.Route, fallback *batches, hit func(*item)) {
	cs := st.mig.Counters
	fallback.gets(ctx, true)
	copies := newBatches(st)
	for _, b := range fallback.list {
		if b.err != nil {
			cs.FallbackErrors.Add(int64(len(b.keys)))
			continue
		}
		for i, it := range b.got {
			if !it.found {
				cs.FallbackMisses.Add(1)
				continue
			}
			cs.FallbackHits.Add(1)
			it.src = b.node
			hit(&it)
			var ok bool
			if it.ttl, ok = st.mig.BackfillTTL(it.key, now, it.ttl, it.ttlKnown); ok {
				copies.add(routes[b.idx[i]].New, it, b.idx[i])
			}
		}
	}
	if c.queue != nil {
		for _, b := range copies.list {
			c.enqueue(st, b.node, b.items)
		}
		return
	}
	// Where a newer value beat the copy to the new owner, return that one.
	newer := newBatches(st)
	for _, b := range copies.list {
		stored, _ := c.backfill(ctx, st, b.node, b.items) // a failure is counted, and the values read are returned
		for i, stored := range stored {
			if !stored {
				newer.addKey(b.node, b.items[i].key, b.idx[i])
			}
		}
	}
	newer.gets(ctx, false)
	var scratch item
	for _, b := range newer.list {
		for i := range b.answered() {
			if it := b.answer(i, &scratch); it.found {
				hit(it)
			}
		}
	}
}

// SetMulti stores every item with the same TTL, one round trip per node
// (Redis pipeline; Memcached sends its sets in turn), all nodes in parallel.
// When a node fails, the others' items are stored and the error joins one
// *NodeError per failed node, naming its keys.
func (c *Client) SetMulti(ctx context.Context, items map[string][]byte, ttl time.Duration) error {
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
		return item{key: keys[i], value: items[keys[i]], ttl: ttl}
	}, func(b *batch) error { return b.conn.setMulti(ctx, b.items) })
}

// DeleteMulti deletes the keys, one round trip per node, all nodes in
// parallel. During a migration it deletes from old owners too, and a failure
// there is an error like any other.
func (c *Client) DeleteMulti(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := c.checkKey(k); err != nil {
			return err
		}
	}
	if c.opts.Lease > 0 && len(keys) > 0 { // first, as Delete does
		if err := c.clearLeases(ctx, keys); err != nil {
			return err
		}
	}
	return c.multiWrite(ctx, "delete_multi", keys, func(i int) item {
		return item{key: keys[i]}
	}, func(b *batch) error { return b.conn.deleteMulti(ctx, b.keys) })
}

// multiWrite sends item(i) for every key to its owner and, during a
// migration, to its old owner too. Deletes fail on either owner's failure;
// for other writes a failed copy to an old owner is only counted.
func (c *Client) multiWrite(ctx context.Context, op string, keys []string, mk func(i int) item, send func(*batch) error) error {
	st, now := c.load()
	if st == nil {
		return ErrClosed
	}
	del := op == "delete_multi"
	bs := newBatches(st)
	olds := bs // where copies to old owners go
	if del {
		olds = newBatches(st)
	}
	copies := 0
	for i, k := range keys {
		if st.mig == nil {
			bs.add(st.placement.Locate(k), mk(i), i)
			continue
		}
		r := st.mig.Route(k, now)
		bs.add(r.New, mk(i), i)
		if r.Dual {
			copies++
			it := mk(i)
			it.oldCopy = true
			olds.add(r.Old, it, i)
		}
	}
	if copies > 0 {
		if del {
			st.mig.Counters.DualDeletes.Add(int64(copies))
		} else {
			st.mig.Counters.DualWrites.Add(int64(copies))
		}
	}
	if olds != bs {
		olds.run(send) // deletes: old owners first, then new ones (see backfill.go)
	}
	bs.run(send)
	var errs []error
	list := bs.list
	if olds != bs {
		list = append(olds.list, list...)
	}
	for _, b := range list {
		if b.err == nil {
			continue
		}
		var failed []string
		for _, it := range b.items {
			if it.oldCopy && !del {
				st.mig.Counters.DualWriteErrors.Add(1)
				continue
			}
			failed = append(failed, it.key)
		}
		if len(failed) > 0 && (del || !c.openBatch(st, b, len(failed), false)) {
			errs = append(errs, nodeErr(op, b.node, failed, b.err))
		}
	}
	return errors.Join(errs...)
}
