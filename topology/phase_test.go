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
	if _, ok := topo.NextChange(start); ok || topo.Late(start) {
		t.Error("no migration: a next change, or late")
	}
	topo.Migration = &Migration{From: four().Nodes[:3], Start: start, Window: time.Hour}
	for _, tc := range []struct {
		at   time.Time
		want Phase
		next time.Time
	}{
		{start.Add(-time.Minute), Before, start},
		{start, During, start.Add(time.Hour)},
		{start.Add(59 * time.Minute), During, start.Add(time.Hour)},
		{start.Add(time.Hour), After, time.Time{}},
	} {
		if got := topo.PhaseAt(tc.at); got != tc.want {
			t.Errorf("PhaseAt(%v) = %v, want %v", tc.at, got, tc.want)
		}
		if next, _ := topo.NextChange(tc.at); !next.Equal(tc.next) {
			t.Errorf("NextChange(%v) = %v, want %v", tc.at, next, tc.next)
		}
	}
	if topo.Late(start.Add(-time.Nanosecond)) || !topo.Late(start) || !topo.Late(start.Add(2*time.Hour)) {
		t.Error("Late: want false before the start, true from it")
	}
	topo.Migration.Window = 0 // a cut-over
	if topo.PhaseAt(start.Add(-1)) != Before || topo.PhaseAt(start) != After {
		t.Error("a zero window goes from before to after at the start")
	}
}
