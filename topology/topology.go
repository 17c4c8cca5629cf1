package topology

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/shardcache/shardcache/ring"
)

// DefaultMaxRemovedShare is the largest fraction of the total weight one
// change may remove when the topology does not say otherwise: a change
// that removes more (a whole cluster restarting under new names, a
// truncated file, a wrong DNS zone) is refused rather than applied.
const DefaultMaxRemovedShare = 0.5

// MaxWeight is the largest weight a node may have: at ring.DefaultVnodes
// points per unit of weight it fills a whole ring (ring.MaxPoints).
const MaxWeight = ring.MaxPoints / ring.DefaultVnodes

// Errors of Check and Validate, wrapped with the offending value. Each
// names what the caller does next: fix the topology, or (ErrTooMuchRemoved)
// confirm the change with MaxRemovedShare.
var (
	ErrNoNodes        = errors.New("shardcache/topology: no nodes")
	ErrDuplicateName  = errors.New("shardcache/topology: duplicate node name")
	ErrDuplicateAddr  = errors.New("shardcache/topology: duplicate node address")
	ErrBadAddr        = errors.New("shardcache/topology: bad address (want HOST:PORT with a port in 1..65535)")
	ErrBadName        = errors.New("shardcache/topology: bad node name")
	ErrBadWeight      = errors.New("shardcache/topology: bad node weight")
	ErrBadKind        = errors.New("shardcache/topology: bad placement kind")
	ErrBadWindow      = errors.New("shardcache/topology: bad migration window")
	ErrNoStart        = errors.New("shardcache/topology: migration window without a start")
	ErrBadShare       = errors.New("shardcache/topology: bad max removed share (want a fraction in (0, 1])")
	ErrBadEqualize    = errors.New("shardcache/topology: bad equalization tolerance (want 0 for the classic ring, or a fraction in (0, 1))")
	ErrTooMuchRemoved = errors.New("shardcache/topology: the change removes too much of the weight at once")
	ErrNilTopology    = errors.New("shardcache/topology: nil topology")
)

// Topology is one version of a fleet's cache nodes: the placement every
// process should run, and optionally how to migrate to it.
type Topology struct {
	// Version identifies this topology: the key's mod revision with etcd,
	// a digest of the node set with DNS, the file's "version" (or its
	// Digest) with a file. Zero means unknown.
	Version int64
	// Nodes are the nodes of the new placement, a ring (names, addresses,
	// weights as ring.Node, whose defaults apply).
	Nodes []ring.Node
	// Equalize, above 0, is the tolerance the ring of Nodes is equalized
	// to (ring.WithEqualize, client.Options.Equalize); 0 is the classic
	// ring. It is part of the placement: every process of the fleet must
	// build its ring with it (see Ring).
	Equalize float64
	// Migration, when set, moves keys from an old placement to Nodes at a
	// time every process shares. See the package doc for the protocol.
	Migration *Migration
	// MaxRemovedShare overrides DefaultMaxRemovedShare for the change to
	// this topology only (what "shardcache topology publish
	// --max-removed-share" sets): Validate compares it with the share of
	// weight this topology removes from the previous one. Zero means the
	// default.
	MaxRemovedShare float64
}

// Migration is how a topology moves keys from the placement before it.
type Migration struct {
	// From are the nodes keys move from. Empty means the topology's own
	// Nodes, for a change of placement kind alone (twemproxy's ketama over
	// the same servers to our ring, for one).
	From []ring.Node
	// FromKind is the placement of From, as the CLI's --from-kind: empty
	// or KindRing, KindKetama, KindModulo or KindRendezvous.
	FromKind Kind
	// FromEqualize is Equalize for the old ring, of FromKind ring: the
	// tolerance the fleet ran before, 0 for the classic ring. It is not
	// inherited from the topology's Equalize, so that a move from the
	// classic ring to an equalized one (Equalize set, FromEqualize 0) can
	// be said; an equalized fleet that changes its nodes gives both.
	FromEqualize float64
	// FromHash and FromHashTag are the key hash and hash tag of a ketama
	// or modulo placement, as --from-hash and --from-hash-tag; empty for
	// the kind's default.
	FromHash    string
	FromHashTag string
	// Start is when processes start reading the new placement first, and
	// Window how long the old one is still read after that.
	Start  time.Time
	Window time.Duration
}

// End is when the migration's window closes: from then on the new
// placement alone is used.
func (m *Migration) End() time.Time { return m.Start.Add(m.Window) }

// Clone returns a deep copy of t, so that a consumer may keep or change it.
func (t *Topology) Clone() *Topology {
	if t == nil {
		return nil
	}
	c := *t
	c.Nodes = slices.Clone(t.Nodes)
	if t.Migration != nil {
		m := *t.Migration
		m.From = slices.Clone(m.From)
		c.Migration = &m
	}
	return &c
}

