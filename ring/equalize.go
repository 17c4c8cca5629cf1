package ring

// Equalization.
//
// A classic ring's shares stray from the weights by about 1/sqrt(points of
// the node): at 512 vnodes the worst of 8 nodes often holds 10% more than
// its fair share, and every node must be provisioned for the worst one. An
// equalized ring gives every node, of any fleet of up to a few thousand
// nodes, its weight's fair share within the tolerance, and on a change of
// nodes moves little more than the least any placement must: its keys go
// through a table of slots given to nodes by weighted rendezvous hashing,
// nudged per node (see "The slot table" in slots.go).
//
// In v0.1.0, WithEqualize adjusted each node's point count on the classic
// ring instead: balanced too, but a change moved much more than the least
// on large fleets, as a ring's few random arcs make a new node take
// unevenly from the others and every node had to be corrected again
// (docs/performance.md). The two place keys differently: every client of a
// fleet must run the same one.

// DefaultTolerance is the equalization's tolerance when WithEqualize is
// given 0: every node's share within 1% of its fair share.
const DefaultTolerance = 0.01

// WithEqualize makes New equalize the ring: keys are placed through a
// table of slots whose counts per node are within tolerance (relative:
// 0.01 is 1%) of each weight's fair share (see Equalization in
// equalize.go), the vnodes unused. 0 means DefaultTolerance; a tolerance
// that is negative, NaN or from 1 up is ErrBadTolerance; more than 65,536
// nodes is ErrTooManyNodes. The tolerance is part of the placement: every
// client of a fleet must use the same. A ring without this option is
// classic, its placement unchanged.
func WithEqualize(tolerance float64) Option {
	return func(c *config) { c.equalize, c.tolerance = true, tolerance }
}

// Equalization is what an equalized ring gives and costs beside a classic
// one on a change of nodes or weights, computed exactly: see
// CompareEqualization.
type Equalization struct {
	// Minimum is the least share of keys the change moves on a perfect
	// placement, where every node holds its fair share: the sum of the fair
	// share each node gains. For a node added or removed it is that node's
	// fair share.
	Minimum float64
	// Classic and Equalized are the change on each kind of ring.
	Classic, Equalized RingChange
}

// RingChange is a change from one ring to another of the same kind.
type RingChange struct {
	// Moved is the share of keys whose node changes (Moved).
	Moved float64
	// Least is the least share of keys any placement with these two
	// rings' shares moves (Least). A classic ring moves exactly that when
	// a node is added or removed; an equalized one moves a little more, as
	// it corrects the other nodes too.
	Least float64
	// Before and After are the rings' Deviation: the balance either way.
	Before, After float64
}

// CompareEqualization builds the classic and the equalized rings of from
// and of to, with opts (WithVnodes, and WithEqualize for the tolerance:
// DefaultTolerance without it), and returns the balance of each and the
// keys each moves: whether equalizing is worth what it costs on a change.
// It returns New's errors.
func CompareEqualization(from, to []Node, opts ...Option) (Equalization, error) {
	cfg := config{vnodes: DefaultVnodes}
	for _, o := range opts {
		o(&cfg)
	}
	classic := []Option{WithVnodes(cfg.vnodes)}
	equalized := []Option{WithVnodes(cfg.vnodes), WithEqualize(cfg.tolerance)}
	var rings [4]*Ring // classic from, to; equalized from, to
	for k, args := range []struct {
		nodes []Node
		opts  []Option
	}{{from, classic}, {to, classic}, {from, equalized}, {to, equalized}} {
		r, err := New(args.nodes, args.opts...)
		if err != nil {
			return Equalization{}, err
		}
		rings[k] = r
	}
	change := func(a, b *Ring) RingChange {
		return RingChange{Moved: Moved(a, b), Least: Least(a, b), Before: a.Deviation(), After: b.Deviation()}
	}
	return Equalization{
		Minimum:   gained(rings[0].IdealShares(), rings[1].IdealShares()),
		Classic:   change(rings[0], rings[1]),
		Equalized: change(rings[2], rings[3]),
	}, nil
}

// Tolerance returns the tolerance the ring was equalized to, 0 for a
// classic ring.
func (r *Ring) Tolerance() float64 { return r.tolerance }
