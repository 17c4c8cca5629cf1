// Package balance proposes node weights that even out the memory cache
// servers use, from what each server holds: shardcache balance's
// arithmetic, and the simulator's re-weighting.
//
// A node's data grows with its share of the ring: bytes = base + density ×
// share, where base is what the empty server takes (Redis
// used_memory_startup; 0 for Memcached) and density the bytes per unit of
// share its keys take, observed. Nodes differ in density when their values
// differ in size, and in limit when their machines differ. The weights
// proposed give each node the share at which every node fills the same
// fraction of its limit: share ∝ (fill × limit − base) / density, which is
// limit / density (the issue's "memory limit over bytes per unit of ring
// share") when the base is negligible. The ring's own placement strays
// from the weights by a few percent (ring.Shares, exact), so the weights
// are then corrected for it, a few rounds, against the ring's exact shares.
//
// A node that evicts holds less than its share would put on it: its
// density is a lower bound, so it is taken as the larger of what it shows
// and the mean of the nodes that do not evict.
package balance

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// ErrNoData is returned when no node holds data to measure a density by.
var ErrNoData = errors.New("balance: the nodes hold no data to measure")

// ErrBadReading is a reading that cannot be balanced: a limit of 0, a
// negative count, a node missing from the ring.
var ErrBadReading = errors.New("balance: bad reading")

// FullFill is the share of its limit from which a node that has evicted
// counts as evicting: Memcached's items fill about nine tenths of its
// memory when it evicts (the rest is slab slack), Redis all of it.
const FullFill = 0.8

// MinFill is the mean fill (memory used over limit) under which the nodes
// hold too little for their balance to be measured: what they hold is
// then mostly each server's own memory and a handful of keys, and
// weights proposed from it follow that noise, not the data (a review
// measured a proposal moving 4% of the keys, another 9.5%, for nodes
// that held almost nothing). It is the ShardcacheMemorySkew alert's
// floor too (docs/alerts.yml).
const MinFill = 0.1

// LowFill returns the readings' mean fill and the fullest one's, and
// reports whether they are too low to propose weights from: the mean
// under MinFill, and no node evicting (one that evicts is full, and its
// reading is what the proposal needs). A reading with no limit counts as
// empty; Propose refuses it.
func LowFill(readings []Reading) (mean, fullest float64, low bool) {
	evicting := false
	for _, r := range readings {
		if r.Limit <= 0 {
			continue
		}
		fill := float64(r.Bytes) / float64(r.Limit)
		mean += fill
		fullest = max(fullest, fill)
		evicting = evicting || r.Evictions > 0 && fill >= FullFill
	}
	if len(readings) > 0 {
		mean /= float64(len(readings))
	}
	return mean, fullest, mean < MinFill && !evicting
}

// correctionRounds bounds the corrections of the weights against the
// ring's exact shares.
const correctionRounds = 12

// Reading is what one node's server holds (client.NodeUsage).
type Reading struct {
	Node ring.Node
	// Bytes, BaseBytes and Limit are the memory used, the part an empty
	// server takes, and the limit; Limit must be positive.
	Bytes, BaseBytes, Limit int64
	// Evictions counts the keys evicted since the server started.
	Evictions int64
}

// Node is one node's reading, what it says, and the proposal for it.
type Node struct {
	Reading
	// Share is the node's exact share of the ring now.
	Share float64
	// Fill is Bytes/Limit.
	Fill float64
	// Density is the data's bytes per unit of share, (Bytes − BaseBytes) /
	// Share, as observed.
	Density float64
	// Evicting: the node has evicted and fills FullFill of its limit or
	// more, so that its Density is a lower bound; Assumed is then the
	// density the proposal takes (the mean of the others, if larger).
	Evicting bool
	Assumed  float64
	// Weight is the proposed weight; NewShare the ring's exact share with
	// it, and NewFill the fill it projects: (base + density × new share) /
	// limit.
	Weight, NewShare, NewFill float64
}

// Proposal is a re-weighting of the nodes.
type Proposal struct {
	// Nodes are the nodes in the order read, with their proposal.
	Nodes []Node
	// Skew and NewSkew are the max/mean of the fills, now and projected;
	// CV and NewCV their coefficients of variation (stddev/mean).
	Skew, NewSkew, CV, NewCV float64
	// Target is the fill every node would reach on a perfect ring.
	Target float64
	// Notes say what the proposal assumed.
	Notes []string
}

