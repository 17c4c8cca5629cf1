package ring

import (
	"encoding/binary"
	"math"
	"math/bits"
	"runtime"
	"sync"

	"github.com/twmb/murmur3"
)

// The slot table.
//
// An equalized ring (WithEqualize) places keys through a table of
// slotCount slots: a key goes to the slot of the top slotBits bits of its
// hash, and the slot to its node. The slots are given to nodes by weighted
// rendezvous hashing, with a multiplier per node nudged until every node's
// slot count is within the tolerance of its fair share:
//
//  1. Node i's draw for slot s is x = slotDraw(murmur3(Name), s): its top
//     slotBits bits the slot's stratum, a keyed bijection of the slots
//     (strata), the rest splitmix64's output at s (slotMix). Its
//     score is E = -ln(1 - x/2^64), an exponential variable of mean 1,
//     over Weight. The slot's candidates are the slotCandidates nodes of
//     lowest score, lowest first (ties to the node whose Name sorts first).
//     Rendezvous over exponentials gives node i the slot with probability
//     Weight over the total.
//  2. Every node's multiplier starts at 1; a slot goes to the candidate of
//     lowest score (kept as a float32) × multiplier, ties to the earlier
//     candidate. Rounds count each node's slots and, while a node is
//     outside its band [fair × (1-tol), fair × (1+tol)], scale the
//     multiplier of every node outside [fair × (1-slotAim×tol), fair ×
//     (1+slotAim×tol)] by its count over the nearer end of that, at most
//     slotRounds rounds. A correction is thus a continuous function of the
//     node's count, nothing for most: a change that moves the count a
//     little moves the correction a little, and few keys. (Correcting by
//     steps, only the nodes outside the band and to its middle, moved
//     nearly twice the extra keys at 100 nodes.)
//
// Why slots: a ring's arcs are few and random, so a node added takes
// unevenly from the others and an equalized ring must then correct almost
// every node, moving keys between old nodes. Rendezvous takes from every
// node evenly (a node's loss is binomial over its slots, off by about
// 1/sqrt(slotCount), relative), so the corrections, a function of the
// membership, barely change with it: a change moves little more than the
// least it must. slotCount is fixed, part of the placement: a count that
// followed the nodes would remap every key on a change.
//
// Why strata: what a change moves over the least is the corrected nodes'.
// A node held at the end of its band by its multiplier must win back, from
// other old nodes, whatever its binomial loss to a node added strays from
// its share; an uncorrected node just keeps the difference. A node is
// corrected when its count strays from its fair share by more than the
// band, and the count's randomness is half the node's own draws (in how
// many slots it draws low) and half the others' (whether it beats them
// there). Strata remove the first half: over the slots, a node's draws
// fall once in each [j, j+1)/slotCount of [0, 1), in an order of its own,
// so its count strays less and fewer nodes are corrected (issue 45; the
// figures in docs/performance.md, "Equalized ring").
//
// Everything is integer arithmetic but the scores and multipliers, which
// use only float64 operations IEEE 754 rounds exactly on every machine
// (no library logarithm; every product that feeds a sum is converted, so
// that no machine fuses it): the table is the same everywhere.
//
// A look-up is one read from a table of slotCount entries of the fewest
// bits that number the nodes, end to end (1 bit for 2 nodes, 2 for 3 or 4, 4 up to
// 16, 7 up to 128, 10 up to 1024, 16 up to maxSlotNodes): 128 KiB to 2 MiB.

const (
	slotBits       = 20
	slotCount      = 1 << slotBits
	slotCandidates = 3    // of each slot, for the multipliers to choose among
	slotRounds     = 64   // bounds the time of a fleet that cannot settle
	slotAim        = 0.95 // of the tolerance: where a correction takes a node, short of the band's end, as counts land near it
	maxSlotNodes   = 1 << 16
)

// slotTable is the owner of every slot, entries of width bits end to end:
// slot s's entry is bits s×width to s×width+width-1 of table, read as a
// little-endian number.
type slotTable struct {
	table  []byte // slotCount entries and 8 bytes of padding, so that any entry reads as one uint64
	width  uint   // an entry's bits: the fewest that number the nodes
	mask   uint64 // 1<<width - 1
	counts []int  // slots by node
}

// owner returns the index of the node of the slot of h.
func (t *slotTable) owner(h uint64) int {
	return int(t.at(int(h >> (64 - slotBits))))
}

// at returns the node of slot s: one 8-byte load of the bytes that hold
// its entry (width is at most 16 bits, which with the entry's offset in
// its first byte is at most 23 of the 64), a shift and a mask.
func (t *slotTable) at(s int) int32 {
	off := uint(s) * t.width
	b := t.table[off>>3 : off>>3+8]
	return int32(binary.LittleEndian.Uint64(b) >> (off & 7) & t.mask)
}

