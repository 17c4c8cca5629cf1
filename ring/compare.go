package ring

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// CompareSamples is the number of keys Compare samples when it cannot count
// exactly: a standard error of 0.05% at most on the fraction that moves.
const CompareSamples = 1 << 20

// Change is what a switch from one placement to another does to the keys,
// counted by server (Node.Addr: where the data is, so a rename on the same
// server moves nothing and a node moved to another server moves its keys).
type Change struct {
	// Before and After are each server's share of the keys.
	Before, After map[string]float64
	// Flows[a][b] is the share of keys on server a before and on b after;
	// keys that stay put appear as Flows[a][a].
	Flows map[string]map[string]float64
	// Moved is the share of keys whose server changes, in [0, 1].
	Moved float64
	// Exact is set when the shares are computed from the placements
	// themselves; else they are counted over Samples keys (or hashes), and
	// StdErr is the standard error of Moved.
	Exact   bool
	Samples int
	StdErr  float64
	// Method says how the shares were found, in a few words.
	Method string
}

// Compare returns the change from one placement to another: that of
// CompareExact when it is exact, else counted over CompareSamples keys
// located in both (a Rendezvous, any other Locator), or hashes for two
// Modulos of a period too long to walk.
func Compare(from, to Locator) Change {
	if c, ok := CompareExact(from, to); ok {
		return c
	}
	c := Change{Samples: CompareSamples}
	f, ok1 := from.(*Modulo)
	t, ok2 := to.(*Modulo)
	if ok1 && ok2 && f.hash == t.hash {
		c.Method = "sampled: hashes drawn at random, located in both"
		return c.fill(moduloSampleFlows(f, t, CompareSamples))
	}
	c.Method = "sampled: keys located in both"
	return c.fill(sampleFlows(from, to, CompareSamples))
}

// CompareExact returns the change from one placement to another when it can
// be computed exactly, without sampling; ok is false otherwise. It is exact
// for two Rings and two Ketamas of one key hash (from the arcs between their
// points), for two Modulos of the same hash (from its residues, when the lcm
// of their slot counts is at most 2^22), and for any two of Ring, Ketama and
// Modulo that hash keys differently: a key's positions in them are then
// independent, so it stays put with probability Σ before(s)·after(s) over
// the servers s, from exact shares. Hash tags are taken to group keys alike
// in both.
func CompareExact(from, to Locator) (c Change, ok bool) {
	c.Exact = true
	flows := map[[2]string]float64{}
	if f, ok := from.(*Ring); ok {
		if t, ok := to.(*Ring); ok {
			c.Method = "exact, from the arcs between the points of both rings"
			if f.slots != nil || t.slots != nil {
				c.Method = "exact, from the slots and points of both rings"
			}
			overlay(f, t, func(a, b int32, length float64) {
				flows[[2]string{f.nodes[a].Addr, t.nodes[b].Addr}] += length / space
			})
			return c.fill(flows), true
		}
	}
	if f, ok := from.(*Ketama); ok {
		if t, ok := to.(*Ketama); ok && f.fnv == t.fnv {
			c.Method = "exact, from the arcs between the points of both continuums"
			overlay32(f, t, func(a, b int32, length float64) {
				flows[[2]string{f.nodes[a].Addr, t.nodes[b].Addr}] += length / (1 << 32)
			})
			return c.fill(flows), true
		}
	}
	f, ok1 := from.(*Modulo)
	t, ok2 := to.(*Modulo)
	if ok1 && ok2 && f.hash == t.hash {
		flows, ok := moduloFlows(f, t)
		c.Method = "exact, from the residues of the hash modulo both slot counts"
		return c.fill(flows), ok
	}
	if before, ok := exactShares(from); ok {
		if after, ok := exactShares(to); ok {
			c.Method = "exact, from exact shares: the two hash keys independently"
			for a, sa := range before {
				for b, sb := range after {
					flows[[2]string{a, b}] += sa * sb
				}
			}
			return c.fill(flows), true
		}
	}
	return Change{}, false
}