// Propose proposes weights for the nodes of a ring with vnodes points per
// unit of weight, equalized to equalize when above 0 (topology.Ring), from
// their readings. The weights are normalised so that
// the median node keeps its weight, and rounded to three significant
// digits; the projection is that of the rounded weights.
func Propose(readings []Reading, vnodes int, equalize float64) (*Proposal, error) {
	if len(readings) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrBadReading)
	}
	nodes := make([]ring.Node, len(readings))
	for i, r := range readings {
		nodes[i] = r.Node
	}
	now, err := topology.Ring(nodes, vnodes, equalize)
	if err != nil {
		return nil, err
	}
	nodes = now.Nodes() // names and weights normalised, in order
	shares := now.Shares()
	p := &Proposal{Nodes: make([]Node, len(readings))}
	for i, r := range readings {
		r.Node = nodes[i]
		if r.Limit <= 0 || r.Bytes < 0 || r.BaseBytes < 0 || r.Evictions < 0 {
			return nil, fmt.Errorf("%w: node %s: %d bytes (base %d), limit %d, %d evictions",
				ErrBadReading, r.Node.Name, r.Bytes, r.BaseBytes, r.Limit, r.Evictions)
		}
		n := Node{Reading: r, Share: shares[r.Node.Name], Fill: float64(r.Bytes) / float64(r.Limit)}
		if n.Share > 0 {
			n.Density = float64(max(r.Bytes-r.BaseBytes, 0)) / n.Share
		}
		n.Evicting = r.Evictions > 0 && n.Fill >= FullFill
		n.Assumed = n.Density
		p.Nodes[i] = n
	}

	// The densities: the evicting nodes' bounded by the others' mean.
	var sum, share float64
	for _, n := range p.Nodes {
		if !n.Evicting && n.Density > 0 {
			sum += n.Density * n.Share
			share += n.Share
		}
	}
	switch {
	case share > 0:
		mean := sum / share
		for i := range p.Nodes {
			n := &p.Nodes[i]
			if n.Evicting && mean > n.Density {
				n.Assumed = mean
				p.Notes = append(p.Notes, fmt.Sprintf("%s evicts: it holds less than its share would put on it, so its bytes per unit of share are taken as the other nodes' mean, %s, not its own %s",
					n.Node.Name, Bytes(mean), Bytes(n.Density)))
			} else if n.Assumed == 0 {
				n.Assumed = mean // a node without data: as the others
			}
		}
	default:
		for _, n := range p.Nodes {
			if n.Density > 0 {
				sum += n.Density * n.Share
				share += n.Share
			}
		}
		if share == 0 {
			return nil, ErrNoData
		}
		for i := range p.Nodes {
			if p.Nodes[i].Assumed == 0 {
				p.Nodes[i].Assumed = sum / share
			}
		}
		p.Notes = append(p.Notes, "every node evicts: their bytes per unit of share are lower bounds, and the fleet lacks memory; re-weighting evens the pressure but cannot stop the evictions")
	}

	// The fill every node reaches at its target share, and those shares.
	var lim, base float64
	for _, n := range p.Nodes {
		lim += float64(n.Limit) / n.Assumed
		base += float64(n.BaseBytes) / n.Assumed
	}
	p.Target = (1 + base) / lim
	target := make([]float64, len(p.Nodes))
	for i, n := range p.Nodes {
		target[i] = max((p.Target*float64(n.Limit)-float64(n.BaseBytes))/n.Assumed, 1e-6)
	}

	// Weights for the target shares, corrected for the ring's own skew;
	// the best round kept.
	weights := slices.Clone(target)
	best := math.Inf(1)
	var bestWeights, bestShares []float64
	least := leastWeight(vnodes)
	for range correctionRounds {
		w := normalise(weights, p.Nodes)
		for i := range w {
			w[i] = max(w[i], least) // the ring gives every node a point
		}
		next, err := exactShares(nodes, w, vnodes, equalize)
		if err != nil {
			return nil, err
		}
		if s, _ := Skew(p.fills(next)); s < best {
			best, bestWeights, bestShares = s, w, next
		}
		for i := range weights {
			if next[i] > 0 {
				weights[i] = w[i] * target[i] / next[i]
			}
		}
	}
	for i := range p.Nodes {
		n := &p.Nodes[i]
		n.Weight, n.NewShare = bestWeights[i], bestShares[i]
	}
	for _, n := range p.Nodes {
		if n.Weight == least {
			p.Notes = append(p.Notes, fmt.Sprintf("%s's weight is the least the ring places (one point): its limit is far below the others'", n.Node.Name))
		}
	}
	fills := p.fills(bestShares)
	for i := range p.Nodes {
		p.Nodes[i].NewFill = fills[i]
	}
	old := make([]float64, len(p.Nodes))
	for i, n := range p.Nodes {
		old[i] = n.Fill
	}
	p.Skew, p.CV = Skew(old)
	p.NewSkew, p.NewCV = Skew(fills)
	return p, nil
}

