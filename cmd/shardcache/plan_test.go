package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
	"github.com/shardcache/shardcache/ring"
)

// TestPlanMatchesRing checks plan's figures against the ring's own
// analysis: Shares, IdealShares, Moved and Flows.
func TestPlanMatchesRing(t *testing.T) {
	from, to := "a=h1:1*2,b=h2:1,c=h3:1", "a=h1:1,b=h2:1,c=h3:1,d=h4:1*3"
	code, out, errOut := runCmd(t, "plan", "--json", "--from", from, "--to", to, "--vnodes", "64", "--hit-rate", "0.9")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep planReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	mustRing := func(list string) *ring.Ring {
		nodes, err := parseNodes(list)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ring.New(nodes, ring.WithVnodes(64))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before, after := mustRing(from), mustRing(to)
	if rep.Moved != ring.Moved(before, after) || math.Abs(rep.ServerMoved-rep.Moved) > 1e-12 {
		t.Errorf("moved %v (servers %v), ring.Moved %v", rep.Moved, rep.ServerMoved, ring.Moved(before, after))
	}
	if math.Abs(rep.MinMoved-0.5) > 1e-12 { // a loses 1/2-1/6, b and c 1/4-1/6 each: 1/3+1/12+1/12
		t.Errorf("min moved %v, want 0.5", rep.MinMoved)
	}
	sb, sa, ib, ia := before.Shares(), after.Shares(), before.IdealShares(), after.IdealShares()
	if len(rep.Nodes) != 4 {
		t.Fatalf("%d nodes, want 4", len(rep.Nodes))
	}
	for _, n := range rep.Nodes {
		if n.Before != nil && (n.Before.Share != sb[n.Name] || n.Before.Ideal != ib[n.Name]) {
			t.Errorf("%s before: %+v, ring %v %v", n.Name, *n.Before, sb[n.Name], ib[n.Name])
		}
		if n.After == nil || n.After.Share != sa[n.Name] || n.After.Ideal != ia[n.Name] {
			t.Errorf("%s after: %+v, ring %v %v", n.Name, n.After, sa[n.Name], ia[n.Name])
		}
	}
	if rep.Nodes[3].Name != "d" || rep.Nodes[3].Before != nil || rep.Nodes[3].After.Weight != 3 {
		t.Errorf("node d: %+v", rep.Nodes[3])
	}
	flows := ring.Flows(before, after)
	n := 0
	for _, f := range rep.Flows {
		if f.Share != flows[f.From][f.To] {
			t.Errorf("flow %s→%s %v, ring %v", f.From, f.To, f.Share, flows[f.From][f.To])
		}
		n++
	}
	for _, row := range flows {
		n -= len(row)
	}
	if n != 0 {
		t.Errorf("%d flows more than ring.Flows", n)
	}

	// After the switch: the hit rate loses the keys that moved, unless
	// the dual-ring migration finds them.
	modFrom, _ := modulo(mustNodes(t, from))
	modTo, _ := modulo(mustNodes(t, to))
	modMoved := ring.Compare(modFrom, modTo).Moved
	want := map[string][2]float64{
		"mod-N":     {0.9 * (1 - modMoved), (1 - 0.9*(1-modMoved)) / 0.1},
		"ring":      {0.9 * (1 - rep.Moved), (1 - 0.9*(1-rep.Moved)) / 0.1},
		"dual-ring": {0.9, 1},
	}
	for _, o := range rep.AfterSwitch {
		if w := want[o.Mode]; math.Abs(o.HitRate-w[0]) > 1e-12 || math.Abs(o.DBLoad-w[1]) > 1e-9 {
			t.Errorf("%s: hit rate %v, DB ×%v; want %v, ×%v", o.Mode, o.HitRate, o.DBLoad, w[0], w[1])
		}
	}
	if rep.ModNMoved != modMoved {
		t.Errorf("mod-N moved %v, want %v", rep.ModNMoved, modMoved)
	}
}

func mustNodes(t *testing.T, list string) []ring.Node {
	t.Helper()
	nodes, err := parseNodes(list)
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// TestPlanDefault checks the text report of the default change, 8 nodes
// down to 6.
func TestPlanDefault(t *testing.T) {
	code, out, errOut := runCmd(t, "plan")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	before, _ := ring.New(sim.DefaultFrom())
	after, _ := ring.New(sim.DefaultTo())
	for _, want := range []string{
		"Plan: 8 nodes → 6 nodes, 512 vnodes per unit of weight",
		"g     cache-g:6379  1 → -",
		"Keys that move: " + pct(ring.Moved(before, after), 2) + " of all keys (the least any placement must move: 25.00%; mod-N would move 75.00%)",
		"Where the keys go",
		"mod-N      23.8%",
		"dual-ring  95.0%     ×1.00",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPlanAddressChange checks that a node that keeps its name but changes
// address counts as moved for the hit rate, with a note.
func TestPlanAddressChange(t *testing.T) {
	code, out, _ := runCmd(t, "plan", "--from", "a=h:1,b=h:2", "--to", "a=h:1,b=h:3")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"Keys that move: 0.00%", "b changes address, h:2 to h:3", "dual-ring  95.0%"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ring       95.0%") {
		t.Errorf("ring keeps its hit rate although b's keys change server:\n%s", out)
	}
}

// TestPlanManyNodes checks that a wide change lists its flows instead of a
// matrix.
func TestPlanManyNodes(t *testing.T) {
	var from, to []string
	for i := range 12 {
		n := string(rune('a'+i)) + "=h:" + string(rune('1'+i%9)) + string(rune('0'+i/9))
		from = append(from, n)
		if i != 5 {
			to = append(to, n)
		}
	}
	code, out, errOut := runCmd(t, "plan", "--from", strings.Join(from, ","), "--to", strings.Join(to, ","))
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "Keys that change node") || strings.Contains(out, "Where the keys go") {
		t.Errorf("want a list of flows:\n%s", out)
	}
}
