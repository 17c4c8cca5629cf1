package sim

import (
	"container/list"
	"context"
	"fmt"

	"github.com/shardcache/shardcache/cmd/shardcache/internal/balance"
	"github.com/shardcache/shardcache/ring"
)

// The memory simulation: a fleet of nodes of different memory limits under
// the workload, where a node that fills evicts, shown as is and re-weighted
// with the weights shardcache balance proposes from the servers' usage.
//
// Its servers are models, not miniredis (which has no memory limit): each
// node holds items of ItemOverhead + key + value bytes up to its limit and
// evicts the least recently used, as Redis with allkeys-lru and Memcached
// do. Keys are placed by the real ring. Values have no expiry: what fills a
// node is what it holds. The two fleets run the same requests; until
// ReshardAt they are one. At ReshardAt the usage of every node (items,
// bytes, limit, evictions) goes to balance.Propose, and the re-weighted
// fleet moves to its weights: every key whose node changes goes to its new
// node, keeping its recency, and leaves the old one (a sweep, then the
// TTLs). The as-is fleet keeps its weights.

// ItemOverhead is the bytes a model server spends on an item beside its
// key and value: about Redis's per key, within Memcached's item header and
// slab slack.
const ItemOverhead = 64

// MemoryConfig describes a memory simulation.
type MemoryConfig struct {
	// Config is the workload and the fleet: From (the nodes), Vnodes,
	// Keys, ZipfS, ZipfV, Requests, WriteRatio, Steps, ReshardAt, Seed.
	// To, the TTLs, windows, modes and servers play no part.
	Config
	// Limits is each node's memory limit in bytes, by name: every node of
	// From has one.
	Limits map[string]int64
	// ValueSize is every value's size in bytes. Default 1000.
	ValueSize int
}

// MemoryStep is what one step did in one fleet.
type MemoryStep struct {
	Reads, Hits int64
	// Evictions are the items evicted in the step, by node in From's
	// order.
	Evictions []int64
}

// HitRate returns Hits/Reads, or 1 for a step without reads.
func (s MemoryStep) HitRate() float64 {
	if s.Reads == 0 {
		return 1
	}
	return float64(s.Hits) / float64(s.Reads)
}

// MemoryNode is one node of a fleet at the end of the run.
type MemoryNode struct {
	Node  ring.Node // with the fleet's weight
	Limit int64
	Share float64 // its exact share of the fleet's ring
	Items int64
	Bytes int64
	// Evictions counts the items evicted from the reshard on.
	Evictions int64
}

// Fill returns Bytes/Limit.
func (n MemoryNode) Fill() float64 { return float64(n.Bytes) / float64(n.Limit) }

// MemoryFleet is one fleet's run.
type MemoryFleet struct {
	Steps []MemoryStep
	Nodes []MemoryNode
	// SteadyHitRate is the hit rate over the last quarter of the steps.
	SteadyHitRate float64
}

// MemoryResult is a memory simulation's run: the fleet as is and
// re-weighted.
type MemoryResult struct {
	Config     MemoryConfig
	AsIs       MemoryFleet
	Reweighted MemoryFleet
	// Proposal is what balance proposed from the usage at ReshardAt.
	Proposal *balance.Proposal
	// Moved is the share of keys the re-weighting moves (ring.Moved).
	Moved float64
}

