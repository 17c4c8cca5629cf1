package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimulateLoadLimit runs the short simulation with and without
// --load-limit: the guard caps every mode's loads per step at the limit
// (6 per second, 60 per 10 s step) where mod-N and the ring went past it
// without, and throttles the reads it refuses.
func TestSimulateLoadLimit(t *testing.T) {
	type output struct {
		LoadLimit float64 `json:"load_limit"`
		Modes     []struct {
			Mode      string `json:"mode"`
			Throttled int64  `json:"throttled"`
			Steps     []struct {
				Loads     int64 `json:"loads"`
				Throttled int64 `json:"throttled"`
			} `json:"steps"`
		} `json:"modes"`
	}
	run := func(args ...string) output {
		t.Helper()
		// The short run, cut to the reshard's first 12 steps, where the peaks are.
		code, out, errOut := runCmd(t, append(append([]string{"simulate", "--quiet", "--json"}, short...), append([]string{"--steps", "20"}, args...)...)...)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var o output
		if err := json.Unmarshal([]byte(out), &o); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return o
	}
	peak := func(o output, mode string) (loads, throttled int64) {
		for _, m := range o.Modes {
			if m.Mode == mode {
				for _, s := range m.Steps {
					loads = max(loads, s.Loads)
				}
				return loads, m.Throttled
			}
		}
		t.Fatalf("no mode %s", mode)
		return 0, 0
	}
	const budget = 60
	free := run("--modes", "mod-N,ring")
	svg := filepath.Join(t.TempDir(), "limited.svg")
	guarded := run("--load-limit", "6", "--svg", svg)
	if guarded.LoadLimit != 6 {
		t.Errorf("load_limit %v, want 6", guarded.LoadLimit)
	}
	for _, mode := range []string{"mod-N", "ring"} {
		freeLoads, freeThrottled := peak(free, mode)
		loads, throttled := peak(guarded, mode)
		if freeLoads <= budget || freeThrottled != 0 {
			t.Errorf("%s without a guard: peak %d loads, %d throttled; want past %d, none throttled", mode, freeLoads, freeThrottled, budget)
		}
		if loads != budget || throttled == 0 {
			t.Errorf("%s with --load-limit 6: peak %d loads a step, %d throttled; want %d and some", mode, loads, throttled, budget)
		}
	}
	if loads, throttled := peak(guarded, "dual-ring"); loads > budget || throttled != 0 {
		t.Errorf("dual-ring with the guard: peak %d loads, %d throttled; want under the limit, none throttled", loads, throttled)
	}
	chart, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(chart), `class="load-limit"`) || !strings.Contains(string(chart), "load limit: 60 loads per step") {
		t.Error("the chart does not show the load limit")
	}
	checkSVG(t, svg, []string{"mod-N", "ring", "dual-ring", "dual-ring+sweep"}, 20)

	if code, _, errOut := runCmd(t, "simulate", "--quiet", "--load-limit", "-1"); code != exitUsage || !strings.Contains(errOut, "--load-limit") {
		t.Errorf("--load-limit -1: exit %d, %q; want a usage error naming the flag", code, errOut)
	}
}
