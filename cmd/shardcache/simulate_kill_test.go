package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// killArgs is a short kill run: d of 8 nodes dies at step 8 and returns
// empty at step 20 of 40, over 1000 keys, with a gutter TTL of 6 steps.
var killArgs = []string{"simulate", "--quiet", "--kill", "d@8-20", "--keys", "1000", "--zipf-v", "40", "--requests", "500",
	"--ttl", "5m", "--steps", "40", "--workers", "4", "--gutter-ttl", "1m"}

// killOutput is the part of a kill run's --json output the tests read.
type killOutput struct {
	Kill struct {
		Node          string  `json:"node"`
		At            int     `json:"at"`
		ReturnAt      int     `json:"return_at"`
		RequestsShare float64 `json:"requests_share"`
		Gutter        int     `json:"gutter"`
		GutterTTL     float64 `json:"gutter_ttl_seconds"`
		Replicas      int     `json:"replicas"`
	} `json:"kill"`
	Modes []struct {
		Mode          string  `json:"mode"`
		SteadyHitRate float64 `json:"steady_hit_rate"`
		SteadyDBLoad  float64 `json:"steady_db_load"`
		Stale         int64   `json:"stale"`
		Kill          struct {
			OutageHitRate     float64 `json:"outage_hit_rate"`
			OutageHitOfSteady float64 `json:"outage_hit_of_steady"`
			OutagePeakDBLoad  int64   `json:"outage_peak_db_load"`
			ReturnMinHitRate  float64 `json:"return_min_hit_rate"`
			RecoveredStep     int     `json:"recovered_step"`
			Guttered          int64   `json:"guttered"`
			ReplicaMissed     int64   `json:"replica_missed"`
			CallerErrors      int64   `json:"caller_errors"`
			CacheErrors       int64   `json:"cache_errors"`
		} `json:"kill"`
		Steps []struct {
			HitRate     float64 `json:"hit_rate"`
			DBLoad      int64   `json:"db_load"`
			Errors      int64   `json:"errors"`
			CacheErrors int64   `json:"cache_errors"`
		} `json:"steps"`
	} `json:"modes"`
}

