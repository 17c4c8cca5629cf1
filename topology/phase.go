package topology

import "time"

// DefaultClockSkew is how far apart the clocks of two processes of a fleet
// are assumed to be at most, when a client is not told otherwise. NTP keeps
// a fleet within milliseconds; a second leaves room. The protocol is
// correct only if it holds (see the package doc, "Clocks").
const DefaultClockSkew = time.Second

// Phase is where a process stands in a topology's rollout at an instant;
// see the package doc for what a process does in each.
type Phase int

// The phases, in the order they come.
const (
	// Steady: the topology has no migration. The new placement alone.
	Steady Phase = iota
	// Before the start: read the old placement; a write sets the old owner
	// and deletes on the new one; a delete goes to both.
	Before
	// During the window: read the new owner first, fall back to the old
	// one and backfill the new; write and delete both.
	During
	// After the window: read the new placement alone.
	After
)

// String returns the phase's name in lower case.
func (p Phase) String() string {
	switch p {
	case Before:
		return "before start"
	case During:
		return "during window"
	case After:
		return "after window"
	}
	return "steady"
}

// PhaseAt returns the phase of t at now: Steady without a migration,
// Before until Migration.Start, During until Migration.End, After from
// then. A zero window goes from Before to After at the start.
func (t *Topology) PhaseAt(now time.Time) Phase {
	m := t.Migration
	switch {
	case m == nil:
		return Steady
	case now.Before(m.Start):
		return Before
	case now.Before(m.End()):
		return During
	}
	return After
}

// Late reports whether a process that received t at received got it after
// its migration started: it ran the old placement alone while others were
// already reading the new one, and must repair before it serves (see the
// package doc, "A late process"). A topology without a migration is never
// late.
func (t *Topology) Late(received time.Time) bool {
	return t.Migration != nil && !received.Before(t.Migration.Start)
}