// OldNodes returns the nodes keys move from: Migration.From, or Nodes when
// the migration changes the placement kind alone. It is nil without a
// migration.
func (t *Topology) OldNodes() []ring.Node {
	if t.Migration == nil {
		return nil
	}
	if len(t.Migration.From) > 0 {
		return t.Migration.From
	}
	return t.Nodes
}

// Check reports whether t is consistent on its own: nodes present, names
// and addresses well formed and distinct, weights in range, a migration
// whose kind is known and whose window has a start. It resolves nothing.
// Every error wraps one of the package's Err values.
func (t *Topology) Check() error {
	if t == nil {
		return ErrNilTopology
	}
	if err := checkNodes(t.Nodes); err != nil {
		return err
	}
	if s := t.MaxRemovedShare; math.IsNaN(s) || s < 0 || s > 1 {
		return fmt.Errorf("%w: %v", ErrBadShare, s)
	}
	if err := checkEqualize(t.Equalize); err != nil {
		return err
	}
	m := t.Migration
	if m == nil {
		return nil
	}
	if len(m.From) > 0 {
		if err := checkNodes(m.From); err != nil {
			return fmt.Errorf("migration from: %w", err)
		}
	}
	if err := checkKind(m.FromKind, m.FromHash, m.FromHashTag); err != nil {
		return fmt.Errorf("migration: %w", err)
	}
	if err := checkEqualize(m.FromEqualize); err != nil {
		return fmt.Errorf("migration from: %w", err)
	}
	if m.FromEqualize != 0 && m.FromKind != "" && m.FromKind != KindRing {
		return fmt.Errorf("migration from: %w: %v is only for a ring, not %s", ErrBadEqualize, m.FromEqualize, m.FromKind)
	}
	switch {
	case m.Window < 0:
		return fmt.Errorf("%w: %v (want 0 or more)", ErrBadWindow, m.Window)
	case m.Start.IsZero():
		return fmt.Errorf("%w: window %v", ErrNoStart, m.Window)
	}
	return nil
}

// checkEqualize checks an equalization tolerance: 0, or in (0, 1) as
// ring.WithEqualize wants it.
func checkEqualize(tol float64) error {
	if !(tol >= 0 && tol < 1) { // NaN too
		return fmt.Errorf("%w: %v", ErrBadEqualize, tol)
	}
	return nil
}

// checkNodes checks a node list as ring.New does, and more strictly: a
// name or an address with spaces or control characters is an error, not
// trimmed, and weights are bounded.
func checkNodes(nodes []ring.Node) error {
	if len(nodes) == 0 {
		return ErrNoNodes
	}
	total := 0.0
	for i, n := range nodes {
		if err := CheckAddr(n.Addr); err != nil {
			return fmt.Errorf("node %d (name %q): %w", i+1, n.Name, err)
		}
		if n.Name != "" && (strings.TrimFunc(n.Name, unicode.IsSpace) != n.Name || strings.IndexFunc(n.Name, unicode.IsControl) >= 0) {
			return fmt.Errorf("%w: node %d: %q (spaces around it, or a control character)", ErrBadName, i+1, n.Name)
		}
		if !(n.Weight >= 0 && n.Weight <= MaxWeight) { // NaN too
			return fmt.Errorf("%w: node %d (%s): %v (want up to %d, or 0 for 1)", ErrBadWeight, i+1, n.Addr, n.Weight, MaxWeight)
		}
		if n.Weight == 0 {
			total++
		} else {
			total += n.Weight
		}
	}
	if total > MaxWeight {
		return fmt.Errorf("%w: the nodes weigh %v in all, more than %d", ErrBadWeight, total, MaxWeight)
	}
	_, err := normalized(nodes)
	return err
}

// normalized returns nodes as the ring places them: sorted by name, the
// name defaulting to the address and the weight 0 to 1 (ring's defaults,
// which live there alone), or ring's refusal of duplicates as this
// package's error.
func normalized(nodes []ring.Node) ([]ring.Node, error) {
	// A ring of one point per node, cheap, for the names and addresses:
	// at one point per unit of weight, a weight under 0.5 would have none
	// (ring refuses it), though a client's ring of ring.DefaultVnodes
	// places it. The weights are put back after.
	weight := make(map[string]float64, len(nodes))
	ones := slices.Clone(nodes)
	for i, n := range nodes {
		weight[n.Addr] = n.Weight
		ones[i].Weight = 1
	}
	r, err := ring.New(ones, ring.WithVnodes(1))
	switch {
	case errors.Is(err, ring.ErrDuplicateName):
		return nil, fmt.Errorf("%w: %w", ErrDuplicateName, err)
	case errors.Is(err, ring.ErrDuplicateAddr):
		return nil, fmt.Errorf("%w: %w", ErrDuplicateAddr, err)
	case errors.Is(err, ring.ErrNoNodes):
		return nil, ErrNoNodes
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrBadAddr, err)
	}
	out := r.Nodes()
	for i := range out {
		if w := weight[out[i].Addr]; w != 0 {
			out[i].Weight = w
		}
	}
	return out, nil
}