// TestSimulateKill: by default a kill run compares FailOpen alone with a
// gutter node and with 2 replicas. With the gutter, the outage's hit rate
// (after its first step) is at least 95% of steady and the database's peak
// well below FailOpen's; FailOpen's hit rate is steady less d's share of
// the requests; with replicas the hit rate of every step from the kill on
// stays at 99% of steady (less a steady step's chance), with no error;
// after the return all recover. The text marks the kill and the return,
// the chart draws both.
func TestSimulateKill(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "kill.svg")
	code, out, errOut := runCmd(t, append(killArgs, "--json", "--svg", svg)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var o killOutput
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if o.Kill.Node != "d" || o.Kill.At != 8 || o.Kill.ReturnAt != 20 || o.Kill.Gutter != 1 || o.Kill.GutterTTL != 60 || o.Kill.Replicas != 2 ||
		len(o.Modes) != 3 || o.Modes[0].Mode != "failopen" || o.Modes[1].Mode != "gutter" || o.Modes[2].Mode != "replicas" {
		t.Fatalf("kill %+v, modes %d", o.Kill, len(o.Modes))
	}
	open, gutter, repl := o.Modes[0], o.Modes[1], o.Modes[2]
	for _, m := range o.Modes {
		k := m.Kill
		t.Logf("%-8s steady %.3f, outage %.3f (%.3f of steady), peak %d (steady %.0f); return low %.3f, recovered at %d; guttered %d",
			m.Mode, m.SteadyHitRate, k.OutageHitRate, k.OutageHitOfSteady, k.OutagePeakDBLoad, m.SteadyDBLoad, k.ReturnMinHitRate, k.RecoveredStep, k.Guttered)
		if m.Stale != 0 || k.CallerErrors != m.Steps[8].Errors-m.Steps[8].CacheErrors {
			t.Errorf("%s: %d stale reads, %d errors to callers, not all in the kill step", m.Mode, m.Stale, k.CallerErrors)
		}
		if k.RecoveredStep < 20 || k.RecoveredStep > 35 {
			t.Errorf("%s: back to 99%% of steady at step %d; want it after the return at 20, before the end", m.Mode, k.RecoveredStep)
		}
	}
	want := open.SteadyHitRate * (1 - o.Kill.RequestsShare)
	if d := open.Kill.OutageHitRate - want; d < -0.03 || d > 0.03 {
		t.Errorf("failopen: outage hit rate %.3f, want steady × (1 − d's %.3f of the requests) = %.3f ± 0.03", open.Kill.OutageHitRate, o.Kill.RequestsShare, want)
	}
	if gutter.Kill.OutageHitOfSteady < 0.95 || gutter.Kill.Guttered == 0 {
		t.Errorf("gutter: outage hit rate %.3f of steady (want ≥ 0.95), %d calls guttered", gutter.Kill.OutageHitOfSteady, gutter.Kill.Guttered)
	}
	if e, f := float64(gutter.Kill.OutagePeakDBLoad)-gutter.SteadyDBLoad, float64(open.Kill.OutagePeakDBLoad)-open.SteadyDBLoad; e > 2*f/3 {
		t.Errorf("the database's peak over its steady load: gutter %.0f, failopen %.0f; want the gutter's at most 2/3 of failopen's", e, f)
	}
	noise := 4 * math.Sqrt(repl.SteadyHitRate*(1-repl.SteadyHitRate)/500)
	for i, s := range repl.Steps[8:] {
		if s.HitRate < 0.99*repl.SteadyHitRate-noise || s.Errors != 0 {
			t.Errorf("replicas: step %d: hit rate %.3f (steady %.3f), %d errors; want 99%% of steady less %.3f, none", 8+i, s.HitRate, repl.SteadyHitRate, s.Errors, noise)
		}
	}
	if k := repl.Kill; k.OutageHitOfSteady < 0.99 || k.ReplicaMissed == 0 || k.CallerErrors != 0 || k.CacheErrors != 0 {
		t.Errorf("replicas: outage hit %.3f of steady (want ≥ 0.99), %d writes missed by d, %d errors to callers, %d around loads",
			k.OutageHitOfSteady, k.ReplicaMissed, k.CallerErrors, k.CacheErrors)
	}
	checkKillSVG(t, svg, []string{"failopen", "gutter", "replicas"}, 40)

	code, out, errOut = runCmd(t, killArgs...)
	if code != exitOK {
		t.Fatalf("text: exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"d of 8 nodes dies at step 8, returns empty at step 20 (2:00 later)\n1000 keys",
		"every TTL capped at 1m0s",
		"← d dies", "← d returns, empty",
		"mode  steady hit  steady DB  (max)  outage hit  of steady  outage peak",
		"gutter: 1 gutter node took ",
		"replicas: every key on 2 nodes (Options.Replicas, with FailOpen)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

// checkKillSVG checks a kill run's chart: well-formed, a series per mode in
// each panel, the kill and the return marked in both.
func checkKillSVG(t *testing.T, path string, modes []string, steps int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	series, lines := map[string]int{}, map[string]int{}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := map[string]string{}
		for _, a := range el.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch el.Name.Local {
		case "polyline":
			series[attr["data-panel"]+"/"+attr["data-mode"]] = len(strings.Fields(attr["points"]))
		case "line":
			lines[attr["class"]]++
		}
	}
	if lines["kill"] != 2 || lines["return"] != 2 || lines["reshard"] != 0 {
		t.Errorf("marks %v: want the kill and the return in each panel", lines)
	}
	for _, panel := range []string{"hit", "load"} {
		for _, m := range modes {
			if n := series[panel+"/"+m]; n != steps {
				t.Errorf("%s/%s: %d points, want %d", panel, m, n, steps)
			}
		}
	}
}

// TestSimulateKillFlags: bad kill flags are usage errors that name the
// flag.
func TestSimulateKillFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kill", "d"}, "--kill d: want NODE@STEP"},
		{[]string{"--kill", "@20"}, "--kill @20: want NODE@STEP"},
		{[]string{"--kill", "z@20"}, `--kill z@20: no node "z" in --from (a, b, c, d, e, f, g, h)`},
		{[]string{"--kill", "d@x"}, `--kill d@x: the kill step "x" is not a number`},
		{[]string{"--kill", "d@20-y"}, `--kill d@20-y: the return step "y" is not a number`},
		{[]string{"--kill", "d@0"}, "--kill d@0: the kill step 0 is out of range: want 1..119"},
		{[]string{"--kill", "d@120"}, "--kill d@120: the kill step 120 is out of range"},
		{[]string{"--kill", "d@10", "--steps", "10"}, "--kill d@10: the kill step 10 is out of range: want 1..9"},
		{[]string{"--kill", "d@50-20"}, "--kill d@50-20: the return step 20 is not after the kill step 50"},
		{[]string{"--kill", "d@50-50"}, "--kill d@50-50: the return step 50 is not after the kill step 50"},
		{[]string{"--kill", "d@50-120"}, "--kill d@50-120: the return step 120 is out of range: want 51..119"},
		{[]string{"--kill", "a@5", "--from", "a=h:1"}, "--kill a@5: a is the only node"},
		{[]string{"--kill", "d@20", "--to", "a=h:1"}, "--to: not with --kill"},
		{[]string{"--kill", "d@20", "--reshard-at", "5"}, "--reshard-at: not with --kill"},
		{[]string{"--kill", "d@20", "--expiry-wave", "5"}, "--expiry-wave: not with --kill"},
		{[]string{"--kill", "d@20", "--from-kind", "modulo"}, "--from-kind: not with --kill"},
		{[]string{"--kill", "d@20", "--redis", "127.0.0.1:1"}, "--redis: not with --kill (the simulator cannot stop and restart real servers"},
		{[]string{"--kill", "d@20", "--modes", "failopen,ring"}, `--modes: "ring": with --kill, want failopen, gutter or replicas`},
		{[]string{"--kill", "d@20", "--modes", "gutter,gutter"}, "--modes: gutter twice"},
		{[]string{"--kill", "d@20", "--gutter", "0"}, "--gutter 0: want 1..64"},
		{[]string{"--kill", "d@20", "--gutter-ttl", "0s"}, "--gutter-ttl 0s: want > 0"},
		{[]string{"--kill", "d@20", "--modes", "failopen", "--gutter", "2"}, "--gutter: the gutter mode is not in --modes"},
		{[]string{"--gutter", "2"}, "--gutter is a kill run's: give --kill"},
		{[]string{"--gutter-ttl", "1m"}, "--gutter-ttl is a kill run's: give --kill"},
		{[]string{"--replicas", "2"}, "--replicas is a kill run's: give --kill"},
		{[]string{"--kill", "d@20", "--replicas", "1"}, "--replicas 1: want 2..4 (at most 4, client.MaxReplicas, and the 8 nodes of --from)"},
		{[]string{"--kill", "d@20", "--replicas", "5"}, "--replicas 5: want 2..4"},
		{[]string{"--kill", "a@5", "--from", "a=h:1,b=h:2", "--replicas", "3"}, "--replicas 3: want 2..2 (at most 4, client.MaxReplicas, and the 2 nodes of --from)"},
		{[]string{"--kill", "d@20", "--modes", "failopen,gutter", "--replicas", "3"}, "--replicas: the replicas mode is not in --modes"},
		{[]string{"--kill", ""}, "--kill: empty"},
		{[]string{"--memory", "6MiB", "--kill", "d@20"}, "--kill: not with --memory"},
	} {
		code, _, errOut := runCmd(t, append([]string{"simulate", "--quiet"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, want %d and %q in:\n%s", tc.args, code, exitUsage, tc.want, errOut)
		}
	}
	code, out, _ := runCmd(t, "help", "simulate")
	for _, want := range []string{"--kill NODE@STEP[-STEP2]", "--gutter", "--gutter-ttl", "--replicas", "failopen", "Options.Replicas of --replicas"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("help simulate: exit %d, lacks %q:\n%s", code, want, out)
		}
	}
}
