// Package migration is the dual-ring resharding policy: while a migration is
// active, which owners a key has, when a read falls back to the old owner,
// how long a backfilled copy may live, and the counters that show how the
// migration is going.
//
// A migration moves keys from an old placement to a new one. While its
// window is open, reads ask the new owner first and fall back to the old
// owner on a miss, backfilling the new owner with what they find; writes and
// deletes go to both owners. When the window has passed the old placement is
// dropped, and whatever only the old owners hold is out of reach.
//
// So the window must last until every key that must survive is on its new
// owner. With a sweep (client.Sweep), which copies every moved key with its
// type and remaining TTL while the window is open, the window must cover the
// rollout of the new configuration to every process, plus the sweep
// ("shardcache plan" estimates its duration). Without a sweep, only the keys
// read or written during the window reach their new owner: the window must
// then last the longest TTL, by when every other key written before the
// start has expired, and keys without expiry (counters, flags, sessions
// without a TTL) that nobody reads in the window are lost at its end.
//
// A fleet of processes that runs one migration, each from whenever it
// learned of it (package topology), needs more than the window: phases.
// Before the start, reads keep to the old placement while writes also
// leave tombstones on the new owners (which must hold no value yet: a
// process still on the old placement would leave it stale); backfills
// begin only once every clock has passed the start (WithSkew); and writes
// keep reaching the old owners until every clock has passed the end. A
// migration of one process (the client's Reshard) starts now and has no
// skew: its window alone.
//
// The package computes; it does no I/O. The client applies the policy.
package migration

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/twmb/murmur3"

	"github.com/shardcache/shardcache/ring"
)

// ErrBadWindow is returned for a negative window.
var ErrBadWindow = errors.New("shardcache/migration: negative window")

// ErrNoPlacement is returned for a nil placement, or one without nodes.
var ErrNoPlacement = errors.New("shardcache/migration: no placement")

// Migration is an immutable description of one resharding.
type Migration struct {
	old, new ring.Locator
	start    time.Time
	end      time.Time
	skew     time.Duration
	moved    float64

	// Counters is shared by every copy of the migration's state; the client
	// adds to it as it applies the policy.
	Counters *Counters
}

// Option configures a Migration.
type Option func(*Migration)

// WithSkew declares that the clocks of the processes running the migration
// are at most d apart (topology.DefaultClockSkew, say): backfills begin at
// start+d, and writes keep reaching the old owners until end+d.
func WithSkew(d time.Duration) Option {
	return func(m *Migration) { m.skew = max(d, 0) }
}

// New describes a migration from old to new that starts at start and lasts
// window. A zero window is a cut-over: the migration is over as it starts.
func New(old, new ring.Locator, start time.Time, window time.Duration, opts ...Option) (*Migration, error) {
	if window < 0 {
		return nil, fmt.Errorf("%w: %v", ErrBadWindow, window)
	}
	for _, p := range []struct {
		name string
		loc  ring.Locator
	}{{"old", old}, {"new", new}} {
		if p.loc == nil || len(p.loc.Nodes()) == 0 {
			return nil, fmt.Errorf("%w: the %s placement has no nodes", ErrNoPlacement, p.name)
		}
	}
	m := &Migration{
		old: old, new: new,
		start: start, end: start.Add(window),
		moved:    Moved(old, new),
		Counters: &Counters{},
	}
	for _, o := range opts {
		o(m)
	}
	return m, nil
}

// Moved returns the exact fraction of keys whose owner differs between two
// placements: by name when both are *ring.Ring (ring.Moved), else by server
// when ring.CompareExact can compute it (Ketama, Modulo and Ring, such as a
// migration off gomemcache or twemproxy); NaN (unknown) otherwise.
func Moved(old, new ring.Locator) float64 {
	o, ok1 := old.(*ring.Ring)
	n, ok2 := new.(*ring.Ring)
	if ok1 && ok2 {
		return ring.Moved(o, n)
	}
	if c, ok := ring.CompareExact(old, new); ok {
		return c.Moved
	}
	return math.NaN()
}

// Old returns the placement keys move from.
func (m *Migration) Old() ring.Locator { return m.old }

// New returns the placement keys move to.
func (m *Migration) New() ring.Locator { return m.new }

// Start returns when the migration started.
func (m *Migration) Start() time.Time { return m.start }

// End returns when the migration is over: start + window.
func (m *Migration) End() time.Time { return m.end }

// Skew returns the clock skew the migration allows for (WithSkew).
func (m *Migration) Skew() time.Duration { return m.skew }

// Active reports whether both placements are in use at now: before the
// window and in it, and for the skew after it, while writes still reach
// the old owners.
func (m *Migration) Active(now time.Time) bool { return now.Before(m.end.Add(m.skew)) }

