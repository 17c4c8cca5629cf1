package main

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
	"github.com/shardcache/shardcache/ring"
)

// TestPlanEqualize checks plan --equalize against the ring: every node's
// deviation, printed and in the JSON, within the tolerance, where the
// classic ring's is not; the balance and the cost of equalizing as
// ring.CompareEqualization computes them.
func TestPlanEqualize(t *testing.T) {
	const tol = 0.01
	from := "cache-1=h:1,cache-2=h:2,cache-3=h:3,cache-4=h:4,cache-5=h:5,cache-6=h:6,cache-7=h:7,cache-8=h:8"
	to := from + ",cache-9=h:9"
	fromNodes, toNodes := mustNodes(t, from), mustNodes(t, to)
	classic, err := ring.New(toNodes)
	if err != nil {
		t.Fatal(err)
	}
	if classic.Deviation() <= tol {
		t.Fatalf("the classic ring of --to is within %v of the fair shares already: the test proves nothing", tol)
	}
	want, err := ring.CompareEqualization(fromNodes, toNodes, ring.WithEqualize(tol))
	if err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCmd(t, "plan", "--json", "--from", from, "--to", to, "--equalize", "0.01")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep planReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, n := range rep.Nodes {
		for _, s := range []*planSide{n.Before, n.After} {
			if s != nil && (math.Abs(s.Deviation) > tol || math.Abs(s.Deviation-(s.Share/s.Ideal-1)) > 1e-12) {
				t.Errorf("%s: share %v, ideal %v, deviation %v: want share/ideal-1, within %v", n.Name, s.Share, s.Ideal, s.Deviation, tol)
			}
		}
	}
	e := rep.Equalization
	switch {
	case rep.Equalize != tol || e == nil:
		t.Fatalf("equalize %v, equalization %+v: want %v and the comparison", rep.Equalize, e, tol)
	case rep.Balance.Before != want.Equalized.Before || rep.Balance.After != want.Equalized.After:
		t.Errorf("balance %+v, want the equalized rings' %v and %v", rep.Balance, want.Equalized.Before, want.Equalized.After)
	case e.Minimum != want.Minimum || e.Classic.Moved != want.Classic.Moved || e.Equalized.Moved != want.Equalized.Moved ||
		e.Classic.After != want.Classic.After || e.Equalized.Least != want.Equalized.Least:
		t.Errorf("equalization %+v, want %+v", *e, want)
	case rep.Moved != e.Equalized.Moved || e.OverMinimum != e.Equalized.Moved/e.Minimum || e.OverClassic != e.Equalized.Moved/e.Classic.Moved:
		t.Errorf("moved %v, equalization %+v: want the equalized ring's, and the ratios", rep.Moved, *e)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	eq, _ := raw["equalization"].(map[string]any)
	for _, field := range []string{"tolerance", "minimum", "classic", "equalized", "over_classic", "over_minimum"} {
		if _, ok := eq[field]; !ok {
			t.Errorf("equalization lacks %q: %v", field, eq)
		}
	}
	if _, ok := raw["balance"].(map[string]any)["after"]; !ok {
		t.Errorf("the JSON lacks balance.after:\n%s", out)
	}

	// The text: every node's off columns within the tolerance, the cost.
	code, out, errOut = runCmd(t, "plan", "--from", from, "--to", to, "--equalize", "0.01")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 11 || f[3] != "→" || !strings.HasPrefix(f[0], "cache-") {
			continue
		}
		rows++
		for _, cell := range []string{f[7], f[10]} { // name addr w → w share ideal off share ideal off
			if cell == "-" {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSuffix(cell, "%"), 64)
			if err != nil || math.Abs(v) > 100*tol {
				t.Errorf("node %s: off %q, want within ±1%%: %q", f[0], cell, line)
			}
		}
	}
	if rows != 9 {
		t.Errorf("%d node rows, want 9:\n%s", rows, out)
	}
	for _, s := range []string{
		"Balance (ring equalized to 1.00%): the node furthest from its fair share is " + pct(want.Equalized.Before, 2) + " off it before, " + pct(want.Equalized.After, 2) + " after",
		"Equalizing to 1.00% costs on this change: " + pct(want.Equalized.Moved, 2) + " of keys move, against " + pct(want.Classic.Moved, 2) + " on the classic ring",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}

	// Without --equalize: the classic rings' balance, and no comparison.
	code, out, _ = runCmd(t, "plan", "--json", "--from", from, "--to", to)
	rep = planReport{}
	if err := json.Unmarshal([]byte(out), &rep); code != exitOK || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if rep.Equalization != nil || rep.Equalize != 0 || rep.Balance.After != classic.Deviation() {
		t.Errorf("classic plan: equalize %v, equalization %+v, balance %+v; want the classic ring's deviation %v", rep.Equalize, rep.Equalization, rep.Balance, classic.Deviation())
	}
}

// TestEqualizeFlag checks that every command with --equalize refuses what
// the client refuses, and that simulate's rings are equalized.
func TestEqualizeFlag(t *testing.T) {
	for _, cmd := range [][]string{
		{"plan"},
		{"simulate", "--quiet"},
		{"sweep", "--from", "h:1", "--to", "h:2"},
		{"balance", "--nodes", "h:1"},
	} {
		for _, bad := range []string{"-0.01", "NaN", "1", "2"} {
			code, _, errOut := runCmd(t, append(cmd, "--equalize", bad)...)
			if code != exitUsage || !strings.Contains(errOut, "equalize") {
				t.Errorf("%s --equalize %s: exit %d, %q; want %d, naming --equalize", cmd[0], bad, code, errOut, exitUsage)
			}
		}
	}

	code, out, errOut := runCmd(t, "simulate", "--json", "--modes", "ring", "--equalize", "0.01",
		"--keys", "100", "--requests", "50", "--steps", "3", "--reshard-at", "1")
	if code != exitOK {
		t.Fatalf("simulate: exit %d: %s", code, errOut)
	}
	var res struct {
		Modes []struct {
			Moved float64 `json:"moved"`
		} `json:"modes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Modes) != 1 {
		t.Fatalf("%v\n%s", err, out)
	}
	from, _ := ring.New(sim.DefaultFrom(), ring.WithEqualize(0.01))
	to, _ := ring.New(sim.DefaultTo(), ring.WithEqualize(0.01))
	classicFrom, _ := ring.New(sim.DefaultFrom())
	classicTo, _ := ring.New(sim.DefaultTo())
	if got, want := res.Modes[0].Moved, ring.Moved(from, to); got != want || want == ring.Moved(classicFrom, classicTo) {
		t.Errorf("simulate --equalize: moved %v, want the equalized rings' %v (the classic rings' %v)", got, want, ring.Moved(classicFrom, classicTo))
	}
}