// points returns the slots as a ring's points (see analysis.go): one at the
// last hash of each run of slots of one node, the last at 2^64-1.
func (t *slotTable) points() []point {
	var pts []point
	for s := range slotCount {
		o := t.at(s)
		if s == slotCount-1 || t.at(s+1) != o {
			pts = append(pts, point{uint64(s+1)<<(64-slotBits) - 1, o})
		}
	}
	return pts
}

// slotDraw returns node seed's draw for slot s (step 1 above): the
// stratum of s in the top slotBits bits, the top bits of slotMix below, so
// that the draw is uniform within its stratum.
func slotDraw(seed uint64, s int) uint64 {
	return newStrata(seed).at(s)<<(64-slotBits) | slotMix(seed, s)>>slotBits
}

// strata is a node's bijection of [0, slotCount): the stratum of each
// slot. Each step is one (an xor, a product by an odd number and an
// xorshift, modulo slotCount), the first two keyed by the node, mixed
// enough that two nodes' strata of one slot look independent.
type strata struct{ a, m, b, n uint64 }

// newStrata returns node seed's strata, keyed by splitmix64's output at a
// seed of their own, so that they owe nothing to the node's slotMix draws.
func newStrata(seed uint64) strata {
	k := slotMix(seed^0x5851f42d4c957f2d, 0)
	return strata{a: k, m: k>>20 | 1, b: k >> 40, n: k>>44 | 1}
}

// at returns the stratum of slot s.
func (p strata) at(s int) uint64 {
	const mask, half = slotCount - 1, slotBits / 2
	x := (uint64(s) ^ p.a) * p.m & mask
	x ^= x >> half
	x = (x ^ p.b) * p.n & mask
	x ^= x >> half
	x = x * 0x9e3779b97f4a7c15 & mask
	return x ^ x>>half
}