// sampleFlows locates n keys in both placements and returns the fraction of
// them that goes from each server to each. Servers are numbered so that a
// key costs two small map reads and an increment.
func sampleFlows(from, to Locator, n int) map[[2]string]float64 {
	type servers struct {
		num   map[string]int
		addrs []string
	}
	index := func(s *servers, addr string) int {
		i, ok := s.num[addr]
		if !ok { // a server Nodes did not list
			i = len(s.addrs)
			s.num[addr], s.addrs = i, append(s.addrs, addr)
		}
		return i
	}
	list := func(l Locator) *servers {
		s := &servers{num: map[string]int{}}
		for _, n := range l.Nodes() {
			index(s, n.Addr)
		}
		return s
	}
	a, b := list(from), list(to)
	counts := map[int]int{}
	buf := []byte("shardcache-sample:")
	base := len(buf)
	for i := range n {
		key := string(strconv.AppendInt(buf[:base], int64(i), 10))
		counts[index(a, from.Locate(key).Addr)<<32|index(b, to.Locate(key).Addr)]++
	}
	flows := make(map[[2]string]float64, len(counts))
	for ij, c := range counts {
		flows[[2]string{a.addrs[ij>>32], b.addrs[ij&(1<<32-1)]}] = float64(c) / float64(n)
	}
	return flows
}

// fill sets the shares, flows and Moved of c from flows by pair of servers.
func (c Change) fill(flows map[[2]string]float64) Change {
	c.Before, c.After = map[string]float64{}, map[string]float64{}
	c.Flows = map[string]map[string]float64{}
	stay := 0.0
	// In order, so that the float sums, and Compare, are deterministic.
	pairs := slices.SortedFunc(maps.Keys(flows), func(x, y [2]string) int {
		if c := strings.Compare(x[0], y[0]); c != 0 {
			return c
		}
		return strings.Compare(x[1], y[1])
	})
	for _, ab := range pairs {
		a, b, s := ab[0], ab[1], flows[ab]
		c.Before[a] += s
		c.After[b] += s
		if c.Flows[a] == nil {
			c.Flows[a] = map[string]float64{}
		}
		c.Flows[a][b] += s
		if a != b {
			c.Moved += s
		} else {
			stay += s
		}
	}
	// Over the sum, not 1, so that rounding in the sums cannot stray past
	// the ends: nothing stays, 1; nothing moves, 0.
	if total := c.Moved + stay; total > 0 {
		c.Moved /= total
	}
	if !c.Exact {
		c.StdErr = math.Sqrt(c.Moved * (1 - c.Moved) / float64(c.Samples))
	}
	return c
}

// exactShares returns the share of each server, by address, of the
// placements whose shares are computed exactly.
func exactShares(l Locator) (map[string]float64, bool) {
	switch p := l.(type) {
	case *Ring:
		return addrShares(p.nodes, p.Shares()), true
	case *Ketama:
		return addrShares(p.nodes, p.Shares()), true
	case *Modulo:
		return p.Shares(), true
	}
	return nil, false
}

// addrShares turns shares by name into shares by address.
func addrShares(nodes []Node, byName map[string]float64) map[string]float64 {
	s := make(map[string]float64, len(nodes))
	for _, n := range nodes {
		s[n.Addr] += byName[n.Name]
	}
	return s
}

// Added returns the nodes of to at an address no node of from has, each
// address once, in to's order: the servers a change from from to to
// starts writing to, which must hold no keys (a node added back still has
// its old values).
func Added(from, to []Node) []Node {
	var out []Node
	for _, n := range to {
		inUse := func(o Node) bool { return o.Addr == n.Addr }
		if !slices.ContainsFunc(from, inUse) && !slices.ContainsFunc(out, inUse) {
			out = append(out, n)
		}
	}
	return out
}