// CheckAddr checks that addr is HOST:PORT with a port in 1..65535, as
// ring.CheckAddr does, and that the host holds no space, control character
// or character of the CLI's node-list grammar ("=", "*", ","). Its errors
// wrap both ErrBadAddr and ring.ErrBadAddr.
func CheckAddr(addr string) error {
	if err := ring.CheckAddr(addr); err != nil {
		return fmt.Errorf("%w: %w", ErrBadAddr, err)
	}
	if i := strings.IndexFunc(addr, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("=*,", r)
	}); i >= 0 {
		return fmt.Errorf("%w: %w: %q: %q at byte %d", ErrBadAddr, ring.ErrBadAddr, addr, addr[i], i)
	}
	return nil
}

// Validate reports whether a process that runs prev may apply next: next
// must pass Check, and must not remove more than its MaxRemovedShare
// (DefaultMaxRemovedShare when zero) of prev's total weight. The weight a
// change removes is, node by node by name, what prev's weight exceeds
// next's (all of it for a node next drops); a node that changes address
// under its name keeps its place on the ring and removes nothing. A nil
// prev (the first topology) is checked alone.
//
// A client calls it before it applies a topology, and keeps the last one
// that passed when it fails.
func Validate(prev, next *Topology) error {
	if err := next.Check(); err != nil {
		return err
	}
	if prev == nil {
		return nil
	}
	from, err := normalized(prev.Nodes)
	if err != nil {
		return nil // nothing a process ran: nothing to remove from
	}
	to, _ := normalized(next.Nodes) // Check passed
	limit := next.MaxRemovedShare
	if limit == 0 {
		limit = DefaultMaxRemovedShare
	}
	if removed := removedShare(from, to); removed > limit+1e-12 {
		return fmt.Errorf("%w: %.1f%% of the weight, more than %.1f%% (set MaxRemovedShare, publish --max-removed-share, to allow it for this change)",
			ErrTooMuchRemoved, 100*removed, 100*limit)
	}
	return nil
}

// removedShare returns the fraction of the total weight of from that the
// change to to removes, node by node by name (see Validate); both are
// normalized.
func removedShare(from, to []ring.Node) float64 {
	after := make(map[string]float64, len(to))
	for _, n := range to {
		after[n.Name] = n.Weight
	}
	total, removed := 0.0, 0.0
	for _, n := range from {
		total += n.Weight
		removed += max(n.Weight-after[n.Name], 0)
	}
	return removed / total
}

// digestMask keeps 53 bits of a digest, so that a version exports exactly
// as a float64 (a Prometheus gauge).
const digestMask = 1<<53 - 1

// Digest returns a hash of what t places and how it migrates (nodes by
// name with their addresses and weights, the equalization, the
// migration), not of its Version or MaxRemovedShare: equal in every
// process that sees the same nodes, whatever their order. It is positive
// and below 2^53.
func (t *Topology) Digest() int64 {
	h := fnv.New64a()
	h.Write(t.canonical())
	return max(int64(h.Sum64()&digestMask), 1)
}

// Equal reports whether t and u place and migrate alike: the same nodes by
// name, addresses and weights (0 and 1 alike), in any order, the same
// equalization and the same migration; Version and MaxRemovedShare aside.
func (t *Topology) Equal(u *Topology) bool {
	if t == nil || u == nil {
		return t == u
	}
	return bytes.Equal(t.canonical(), u.canonical())
}

// canonical encodes what Digest and Equal compare, in an order-free form.
func (t *Topology) canonical() []byte {
	var b []byte
	put := func(s string) {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	nodes := func(ns []ring.Node) {
		if n, err := normalized(ns); err == nil {
			ns = n
		} // else as given: such a topology fails Check, and is equal only to itself
		put(strconv.Itoa(len(ns)))
		for _, n := range ns {
			put(n.Name)
			put(n.Addr)
			put(strconv.FormatFloat(n.Weight, 'g', -1, 64))
		}
	}
	nodes(t.Nodes)
	// The tolerances only when set, so that the digests of classic
	// topologies are those they had before equalization existed.
	if t.Equalize != 0 {
		put("equalize")
		put(strconv.FormatFloat(t.Equalize, 'g', -1, 64))
	}
	if m := t.Migration; m != nil {
		put("migration")
		nodes(m.From)
		put(string(m.FromKind))
		put(m.FromHash)
		put(m.FromHashTag)
		put(m.Start.UTC().Format(time.RFC3339Nano))
		put(m.Window.String())
		if m.FromEqualize != 0 {
			put("from equalize")
			put(strconv.FormatFloat(m.FromEqualize, 'g', -1, 64))
		}
	}
	return b
}
