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

// TestPlanNeedsBothLists: one list alone is refused, not compared with the
// demo's other list; with neither, the demo runs; a list's own mistake is
// said before the missing one.
func TestPlanNeedsBothLists(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--from", "a=h:1,b=h:2"}, "--from without --to: give the nodes after the change too"},
		{[]string{"plan", "--to", "a=h:1,b=h:2"}, "--to without --from: give the nodes before the change too"},
		{[]string{"plan", "--json", "--from", "a=h:1"}, "--from without --to"},
		{[]string{"simulate", "--from", "a=h:1,b=h:2"}, "--from without --to"},
		{[]string{"simulate", "--to", "a=h:1"}, "--to without --from"},
		{[]string{"plan", "--from", "a=h:1,a=h:2"}, "--from: duplicate node name"},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if code, out, _ := runCmd(t, "plan"); code != exitOK || !strings.Contains(out, "Plan: 8 nodes → 6 nodes") {
		t.Errorf("plan alone: exit %d, want the demo:\n%s", code, out)
	}
}

// TestPlanAddressChangeCounted: a node that keeps its name on another
// server moves nothing on the ring, but its new server starts without its
// share: plan says both, in the text and in the JSON.
func TestPlanAddressChangeCounted(t *testing.T) {
	from, to := "a=h:1,b=h:2,c=h:3", "a=h:1,b=h:20,c=h:3,d=h:4"
	rep := planJSON(t, "--from", from, "--to", to)
	flows := map[[2]string]float64{}
	for _, f := range rep.Flows {
		flows[[2]string{f.From, f.To}] = f.Share
	}
	if math.Abs(rep.Readdressed-flows[[2]string{"b", "b"}]) > 1e-12 || rep.Readdressed < 0.2 {
		t.Errorf("readdressed %v, want b's keys that stay on b, %v", rep.Readdressed, flows[[2]string{"b", "b"}])
	}
	if math.Abs(rep.ServerMoved-(rep.Moved+rep.Readdressed)) > 1e-9 {
		t.Errorf("server moved %v, want moved %v + readdressed %v", rep.ServerMoved, rep.Moved, rep.Readdressed)
	}
	for _, n := range rep.Nodes {
		want := 0.0
		if n.Name == "b" {
			want = n.After.Share // all of it: its new server starts empty
		}
		if n.StartsWithout != want {
			t.Errorf("%s starts without %v, want %v", n.Name, n.StartsWithout, want)
		}
	}
	code, out, _ := runCmd(t, "plan", "--from", from, "--to", to)
	var b planNode
	for _, n := range rep.Nodes {
		if n.Name == "b" {
			b = n
		}
	}
	for _, want := range []string{
		"Keys that move: " + pct(rep.Moved, 2) + " of all keys",
		"Keys that change server: " + pct(rep.ServerMoved, 2) + " of all keys (" + pct(rep.Readdressed, 2) + " more than move)",
		"b changes address, h:2 to h:20: its new server starts without b's whole share, " + pct(b.After.Share, 2) + " of all keys",
		"b     h:2 → h:20",
	} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "Note:") {
		t.Errorf("a note beside the count that explains it:\n%s", out)
	}
	// No address changes: no such line, no field.
	rep = planJSON(t, "--from", "a=h:1,b=h:2", "--to", "a=h:1,b=h:2,c=h:3")
	if rep.Readdressed != 0 || rep.Nodes[1].StartsWithout != 0 {
		t.Errorf("readdressed %v, b starts without %v; want 0", rep.Readdressed, rep.Nodes[1].StartsWithout)
	}
	if _, out, _ := runCmd(t, "plan", "--from", "a=h:1,b=h:2", "--to", "a=h:1,b=h:2,c=h:3"); strings.Contains(out, "change server") {
		t.Errorf("a line on servers without an address change:\n%s", out)
	}
}
