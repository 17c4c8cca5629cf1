package topology

import (
	"testing"
	"time"
)

func TestPhaseAt(t *testing.T) {
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	topo := four()
	if p := topo.PhaseAt(start); p != Steady || topo.Late(start) {
		t.Errorf("no migration: %v, late %v; want steady, never late", p, topo.Late(start))
	}
	topo.Migration = &Migration{From: four().Nodes[:3], Start: start, Window: time.Hour}
	end := start.Add(time.Hour)
	for _, tc := range []struct {
		at   time.Time
		want Phase
	}{
		{start.Add(-time.Minute), Before},
		{start, During},
		{end.Add(-time.Nanosecond), During},
		{end, After},
	} {
		if got := topo.PhaseAt(tc.at); got != tc.want {
			t.Errorf("PhaseAt(%v) = %v, want %v", tc.at, got, tc.want)
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