// InWindow reports whether now is inside the window, when reads fall back.
func (m *Migration) InWindow(now time.Time) bool {
	return !now.Before(m.start) && now.Before(m.end)
}

// Backfilling reports whether copies to new owners may be made at now:
// in the window, from start+skew.
func (m *Migration) Backfilling(now time.Time) bool {
	return !now.Before(m.start.Add(m.skew)) && now.Before(m.end)
}

// Route is where one key's operations go.
type Route struct {
	// New is the owner every operation asks first, the one a read asks:
	// the key's owner in the new placement, or before the start (Before)
	// in the old one.
	New ring.Node
	// Old is the other owner, valid when Dual is set: the old placement's,
	// or before the start the new one's.
	Old ring.Node
	// Dual is set while the two placements are in use (Active) and the two
	// owners are different servers (compared by Addr: that is where the
	// data is): writes and deletes reach both.
	Dual bool
	// Fallback: a read that misses on New asks Old (in the window).
	Fallback bool
	// Backfill: what a fallback finds on Old may be copied to New.
	Backfill bool
	// Before: the migration has not started. New is the old placement's
	// owner, which reads ask alone, and Old the new placement's, which must
	// hold no value yet: a write reaches it as a tombstone (and so does a
	// delete), never as a value.
	Before bool
}

// Route returns where key's operations go at time now.
func (m *Migration) Route(key string, now time.Time) Route {
	nw := m.new.Locate(key)
	if !m.Active(now) {
		return Route{New: nw}
	}
	old := m.old.Locate(key)
	switch {
	case old.Addr == nw.Addr:
		return Route{New: nw}
	case now.Before(m.start):
		return Route{New: old, Old: nw, Dual: true, Before: true}
	case now.Before(m.end):
		return Route{New: nw, Old: old, Dual: true, Fallback: true, Backfill: m.Backfilling(now)}
	}
	return Route{New: nw, Old: old, Dual: true} // the skew after the window
}

// RouteUpdate is Route for an operation that needs the key's present value
// where it runs (an increment, a touch, an append): until copies may be
// made (Backfilling), it runs where the value is, the old owner, as before
// the start.
func (m *Migration) RouteUpdate(key string, now time.Time) Route {
	if !now.Before(m.start) && now.Before(m.start.Add(m.skew)) {
		return m.Route(key, m.start.Add(-1))
	}
	return m.Route(key, now)
}

// BackfillTTL returns the TTL to give a copy of key's value found on the old
// owner when it is written to the new owner; ok is false when the copy is not
// worth writing because it would expire at once.
//
// When the remaining TTL is known (Redis PTTL; Memcached 1.6 and later with
// the meta command mg), the copy keeps it: remaining 0 means no expiry, and a
// key without expiry gains none. When it is unknown (Memcached without mg),
// the copy expires within the rest of the window, so that it never outlives
// its original by more than the window: a key without expiry then gains one
// (a sweep, which reads the expiry from the server's key listing, does not
// need this). Giving every copy the whole rest of the window would make them
// all expire at that instant, a burst of misses the ring was meant to avoid.
// So each copy expires at a point of the second half of the rest of the
// window, drawn from a hash of the key: spread out, deterministic, and never
// so soon that the next read of a key just copied has to ask the old owner
// again.
func (m *Migration) BackfillTTL(key string, now time.Time, remaining time.Duration, known bool) (ttl time.Duration, ok bool) {
	if known {
		return remaining, remaining >= 0
	}
	left := m.end.Sub(now)
	if left <= 0 {
		return 0, false
	}
	// A fraction in (1/2, 1] from the top 53 bits of the key's hash.
	frac := 0.5 + 0.5*float64(murmur3.StringSum64(key)>>11+1)/(1<<53)
	return time.Duration(frac * float64(left)), true
}

// Counters count what the client did while applying a migration. All fields
// are updated atomically.
type Counters struct {
	NewHits          atomic.Int64 // reads answered by the new owner
	FallbackHits     atomic.Int64 // new-owner misses found on the old owner
	FallbackMisses   atomic.Int64 // misses on both owners
	FallbackErrors   atomic.Int64 // old-owner reads that failed (counted as misses)
	Backfills        atomic.Int64 // copies written to the new owner
	BackfillsSkipped atomic.Int64 // copies not written: the new owner had a newer value, or the key's tombstone
	BackfillsDropped atomic.Int64 // asynchronous copies dropped: queue full, or failed
	DualWrites       atomic.Int64 // writes copied to the old owner
	DualWriteErrors  atomic.Int64 // copies to the old owner that failed
	DualDeletes      atomic.Int64 // deletes sent to the old owner too, and buried on the new one

	SweepScanned        atomic.Int64 // keys a sweep listed on the old nodes
	SweepCopied         atomic.Int64 // keys a sweep copied to their new owner (and kept)
	SweepAlreadyCopied  atomic.Int64 // keys a sweep found on their new owner with the same value: copied before
	SweepSkippedNewer   atomic.Int64 // keys a sweep found on their new owner with another value, or buried
	SweepSkippedUnmoved atomic.Int64 // keys a sweep listed whose owner does not change
	SweepGone           atomic.Int64 // moved keys that expired or were deleted before the sweep read them
	SweepFailed         atomic.Int64 // moved keys a sweep could not copy: a read or a write failed
}

