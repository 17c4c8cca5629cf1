package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/health"
	"github.com/shardcache/shardcache/internal/node/replica"
	"github.com/shardcache/shardcache/ring"
)

// Replicas (Options.Replicas = R > 1): every key is kept on the R distinct
// nodes ring.LocateN gives it, nodes of zones not used yet first. The
// client places each key on its replica set (replica.Placement), which it
// handles as one node, a replica.Set over its members' clients (package
// internal/node/replica says what each call does there), so that routing,
// migrations (old set → new set: a key moves when its set changes) and
// sweeps work on sets as they do on nodes.
//
// The rule for a member that missed a write (it failed there, or the
// member was held down): its key is kept as the member's hint
// (gutter.Hints, replayed as a gutter's are: gutter.go), the member is held
// down at once, and before it serves again the probe deletes the hinted
// keys there (past
// DefaultGutterHints keys, flushes it), after replaySettle: a member that
// was paused, not killed, comes back with the values it held, and runs the
// commands it had read before its pause. So a member does not keep the old
// values of the keys written meanwhile, whether it is back or first in a
// key's read order; and since a write a member missed is not acknowledged
// (without FailOpen), no process reads a value older than an acknowledged
// write, the one that missed the hint included.

// MaxReplicas is the most copies of a key Options.Replicas may ask for.
const MaxReplicas = replica.MaxReplicas

// replaySettle is how long a replica that answers again waits before its
// hints are replayed: a paused server runs the commands it had read before
// its pause first, which a replay made before them would not undo.
const replaySettle = 100 * time.Millisecond

// repairWithin is how long after a read began its repair may still be
// sent.
func repairWithin(o *Options) time.Duration { return o.ReadTimeout + o.WriteTimeout }

// replicaTomb is the life of a replica set's tombstones: a repair sent
// within repairWithin of its read lands within its own round trip, well
// before the tombstone that refuses it ends.
func replicaTomb(o *Options) time.Duration {
	return max(5*time.Second, 2*(o.DialTimeout+o.ReadTimeout+o.WriteTimeout)+repairWithin(o))
}

// checkReplicas rejects the options Replicas does not work with yet.
func (o *Options) checkReplicas() error {
	switch r := o.Replicas; {
	case r < 0 || r > MaxReplicas:
		return fmt.Errorf("%w: Replicas %d (want 1 to %d)", ErrBadOptions, r, MaxReplicas)
	case r <= 1:
		return nil
	}
	for _, f := range []struct {
		set  bool
		name string
	}{
		{len(o.Gutter) > 0, "Gutter"}, {o.NearCache != nil, "NearCache"}, {o.Topology != nil, "Topology"},
		{o.Lease > 0, "Lease"}, {o.MetaLeases, "MetaLeases"}, {o.StaleWhileRevalidate > 0, "StaleWhileRevalidate"},
		{o.EarlyRefresh > 0, "EarlyRefresh"}, {o.FailureThreshold < 0, "a negative FailureThreshold"},
	} {
		if f.set {
			return fmt.Errorf("%w: Replicas with %s is not supported", ErrBadOptions, f.name)
		}
	}
	return nil
}

// newReplicaPlacement returns p placing each key on its Options.Replicas
// nodes (package internal/node/replica), its sets' clients made with the
// options' tombstones and repairs.
func newReplicaPlacement(p ring.Locator, o *Options) (*replica.Placement, error) {
	base, ok := p.(ring.LocatorN)
	if !ok {
		return nil, fmt.Errorf("%w: Replicas needs a placement that places replicas (ring.LocatorN), not %T", ErrBadOptions, p)
	}
	if n := len(base.Nodes()); n > replica.MaxNodes {
		return nil, fmt.Errorf("%w: Replicas over %d nodes", ErrBadOptions, n)
	}
	cfg := replica.Config{Tomb: replicaTomb(o), RepairWithin: repairWithin(o), Unreachable: unreachableErr}
	return replica.NewPlacement(base, o.Replicas, o.Zone, cfg), nil
}

// setConn returns the client of the replica set n of st's placements, or
// nil when n is not one.
func setConn(st *state, n ring.Node) node.Node {
	if !strings.HasPrefix(n.Addr, replica.AddrPrefix) {
		return nil
	}
	for _, p := range [2]ring.Locator{st.placement, st.oldPlacement()} {
		if rp, ok := p.(*replica.Placement); ok {
			if s := rp.Set(n.Addr, st.member); s != nil {
				return s
			}
		}
	}
	return nil
}

// member returns the client of the node at addr, nil without one.
func (st *state) member(addr string) replica.Member {
	if m := st.conns[addr]; m != nil {
		return m
	}
	return nil
}

// oldPlacement is the placement a migration moves from, nil without one.
func (st *state) oldPlacement() ring.Locator {
	if st.mig == nil {
		return nil
	}
	return st.mig.Old()
}

// unreachableErr reports whether err, from a call made under ctx, is a
// connection-level failure of the node (classify).
func unreachableErr(ctx context.Context, err error) bool {
	return health.Classify(ctx, err) == health.Unreachable
}

// A member is a replica set's member (replica.Member).
var _ replica.Member = (*member)(nil)

// Conn is the member's node client.
func (m *member) Conn() node.Node { return m.Node }

// RingNode is the member's node.
func (m *member) RingNode() ring.Node { return m.rn }

// Down reports whether the breaker holds the member down.
func (m *member) Down() bool { return m.h.Down() }

// Fail is the counted ErrNodeDown of a call of kind op to the member held
// down.
func (m *member) Fail(op node.Op) error { return m.down.Fail(op) }

// Missed records that m missed a write of keys that reached another
// member: m is held down at once if it did not answer (err is a
// connection-level failure), and the keys are m's hints, replayed as
// deletes before it serves again (member.Wrote: at once if m is up, the
// caller's context having ended, say, or the server answering with an
// error).
func (m *member) Missed(ctx context.Context, err error, keys ...string) {
	m.h.ReplicaMissed.Add(1)
	if err != ErrNodeDown && health.Classify(ctx, err) == health.Unreachable {
		m.h.HoldDown("a replica write missed", err)
	}
	m.Wrote(ctx, keys...)
}