// slotMix returns splitmix64's output at s for node seed.
func slotMix(seed uint64, s int) uint64 {
	z := seed + uint64(s+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// expScore returns -ln(1 - x/2^64), an exponential variable of mean 1 when
// x is uniform, computed the same on every machine.
func expScore(x uint64) float64 {
	if x < 1<<63 {
		return lnInv(float64(float64(x) * 0x1p-64))
	}
	// 1 - x/2^64 = (2^64-x)/2^64 = m × 2^(e-64), m in [1/2, 1).
	m, e := math.Frexp(float64(-x))
	return float64(float64(64-e)*math.Ln2) + lnInv(1-m)
}

// lnInvTerms are 1/(2k+1), the coefficients of atanh's series, from the
// last term used.
var lnInvTerms = func() [12]float64 {
	var c [12]float64
	for k := range c {
		c[k] = 1 / float64(2*(len(c)-1-k)+1)
	}
	return c
}()

// lnInv returns -ln(1-t) for t in [0, 1/2]: 2 atanh(s) with s = t/(2-t),
// at most 1/3, by its series: 12 terms, or 5 when s² < 2^-8 (t below
// about 0.12, as for most candidates of a large fleet). The relative
// error is below 1e-12 either way.
func lnInv(t float64) float64 {
	s := t / (2 - t)
	s2 := float64(s * s)
	terms := lnInvTerms[:]
	if s2 < 0x1p-8 {
		terms = terms[len(terms)-5:]
	}
	p := 0.0
	for _, c := range terms {
		p = float64(p*s2) + c
	}
	return 2 * float64(s*p)
}

// slotCandidateLists returns the candidates of every slot (step 1 above):
// for slot s, nodes[s*k+j] and its score keys[s*k+j], j < k, lowest first,
// where k = min(slotCandidates, len(ns)).
func slotCandidateLists(ns []Node) (nodes []uint16, keys []float32, k int) {
	k = min(slotCandidates, len(ns))
	seeds, strats, inv := make([]uint64, len(ns)), make([]strata, len(ns)), make([]float64, len(ns))
	for i, n := range ns {
		seeds[i], inv[i] = murmur3.StringSum64(n.Name), 1/n.Weight
		strats[i] = newStrata(seeds[i])
	}
	nodes, keys = make([]uint16, slotCount*k), make([]float32, slotCount*k)
	// Scores are found below a cut first, where 2k nodes' are expected
	// (were the weights equal), as expScore is the cost: a slot with fewer
	// than k below it (a few in a hundred) is done again without. Either
	// way the k lowest are the slot's. Small fleets have no cut.
	cut := math.Inf(1)
	if p := float64(2*k) / float64(len(ns)); p <= 0.5 {
		cut = float64(lnInv(p)*float64(len(ns))) / totalWeight(ns)
	}
	// A node is out where x>>11 > above[i]: its score's lower bound is
	// past the cut (in integers, the first test of every node, made on the
	// stratum alone, x's top bits, before the rest of x is drawn).
	above := make([]uint64, len(ns))
	for i, n := range ns {
		above[i] = uint64(min(float64(float64(cut*n.Weight)*0x1p53)*(1+0x1p-30), 0x1p53)) // Inf: 2^53
	}
	// Slots are independent: the work is cut in chunks, one goroutine each.
	parallel(func(from, to int) {
		var best [slotCandidates]float64
		var who [slotCandidates]uint16
		for s := from; s < to; s++ {
			for worst := cut; ; worst = math.Inf(1) {
				n := 0 // candidates so far, up to k
				for i, seed := range seeds {
					st := strats[i].at(s) // slotDraw, cut in two
					if st<<(64-slotBits-11) > above[i] && worst <= cut {
						continue
					}
					x := st<<(64-slotBits) | slotMix(seed, s)>>slotBits
					// -ln(1-t) >= t >= (x>>11)/2^53: most nodes are out at
					// the cost of a product (the margin covers the series'
					// rounding).
					if float64(float64(x>>11)*0x1p-53)*inv[i] > worst*(1+0x1p-40) {
						continue
					}
					key := expScore(x) * inv[i]
					if key >= worst {
						continue
					}
					j := min(n, k-1) // where key goes, after equal keys
					for j > 0 && best[j-1] > key {
						best[j], who[j] = best[j-1], who[j-1]
						j--
					}
					best[j], who[j] = key, uint16(i)
					if n < k {
						n++
					}
					if n == k {
						worst = best[k-1]
					}
				}
				if n == k {
					break
				}
			}
			for j := range k {
				nodes[s*k+j], keys[s*k+j] = who[j], float32(best[j])
			}
		}
	})
	return nodes, keys, k
}

// parallel runs fn over [0, slotCount) cut in one chunk per CPU.
func parallel(fn func(from, to int)) {
	chunks := max(1, min(runtime.GOMAXPROCS(0), 16))
	var wg sync.WaitGroup
	for c := range chunks {
		wg.Go(func() { fn(c*slotCount/chunks, (c+1)*slotCount/chunks) })
	}
	wg.Wait()
}

// equalizeSlots returns the slot table of ns equalized to tol (step 2
// above).
func equalizeSlots(ns []Node, tol float64) *slotTable {
	nodes, keys, k := slotCandidateLists(ns)
	total := totalWeight(ns)
	fair := make([]float64, len(ns)) // in slots
	ideal := make([]float64, len(ns))
	for i, n := range ns {
		ideal[i] = n.Weight / total
		fair[i] = float64(ideal[i] * slotCount)
	}
	mult := make([]float64, len(ns))
	for i := range mult {
		mult[i] = 1
	}
	owners := make([]uint16, slotCount)
	counts := make([]int, len(ns))
	assign := func() {
		parallel(func(from, to int) {
			for s := from; s < to; s++ {
				c := nodes[s*k : s*k+k]
				o, best := c[0], float64(keys[s*k])*mult[c[0]]
				for j := 1; j < k; j++ {
					if x := float64(keys[s*k+j]) * mult[c[j]]; x < best {
						o, best = c[j], x
					}
				}
				owners[s] = o
			}
		})
		clear(counts)
		for _, o := range owners {
			counts[o]++
		}
	}
	for range slotRounds {
		assign()
		settled := true
		for i, c := range counts {
			// The test Deviation makes, on the share Shares gives.
			if off := float64(float64(c)/slotCount)/ideal[i] - 1; math.Abs(off) > tol {
				settled = false
			}
		}
		if settled {
			break
		}
		for i, c := range counts {
			lo, hi := float64(fair[i]*(1-float64(slotAim*tol))), float64(fair[i]*(1+float64(slotAim*tol)))
			aim := min(max(float64(c), lo), hi)
			// A node's count goes about as the inverse of its multiplier
			// (a node of no slot counts half one, so that it gains).
			mult[i] = float64(mult[i]*max(float64(c), 0.5)) / max(aim, 0.5)
		}
	}
	return packSlots(owners, len(ns), counts)
}

// packSlots returns the table of owners, entries of the fewest bits that
// number nodes.
func packSlots(owners []uint16, nodes int, counts []int) *slotTable {
	width := uint(max(1, bits.Len(uint(nodes-1))))
	t := &slotTable{width: width, mask: 1<<width - 1, counts: counts}
	t.table = make([]byte, slotCount*int(width)/8+8)
	for s, o := range owners {
		off := uint(s) * width
		b := t.table[off>>3 : off>>3+8]
		binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)|uint64(o)<<(off&7))
	}
	return t
}

// walk runs p over the slots from start, as the package's walk does over
// points (a run of slots of one node is one point): the same choices.
func (t *slotTable) walk(p *picker, start int) {
	if p.spreading() {
		for k, s := 0, start; k < slotCount && p.spreading(); k++ {
			p.offer(t.at(s))
			s = (s + 1) & (slotCount - 1)
		}
		p.spread = p.n
	}
	for k, s := 0, start; k < slotCount && !p.done(); k++ {
		p.offer(t.at(s))
		s = (s + 1) & (slotCount - 1)
	}
	for o := int32(0); !p.done(); o++ { // nodes of no slot
		p.offer(o)
	}
}