// fills returns the fill each node projects at shares.
func (p *Proposal) fills(shares []float64) []float64 {
	out := make([]float64, len(p.Nodes))
	for i, n := range p.Nodes {
		out[i] = (float64(n.BaseBytes) + n.Assumed*shares[i]) / float64(n.Limit)
	}
	return out
}

// normalise scales weights so that the median of new over old weight is 1
// (the typical node keeps its weight, and its points), and rounds each to
// three significant digits.
func normalise(weights []float64, nodes []Node) []float64 {
	ratios := make([]float64, len(weights))
	for i, w := range weights {
		ratios[i] = w / nodes[i].Node.Weight
	}
	slices.Sort(ratios)
	median := ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		median = (ratios[len(ratios)/2-1] + median) / 2
	}
	out := make([]float64, len(weights))
	for i, w := range weights {
		out[i] = Round(w / median)
	}
	return out
}

// leastWeight is the least weight, of three significant digits, to which a
// ring of vnodes points per unit of weight gives a point.
func leastWeight(vnodes int) float64 {
	w := Round(1 / float64(vnodes))
	for math.Round(w*float64(vnodes)) < 1 {
		w = Round(w * 1.01)
	}
	return w
}

// Round rounds a weight to three significant digits: fine enough for a
// 1% correction, short enough to read.
func Round(w float64) float64 {
	if w <= 0 || math.IsInf(w, 0) || math.IsNaN(w) {
		return w
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(w, 'g', 3, 64), 64)
	return v
}

// exactShares returns the exact shares of nodes with weights, in order, on
// the ring Propose's arguments say.
func exactShares(nodes []ring.Node, weights []float64, vnodes int, equalize float64) ([]float64, error) {
	ns := slices.Clone(nodes)
	for i := range ns {
		ns[i].Weight = weights[i]
	}
	r, err := topology.Ring(ns, vnodes, equalize)
	if err != nil {
		return nil, err
	}
	s := r.Shares()
	out := make([]float64, len(ns))
	for i, n := range ns {
		out[i] = s[n.Name]
	}
	return out, nil
}

// Skew returns the max over the mean of values, and their coefficient of
// variation (population standard deviation over the mean): how unevenly
// the nodes fill.
func Skew(values []float64) (maxOverMean, cv float64) {
	var sum, peak float64
	for _, v := range values {
		sum += v
		peak = max(peak, v)
	}
	mean := sum / float64(len(values))
	var sq float64
	for _, v := range values {
		sq += (v - mean) * (v - mean)
	}
	return peak / mean, math.Sqrt(sq/float64(len(values))) / mean
}

// Weighted returns nodes with the proposal's weights.
func (p *Proposal) Weighted() []ring.Node {
	out := make([]ring.Node, len(p.Nodes))
	for i, n := range p.Nodes {
		out[i] = n.Node
		out[i].Weight = n.Weight
	}
	return out
}

// Bytes formats a size in bytes with binary units: "12.3 MiB".
func Bytes(b float64) string {
	const unit = 1024
	if math.Abs(b) < unit {
		return fmt.Sprintf("%.0f B", b)
	}
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		b /= unit
		if math.Abs(b) < unit || u == "TiB" {
			return fmt.Sprintf("%.1f %s", b, u)
		}
	}
	return ""
}