// Snapshot is the value of Counters at one instant: the one list of the
// migration counters, which Status and the client's Stats embed.
type Snapshot struct {
	NewHits, FallbackHits, FallbackMisses, FallbackErrors int64
	Backfills, BackfillsSkipped, BackfillsDropped         int64
	DualWrites, DualWriteErrors, DualDeletes              int64

	SweepScanned, SweepCopied, SweepAlreadyCopied, SweepSkippedNewer int64
	SweepSkippedUnmoved, SweepGone, SweepFailed                      int64
}

// Snapshot reads every counter. The counters are read one after the other,
// so a snapshot taken under traffic may be a moment apart between fields.
func (c *Counters) Snapshot() Snapshot {
	return Snapshot{
		NewHits: c.NewHits.Load(), FallbackHits: c.FallbackHits.Load(),
		FallbackMisses: c.FallbackMisses.Load(), FallbackErrors: c.FallbackErrors.Load(),
		Backfills: c.Backfills.Load(), BackfillsSkipped: c.BackfillsSkipped.Load(),
		BackfillsDropped: c.BackfillsDropped.Load(),
		DualWrites:       c.DualWrites.Load(), DualWriteErrors: c.DualWriteErrors.Load(),
		DualDeletes:  c.DualDeletes.Load(),
		SweepScanned: c.SweepScanned.Load(), SweepCopied: c.SweepCopied.Load(),
		SweepAlreadyCopied: c.SweepAlreadyCopied.Load(),
		SweepSkippedNewer:  c.SweepSkippedNewer.Load(), SweepSkippedUnmoved: c.SweepSkippedUnmoved.Load(),
		SweepGone: c.SweepGone.Load(), SweepFailed: c.SweepFailed.Load(),
	}
}

// Add returns the sum of s and t, field by field: every counter, so that a
// counter added to Snapshot is summed without a second list.
func (s Snapshot) Add(t Snapshot) Snapshot {
	sum := s
	v, w := reflect.ValueOf(&sum).Elem(), reflect.ValueOf(t)
	for i := range v.NumField() {
		v.Field(i).SetInt(v.Field(i).Int() + w.Field(i).Int())
	}
	return sum
}

// Status is a snapshot of a migration, as the client reports it: its window,
// its placements and its counters.
type Status struct {
	Active     bool      // both placements in use: before the window, in it, and the skew after
	Start, End time.Time // the window; zero when there never was a migration
	OldNodes   []ring.Node
	NewNodes   []ring.Node
	Moved      float64 // exact fraction of keys whose owner changes; NaN if unknown

	Snapshot // the counters
}

// Status returns a snapshot of m at time now.
func (m *Migration) Status(now time.Time) Status {
	return Status{
		Active: m.Active(now), Start: m.start, End: m.end,
		OldNodes: m.old.Nodes(), NewNodes: m.new.Nodes(), Moved: m.moved,
		Snapshot: m.Counters.Snapshot(),
	}
}

// SweepStatus is the progress, then the totals, of one sweep of a
// migration's moved keys (client.Client.Sweep; client.SweepStatus is this
// type).
type SweepStatus struct {
	Nodes     int   // old nodes to sweep
	NodesDone int   // old nodes swept to the end
	Keys      int64 // estimated keys on the old nodes (DBSIZE, curr_items); 0 if unknown
	// Rate is the limit the sweep runs under, in listed keys per second on
	// each old node, as it applies client.SweepOptions.Rate (whose 0 is
	// the default, client.DefaultSweepRate); -1 for no limit.
	Rate int

	Scanned        int64 // keys listed
	Copied         int64 // keys copied to their new owner (and kept)
	AlreadyCopied  int64 // keys the new owner already had with the same value: copied before (an earlier sweep, another process's, a read's backfill)
	SkippedNewer   int64 // keys the new owner already had with another value (a newer write), or had buried (deleted meanwhile)
	SkippedUnmoved int64 // keys whose owner did not change, or that are not the old placement's to move from this node
	Gone           int64 // moved keys that expired or were deleted before they could be read
	Failed         int64 // moved keys not copied because a read or a write failed
}
