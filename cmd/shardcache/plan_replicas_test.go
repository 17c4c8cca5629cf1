package main

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/ring"
)

// TestPlanReplicas checks plan --replicas against the ring's exact
// analysis: each node's copies (ring.ReplicaShares) and first-replica
// share, the memory (×R, or ×N with fewer nodes), the zones and their
// spread, and the keys whose replica set changes (ring.MovedN).
func TestPlanReplicas(t *testing.T) {
	const four = "a=h1:1,b=h2:1,c=h3:1,d=h4:1"
	const zoned = "a=h1:1@a,b=h2:1@a,c=h3:1@b,d=h4:1@b"
	for _, tc := range []struct {
		name     string
		from, to string
		r        int
		memory   float64 // before and after
		zones    [2]int  // before, after
		spread   [2]int  // the zones a key's replicas can span, before and after
		unmoved  bool    // no key changes replica set
		near     float64 // with it, every node's copies are about it, before and after
		spanning bool    // every key's replicas span spread zones, exactly
	}{
		{name: "4 equal nodes, R=2", from: four, to: four, r: 2, memory: 2, zones: [2]int{1, 1}, spread: [2]int{1, 1}, unmoved: true, near: 0.5, spanning: true},
		{name: "4 equal nodes, R=3", from: four, to: four, r: 3, memory: 3, zones: [2]int{1, 1}, spread: [2]int{1, 1}, unmoved: true, near: 0.75, spanning: true},
		{name: "zones a,a,b,b, R=2", from: zoned, to: zoned, r: 2, memory: 2, zones: [2]int{2, 2}, spread: [2]int{2, 2}, unmoved: true, near: 0.5, spanning: true},
		{name: "zones a,a,b,b then e in c, R=2", from: zoned, to: zoned + ",e=h5:1@c", r: 2, memory: 2, zones: [2]int{2, 3}, spread: [2]int{2, 2}, spanning: true},
		{name: "4 nodes down to 3, R=2", from: four, to: "a=h1:1,b=h2:1,c=h3:1", r: 2, memory: 2, zones: [2]int{1, 1}, spread: [2]int{1, 1}, spanning: true},
		{name: "zones given to the same nodes, R=2", from: four, to: zoned, r: 2, memory: 2, zones: [2]int{1, 2}, spread: [2]int{1, 2}, spanning: true},
		{name: "R=3 over 2 nodes", from: "a=h1:1,b=h2:1", to: "a=h1:1,b=h2:1", r: 3, memory: 2, zones: [2]int{1, 1}, spread: [2]int{1, 1}, unmoved: true, near: 1, spanning: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := planJSON(t, "--from", tc.from, "--to", tc.to, "--replicas", strconv.Itoa(tc.r), "--vnodes", "128")
			before, after := mustRingOf(t, tc.from, 128), mustRingOf(t, tc.to, 128)
			rr := rep.Replicas
			if rr == nil {
				t.Fatal("no replicas in the report")
			}
			if rr.R != tc.r || !rr.Exact || rr.Samples != 0 {
				t.Errorf("r %d exact %v samples %d; want %d, exact, none", rr.R, rr.Exact, rr.Samples, tc.r)
			}
			if rr.Before.Memory != tc.memory || rr.After.Memory != tc.memory {
				t.Errorf("memory ×%v before, ×%v after; want exactly ×%v", rr.Before.Memory, rr.After.Memory, tc.memory)
			}
			if got := [2]int{rr.Before.Zones, rr.After.Zones}; got != tc.zones {
				t.Errorf("zones %v, want %v", got, tc.zones)
			}
			if got := [2]int{rr.Before.SpreadZones, rr.After.SpreadZones}; got != tc.spread {
				t.Errorf("spread zones %v, want %v", got, tc.spread)
			}
			if tc.spanning && (rr.Before.Spread != 1 || rr.After.Spread != 1) {
				t.Errorf("keys spanning %v zones: %v before, %v after; want all", tc.spread, rr.Before.Spread, rr.After.Spread)
			}
			if want := ring.MovedN(before, after, tc.r); rr.SetMoved != want {
				t.Errorf("set moved %v, ring.MovedN %v", rr.SetMoved, want)
			}
			// A key whose owner changes changes set.
			if rr.SetMoved < rep.Moved-1e-12 || tc.unmoved && rr.SetMoved != 0 {
				t.Errorf("set moved %v, owner moved %v (unmoved: %v)", rr.SetMoved, rep.Moved, tc.unmoved)
			}
			copiesB, copiesA := before.ReplicaShares(tc.r), after.ReplicaShares(tc.r)
			sharesB, sharesA := before.Shares(), after.Shares()
			// Each of the R places a key has is a share of the ring, as
			// far off its fair share as the first is at most, roughly: R
			// times the ring's largest absolute deviation, with room.
			tol := func(r *ring.Ring) float64 {
				return 1.5 * float64(tc.r) * r.Deviation() / float64(len(r.Nodes()))
			}
			for _, n := range rep.Nodes {
				for _, side := range []struct {
					s              *planSide
					copies, shares map[string]float64
					r              *ring.Ring
				}{{n.Before, copiesB, sharesB, before}, {n.After, copiesA, sharesA, after}} {
					if side.s == nil {
						continue
					}
					if side.s.ReplicaShare != side.copies[n.Name] || side.s.Share != side.shares[n.Name] {
						t.Errorf("%s: copies %v first %v; ring %v %v", n.Name, side.s.ReplicaShare, side.s.Share, side.copies[n.Name], side.shares[n.Name])
					}
					if tc.near > 0 && math.Abs(side.s.ReplicaShare-tc.near) > tol(side.r)+1e-12 {
						t.Errorf("%s: copies of %.4f of the keys, want %v ± %.4f", n.Name, side.s.ReplicaShare, tc.near, tol(side.r))
					}
				}
			}
		})
	}
}

