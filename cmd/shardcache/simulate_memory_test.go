package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSimulateMemory runs the memory scenario from the command line: d, of
// a quarter of the others' memory, evicts as is and not once re-weighted,
// in the table and in --json.
func TestSimulateMemory(t *testing.T) {
	args := []string{"simulate", "--quiet", "--from", "a=h:1,b=h:2,c=h:3,d=h:4", "--memory", "6MiB,d=1.5MiB"}
	code, out, errOut := runCmd(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("\n%s", out)
	for _, want := range []string{"Re-weighted at step 20 with shardcache balance's proposal", "← re-weighted", "d=h:4*0.2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	code, out, _ = runCmd(t, append(args, "--json")...)
	var res struct {
		AsIs       memFleetJSON `json:"as_is"`
		Reweighted memFleetJSON `json:"reweighted"`
	}
	if err := json.Unmarshal([]byte(out), &res); code != exitOK || err != nil {
		t.Fatalf("--json: exit %d, %v", code, err)
	}
	if d, e := res.AsIs.Nodes[3], res.Reweighted.Nodes[3]; d.Name != "d" || d.Evictions == 0 || e.Evictions != 0 {
		t.Errorf("d evicted %d as is, %d re-weighted; want some, then none", d.Evictions, e.Evictions)
	}
}

// memFleetJSON is what TestSimulateMemory reads of a fleet in --json.
type memFleetJSON struct {
	Nodes []struct {
		Name      string
		Evictions int64
	}
}

// TestSimulateMemoryBadInput: what the memory scenario refuses, with exit 2.
func TestSimulateMemoryBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory", "6MiB", "--to", "a=h:1"}, "--to: not with --memory"},
		{[]string{"--memory", "6MiB", "--redis", "h:1"}, "--redis"},
		{[]string{"--value-size", "10"}, "only with --memory"},
		{[]string{"--memory", "lots"}, `size "lots"`},
		{[]string{"--memory", "0"}, "above 0"},
		{[]string{"--from", "a=h:1,b=h:2", "--memory", "a=1MiB"}, "no limit for node b"},
		{[]string{"--from", "a=h:1", "--memory", "z=1MiB,1MiB"}, `no node "z"`},
		{[]string{"--memory", "1MiB,2MiB"}, "two sizes"},
		{[]string{"--memory", "1MiB", "--value-size", "-1"}, "--value-size"},
	} {
		code, _, errOut := runCmd(t, append([]string{"simulate", "--quiet"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "64MiB": 64 << 20, "1.5 GB": 1.5e9, "2kib": 2048, "10B": 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}
