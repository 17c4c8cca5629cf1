package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// waveArgs is a short expiry wave: 20 hot keys of 500, read by most of 4
// processes at the wave's step 3 of 5.
var waveArgs = []string{"simulate", "--quiet", "--expiry-wave", "20", "--zipf-v", "1", "--keys", "500", "--requests", "500",
	"--writes", "0", "--steps", "5", "--reshard-at", "3", "--processes", "4", "--load-time", "100ms", "--modes", "plain,swr"}

// TestSimulateExpiryWave: with StaleWhileRevalidate the database's peak at
// the wave is well below plain GetOrLoad's, by the ratio the run's own
// readers allow (each key loaded once against once per process that read
// it), with the hit rate held; the text prints the ratio, the JSON the
// fields.
func TestSimulateExpiryWave(t *testing.T) {
	code, out, errOut := runCmd(t, append(waveArgs, "--json")...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var o struct {
		ExpiryWave int `json:"expiry_wave"`
		Processes  int `json:"processes"`
		Modes      []struct {
			Mode          string  `json:"mode"`
			SteadyDBLoad  float64 `json:"steady_db_load"`
			SteadyHitRate float64 `json:"steady_hit_rate"`
			MinHitRate    float64 `json:"min_hit_rate"`
			PeakDBLoad    int64   `json:"peak_db_load"`
			PeakDBStep    int     `json:"peak_db_step"`
			WaveKeys      int     `json:"wave_keys"`
			WaveReaders   int     `json:"wave_readers"`
			PeakVsPlain   float64 `json:"peak_vs_plain"`
		} `json:"modes"`
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if o.ExpiryWave != 20 || o.Processes != 4 || len(o.Modes) != 2 || o.Modes[0].Mode != "plain" || o.Modes[1].Mode != "swr" {
		t.Fatalf("output: wave %d, %d processes, modes %+v", o.ExpiryWave, o.Processes, o.Modes)
	}
	plain, swr := o.Modes[0], o.Modes[1]
	t.Logf("plain peak %d (steady %.0f), swr peak %d (steady %.0f): ratio %.3f; %d keys, %d readers",
		plain.PeakDBLoad, plain.SteadyDBLoad, swr.PeakDBLoad, swr.SteadyDBLoad, swr.PeakVsPlain, swr.WaveKeys, swr.WaveReaders)
	if plain.WaveReaders < 2*plain.WaveKeys {
		t.Fatalf("%d readers of %d keys: the wave is no herd", plain.WaveReaders, plain.WaveKeys)
	}
	ideal := (swr.SteadyDBLoad + float64(swr.WaveKeys)) / (plain.SteadyDBLoad + float64(plain.WaveReaders))
	if plain.PeakDBStep != 3 || swr.PeakVsPlain > (1+ideal)/2 || swr.PeakVsPlain != float64(swr.PeakDBLoad)/float64(plain.PeakDBLoad) {
		t.Errorf("swr's peak %d at ×%.2f of plain's %d (step %d); want at most ×%.2f (the run's ideal ×%.2f)",
			swr.PeakDBLoad, swr.PeakVsPlain, plain.PeakDBLoad, plain.PeakDBStep, (1+ideal)/2, ideal)
	}
	if swr.MinHitRate < swr.SteadyHitRate-0.01 || plain.MinHitRate > plain.SteadyHitRate-0.05 {
		t.Errorf("hit rates: swr min %.3f (steady %.3f), plain min %.3f (steady %.3f)", swr.MinHitRate, swr.SteadyHitRate, plain.MinHitRate, plain.SteadyHitRate)
	}

	code, out, errOut = runCmd(t, waveArgs...)
	if code != exitOK || !strings.Contains(out, "The database's peak with swr against plain GetOrLoad: ") || !strings.Contains(out, "← the wave expires") {
		t.Errorf("text: exit %d\n%s%s", code, out, errOut)
	}
}

// TestSimulateExpiryWaveFlags: bad wave flags are usage errors that name
// the flag.
func TestSimulateExpiryWaveFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--expiry-wave", "-1"}, "--expiry-wave -1"},
		{[]string{"--expiry-wave", "20", "--keys", "10"}, "--expiry-wave 20"},
		{[]string{"--expiry-wave", "5", "--processes", "0"}, "--processes 0"},
		{[]string{"--expiry-wave", "5", "--load-time", "0s"}, "--load-time 0s"},
		{[]string{"--processes", "3"}, "--processes is the expiry wave's"},
		{[]string{"--load-time", "10ms"}, "--load-time is the expiry wave's"},
		{[]string{"--expiry-wave", "5", "--modes", "plain,ring"}, `"ring": with --expiry-wave`},
		{[]string{"--expiry-wave", "5", "--modes", "swr,swr"}, "swr twice"},
	} {
		code, _, errOut := runCmd(t, append([]string{"simulate", "--quiet"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, want %d and %q in:\n%s", tc.args, code, exitUsage, tc.want, errOut)
		}
	}
	code, out, _ := runCmd(t, "help", "simulate")
	if code != exitOK || !strings.Contains(out, "-expiry-wave") || !strings.Contains(out, "swr+lease") {
		t.Errorf("help simulate: exit %d, lacks the expiry wave:\n%s", code, out)
	}
}
