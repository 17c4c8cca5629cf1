package topology

import (
	"testing"
	"time"
)

func TestPhaseAt(t *testing.T) {
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	topo := four()
	if p := topo.PhaseAt(start); p != Steady {
		t.Errorf("no migration: %v, want steady", p)
	}
	if _, ok := topo.NextChange(start, 0); ok || topo.Late(start) || topo.StepAt(start, -1) != (Step{Phase: Steady}) {
		t.Error("no migration: a next change, late, or a step that writes the old owner")
	}
	topo.Migration = &Migration{From: four().Nodes[:3], Start: start, Window: time.Hour}
	end := start.Add(time.Hour)
	skew := time.Second
	for _, tc := range []struct {
		at   time.Time
		want Step
		next time.Time
	}{
		{start.Add(-time.Minute), Step{Before, false, true}, start},
		{start, Step{During, false, true}, start.Add(skew)},
		{start.Add(skew), Step{During, true, true}, end},
		{end.Add(-time.Nanosecond), Step{During, true, true}, end},
		{end, Step{After, false, true}, end.Add(skew)},
		{end.Add(skew), Step{After, false, false}, time.Time{}},
	} {
		if got := topo.StepAt(tc.at, skew); got != tc.want || topo.PhaseAt(tc.at) != tc.want.Phase {
			t.Errorf("StepAt(%v) = %+v, want %+v", tc.at, got, tc.want)
		}
		if next, _ := topo.NextChange(tc.at, skew); !next.Equal(tc.next) {
			t.Errorf("NextChange(%v) = %v, want %v", tc.at, next, tc.next)
		}
	}
	if got := topo.StepAt(start.Add(DefaultClockSkew/2), -1); got.Backfill {
		t.Errorf("StepAt with the default skew, half of it past the start: %+v, want no backfill yet", got)
	}
	if topo.Late(start.Add(-time.Nanosecond)) || !topo.Late(start) || !topo.Late(start.Add(2*time.Hour)) {
		t.Error("Late: want false before the start, true from it")
	}
	topo.Migration.Window = 0 // a cut-over
	if topo.PhaseAt(start.Add(-1)) != Before || topo.PhaseAt(start) != After {
		t.Error("a zero window goes from before to after at the start")
	}
	if next, _ := topo.NextChange(start, skew); !next.Equal(start.Add(skew)) || topo.StepAt(start, skew).Backfill {
		t.Errorf("a cut-over: next change %v, want the end of the dual writes at %v, and no backfill", next, start.Add(skew))
	}
}