// TestPlanZonesMoveNoKey checks that zones change no key's owner: the
// same nodes with and without zones move nothing.
func TestPlanZonesMoveNoKey(t *testing.T) {
	rep := planJSON(t, "--from", "a=h1:1,b=h2:1,c=h3:1,d=h4:1", "--to", "a=h1:1@a,b=h2:1@a,c=h3:1@b,d=h4:1@b")
	if rep.Moved != 0 || rep.ServerMoved != 0 || rep.Replicas != nil {
		t.Errorf("moved %v (servers %v), replicas %+v: want 0, 0 and none without --replicas", rep.Moved, rep.ServerMoved, rep.Replicas)
	}
	for _, n := range rep.Nodes {
		if n.Before.ReplicaShare != 0 || n.After.ReplicaShare != 0 || n.After.Zone == "" {
			t.Errorf("%s: %+v → %+v: want no replica share, a zone after", n.Name, *n.Before, *n.After)
		}
	}
}

// TestPlanReplicasFromModulo checks the counted path: mod-N's replicas are
// the next slots, which over 4 equal servers keep half the keys each, in
// one zone whatever the nodes say.
func TestPlanReplicasFromModulo(t *testing.T) {
	rep := planJSON(t, "--from-kind", "modulo", "--from", "h1:1@a,h2:1@a,h3:1@b,h4:1@b",
		"--to", "a=h1:1@a,b=h2:1@a,c=h3:1@b,d=h4:1@b", "--replicas", "2", "--vnodes", "128")
	rr := rep.Replicas
	if rr.Exact || rr.Samples != ring.CompareSamples || rr.StdErr <= 0 {
		t.Errorf("exact %v, %d samples, std err %v: want counted over %d keys", rr.Exact, rr.Samples, rr.StdErr, ring.CompareSamples)
	}
	if rr.Before.Memory != 2 || rr.After.Memory != 2 || rr.Before.Zones != 1 || rr.After.Spread != 1 {
		t.Errorf("replicas %+v", *rr)
	}
	se := math.Sqrt(0.25 / float64(ring.CompareSamples))
	for _, n := range rep.Nodes {
		if math.Abs(n.Before.ReplicaShare-0.5) > 5*se {
			t.Errorf("%s keeps copies of %v of the keys before, want 0.5 ± %v", n.Name, n.Before.ReplicaShare, 5*se)
		}
	}
	// A key moves owner, or moves set: of mod-N's 75%, at least as many.
	if rr.SetMoved < rep.Moved-5*rr.StdErr || rr.SetMoved > 1 {
		t.Errorf("set moved %v, owner moved %v", rr.SetMoved, rep.Moved)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "mod-N has no zones") {
		t.Errorf("notes %q lack mod-N's zones", rep.Notes)
	}
}

// TestPlanReplicasText checks the replicas section of the text report.
func TestPlanReplicasText(t *testing.T) {
	const zoned = "a=h1:1@a,b=h2:1@a,c=h3:1@b,d=h4:1@b"
	code, out, errOut := runCmd(t, "plan", "--from", zoned, "--to", zoned+",e=h5:1@c", "--replicas", "2")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	after := mustRingOf(t, zoned+",e=h5:1@c", ring.DefaultVnodes)
	for _, want := range []string{
		"Replicas (--replicas 2): every key on 2 distinct nodes",
		"node  zone  copies before  first   copies after  first",
		"e     c     -              -       " + pct(after.ReplicaShares(2)["e"], 2),
		"Memory: ×2.00 the data before, ×2.00 after",
		"Zones: 2 before, 3 after; keys whose replicas span 2 zones before: 100.00%, 2 zones after: 100.00%",
		"Keys whose replica set changes: " + pct(ring.MovedN(mustRingOf(t, zoned, ring.DefaultVnodes), after, 2), 2),
		"How: exact, from the arcs between the points of both rings.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Without zones, no zone line; with R=1, no section.
	if _, out, _ := runCmd(t, "plan", "--replicas", "2"); strings.Contains(out, "Zones:") || !strings.Contains(out, "Memory: ×2.00") {
		t.Errorf("demo with --replicas 2:\n%s", out)
	}
	if _, out, _ := runCmd(t, "plan"); strings.Contains(out, "Replicas") {
		t.Errorf("plan without --replicas prints replicas:\n%s", out)
	}
}

// TestPlanReplicasBadFlag checks that --replicas is a whole number of 1 or
// more, refused as other bad flags are.
func TestPlanReplicasBadFlag(t *testing.T) {
	for _, v := range []string{"0", "-1", "1.5", "two", ""} {
		code, out, errOut := runCmd(t, "plan", "--replicas", v)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "--replicas") || !strings.Contains(errOut, "Usage: shardcache plan") {
			t.Errorf("--replicas %q: exit %d, stdout %q, stderr %q; want %d and the flag named", v, code, out, errOut, exitUsage)
		}
	}
}

func mustRingOf(t *testing.T, list string, vnodes int) *ring.Ring {
	t.Helper()
	r, err := ring.New(mustNodes(t, list), ring.WithVnodes(vnodes))
	if err != nil {
		t.Fatal(err)
	}
	return r
}