// RunMemory runs a memory simulation.
func RunMemory(ctx context.Context, mc MemoryConfig) (*MemoryResult, error) {
	cfg := &mc.Config
	if cfg.To == nil {
		cfg.To = cfg.From // only From counts; setDefaults wants both
	}
	if err := cfg.init(); err != nil {
		return nil, err
	}
	if mc.ValueSize == 0 {
		mc.ValueSize = 1000
	}
	if mc.ValueSize < 0 {
		return nil, fmt.Errorf("%w: ValueSize %d (want >= 0)", ErrBadConfig, mc.ValueSize)
	}
	asIs, err := cfg.ring(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	nodes := asIs.Nodes() // normalised, sorted by name
	limits := make([]int64, len(nodes))
	for i, n := range nodes {
		if limits[i] = mc.Limits[n.Name]; limits[i] <= 0 {
			return nil, fmt.Errorf("%w: node %s has no memory limit", ErrBadConfig, n.Name)
		}
	}
	for name := range mc.Limits {
		if !ringHas(nodes, name) {
			return nil, fmt.Errorf("%w: a memory limit for %s, which is not a node", ErrBadConfig, name)
		}
	}
	w := newWorkload(cfg)
	keys := w.keys("")
	f := newFleet(nodes, limits, asIs, keys, mc.ValueSize)
	res := &MemoryResult{Config: mc}
	stream := w.stream()
	reqs := make([]request, cfg.Requests)
	var g *fleet // the re-weighted fleet, from ReshardAt
	for i := range cfg.Steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if i == cfg.ReshardAt {
			if res.Proposal, err = balance.Propose(f.readings(), cfg.Vnodes, cfg.Equalize); err != nil {
				return nil, fmt.Errorf("the proposal: %w", err)
			}
			weighted, err := cfg.ring(res.Proposal.Weighted())
			if err != nil {
				return nil, err
			}
			res.Moved = ring.Moved(asIs, weighted)
			g = f.clone()
			g.reweight(weighted)
			f.mark()
			g.mark()
		}
		stream.next(reqs)
		res.AsIs.Steps = append(res.AsIs.Steps, f.step(reqs))
		if g != nil {
			res.Reweighted.Steps = append(res.Reweighted.Steps, g.step(reqs))
		} else {
			res.Reweighted.Steps = append(res.Reweighted.Steps, res.AsIs.Steps[i])
		}
		if cfg.Progress != nil {
			cfg.Progress(i+1, cfg.Steps)
		}
	}
	res.AsIs.Nodes, res.Reweighted.Nodes = f.report(), g.report()
	res.AsIs.SteadyHitRate, res.Reweighted.SteadyHitRate = steady(res.AsIs.Steps), steady(res.Reweighted.Steps)
	return res, nil
}

func ringHas(nodes []ring.Node, name string) bool {
	for _, n := range nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}

// steady returns the hit rate over the last quarter of steps.
func steady(steps []MemoryStep) float64 {
	var s MemoryStep
	for _, st := range steps[len(steps)-max(len(steps)/4, 1):] {
		s.Reads += st.Reads
		s.Hits += st.Hits
	}
	return s.HitRate()
}

// fleet is model servers under one placement.
type fleet struct {
	r       *ring.Ring
	nodes   []ring.Node // sorted by name, as r's
	index   map[string]int
	servers []*lruServer
	owner   []int32 // key id -> server index under r
	size    int64   // bytes of every item
	keys    []string
}

func newFleet(nodes []ring.Node, limits []int64, r *ring.Ring, keys []string, valueSize int) *fleet {
	f := &fleet{nodes: nodes, index: map[string]int{}, keys: keys}
	for i, n := range nodes {
		f.index[n.Name] = i
		f.servers = append(f.servers, newLRU(limits[i], len(keys)))
	}
	f.size = int64(ItemOverhead + valueSize)
	f.place(r)
	return f
}

// place locates every key under r.
func (f *fleet) place(r *ring.Ring) {
	f.r = r
	f.owner = make([]int32, len(f.keys))
	for k, key := range f.keys {
		f.owner[k] = int32(f.index[r.Locate(key).Name])
	}
}

// itemSize is key k's item's bytes.
func (f *fleet) itemSize(k int32) int64 { return f.size + int64(len(f.keys[k])) }

// step runs the requests: a read that misses loads and stores the value, a
// write stores it.
func (f *fleet) step(reqs []request) MemoryStep {
	st := MemoryStep{Evictions: make([]int64, len(f.servers))}
	for _, r := range reqs {
		s := f.owner[r.key]
		srv := f.servers[s]
		if !r.write {
			st.Reads++
			if srv.get(r.key) {
				st.Hits++
				continue
			}
		}
		st.Evictions[s] += srv.set(r.key, f.itemSize(r.key))
	}
	return st
}

