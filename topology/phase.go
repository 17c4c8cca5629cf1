package topology

import (
	"slices"
	"time"
)

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

// Step is what a process does at an instant, given that the other
// processes' clocks may be up to a skew away from its own: the phase, and
// the two things that wait for every clock to have passed a boundary.
type Step struct {
	Phase Phase
	// Backfill: copy what a read finds on the old owner to the new one.
	// During the window, from Start+skew only: until then a process whose
	// clock is behind may still be in Before, deleting on the new owner
	// what it replaces on the old one, and a backfill landing after its
	// delete would bring back the value it replaced.
	Backfill bool
	// WriteOld: writes and deletes still go to the old owner as well as
	// the new one. Before and During, and After until End+skew: until then
	// a process whose clock is behind may still read the old owner as a
	// fallback, and must find every write there.
	WriteOld bool
}

// StepAt returns the step of t at now for clocks within skew of each other
// (DefaultClockSkew when skew is negative, none when it is zero).
func (t *Topology) StepAt(now time.Time, skew time.Duration) Step {
	if skew < 0 {
		skew = DefaultClockSkew
	}
	s := Step{Phase: t.PhaseAt(now)}
	switch s.Phase {
	case Before:
		s.WriteOld = true
	case During:
		s.WriteOld = true
		s.Backfill = !now.Before(t.Migration.Start.Add(skew))
	case After:
		s.WriteOld = now.Before(t.Migration.End().Add(skew))
	}
	return s
}

// NextChange returns when StepAt(now, skew) changes next, and false when it
// never does (Steady, or After past End+skew): a client sets one timer for
// it rather than checking the clock on every call.
func (t *Topology) NextChange(now time.Time, skew time.Duration) (time.Time, bool) {
	if skew < 0 {
		skew = DefaultClockSkew
	}
	m := t.Migration
	if m == nil {
		return time.Time{}, false
	}
	at := []time.Time{m.Start, m.Start.Add(skew), m.End(), m.End().Add(skew)}
	slices.SortFunc(at, time.Time.Compare)
	cur := t.StepAt(now, skew)
	for _, a := range at {
		if now.Before(a) && t.StepAt(a, skew) != cur {
			return a, true
		}
	}
	return time.Time{}, false
}

// Late reports whether a process that received t at received got it after
// its migration started: it ran the old placement alone while others were
// already reading the new one, and must repair before it serves (see the
// package doc, "A late process"). A topology without a migration is never
// late.
func (t *Topology) Late(received time.Time) bool {
	return t.Migration != nil && !received.Before(t.Migration.Start)
}