// readings is every server's usage, as balance reads it.
func (f *fleet) readings() []balance.Reading {
	out := make([]balance.Reading, len(f.servers))
	for i, s := range f.servers {
		out[i] = balance.Reading{Node: f.nodes[i], Bytes: s.bytes, Limit: s.limit, Evictions: s.evictions}
	}
	return out
}

// clone returns a copy of the fleet, its servers' contents and recency
// included.
func (f *fleet) clone() *fleet {
	g := *f
	g.servers = make([]*lruServer, len(f.servers))
	for i, s := range f.servers {
		g.servers[i] = s.clone()
	}
	g.owner = append([]int32(nil), f.owner...)
	g.nodes = append([]ring.Node(nil), f.nodes...)
	return &g
}

// reweight moves the fleet to r: each key whose node changes goes to its
// new node, least recent first so that recency is kept, and leaves the old.
func (f *fleet) reweight(r *ring.Ring) {
	old := f.owner
	for i, n := range r.Nodes() {
		f.nodes[i].Weight = n.Weight // the same names, in the same order
	}
	f.place(r)
	for s, srv := range f.servers {
		for _, k := range srv.leastRecentFirst() {
			if to := f.owner[k]; to != int32(s) && old[k] == int32(s) {
				srv.remove(k)
				f.servers[to].set(k, f.itemSize(k))
			}
		}
	}
}

// mark starts counting evictions from now, for nodes.
func (f *fleet) mark() {
	for _, s := range f.servers {
		s.marked = s.evictions
	}
}

// report reports the servers.
func (f *fleet) report() []MemoryNode {
	shares := f.r.Shares()
	out := make([]MemoryNode, len(f.servers))
	for i, s := range f.servers {
		out[i] = MemoryNode{Node: f.nodes[i], Limit: s.limit, Share: shares[f.nodes[i].Name],
			Items: int64(s.items.Len()), Bytes: s.bytes, Evictions: s.evictions - s.marked}
	}
	return out
}

// lruServer is a model server: items up to limit bytes, the least recently
// used evicted for room.
type lruServer struct {
	limit, bytes int64
	evictions    int64
	marked       int64      // evictions at mark
	items        *list.List // of key ids, most recent at the front
	elem         []*list.Element
	size         map[int32]int64
}

func newLRU(limit int64, keys int) *lruServer {
	return &lruServer{limit: limit, items: list.New(), elem: make([]*list.Element, keys), size: map[int32]int64{}}
}

func (s *lruServer) get(k int32) bool {
	if e := s.elem[k]; e != nil {
		s.items.MoveToFront(e)
		return true
	}
	return false
}

// set stores key k's item of size bytes and returns the evictions it took.
func (s *lruServer) set(k int32, size int64) int64 {
	if e := s.elem[k]; e != nil {
		s.items.MoveToFront(e)
		s.bytes += size - s.size[k]
	} else {
		s.elem[k] = s.items.PushFront(k)
		s.bytes += size
	}
	s.size[k] = size
	var evicted int64
	for s.bytes > s.limit && s.items.Len() > 0 {
		s.remove(s.items.Back().Value.(int32))
		evicted++
	}
	s.evictions += evicted
	return evicted
}

func (s *lruServer) remove(k int32) {
	if e := s.elem[k]; e != nil {
		s.items.Remove(e)
		s.elem[k] = nil
		s.bytes -= s.size[k]
		delete(s.size, k)
	}
}

// leastRecentFirst returns the keys held, least recently used first.
func (s *lruServer) leastRecentFirst() []int32 {
	out := make([]int32, 0, s.items.Len())
	for e := s.items.Back(); e != nil; e = e.Prev() {
		out = append(out, e.Value.(int32))
	}
	return out
}

func (s *lruServer) clone() *lruServer {
	c := newLRU(s.limit, len(s.elem))
	c.evictions, c.marked = s.evictions, s.marked
	for _, k := range s.leastRecentFirst() {
		c.elem[k] = c.items.PushFront(k)
		c.size[k] = s.size[k]
		c.bytes += s.size[k]
	}
	return c
}
