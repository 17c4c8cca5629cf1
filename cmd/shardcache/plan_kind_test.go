package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/ring"
)

func planJSON(t *testing.T, args ...string) *planReport {
	t.Helper()
	code, out, errOut := runCmd(t, append([]string{"plan", "--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("plan %v: exit %d: %s", args, code, errOut)
	}
	var rep planReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return &rep
}

// TestPlanFromKinds checks plan from each foreign placement against
// ring.Compare, and that it says whether its figures are exact.
func TestPlanFromKinds(t *testing.T) {
	to := "a=10.0.0.1:11211,b=10.0.0.2:11211,c=10.0.0.3:11212,d=10.0.0.4:11211"
	toRing, _ := ring.New(mustNodes(t, to))
	ketama, _ := ring.NewKetama(mustNodes(t, "10.0.0.1:11211,10.0.0.2:11211*2,gamma=10.0.0.3:11212"))
	crc, _ := ring.NewModulo([]string{"10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.2:11211", "10.0.0.3:11212"})
	fnv, _ := ring.NewModulo([]string{"10.0.0.1:11211", "10.0.0.2:11211"}, ring.WithModuloHash(ring.ModuloFNV1a32))
	ketamaFNV, _ := ring.NewKetama(mustNodes(t, "10.0.0.1:11211,10.0.0.2:11211*2,gamma=10.0.0.3:11212"), ring.WithKetamaKeyHash(ring.KetamaFNV1a64))
	rdv, _ := ring.NewRendezvous(mustNodes(t, "s1=10.0.0.1:11211,s2=10.0.0.2:11211,s3=10.0.0.3:11212"))
	for _, tc := range []struct {
		args      []string
		from      ring.Locator
		wantExact bool
	}{
		{[]string{"--from-kind", "ketama", "--from", "10.0.0.1:11211,10.0.0.2:11211*2,gamma=10.0.0.3:11212"}, ketama, true},
		{[]string{"--from-kind", "modulo", "--from", "10.0.0.1:11211,10.0.0.2:11211*2,10.0.0.3:11212"}, crc, true},
		{[]string{"--from-kind", "modulo", "--from-hash", "fnv1a-32", "--from", "10.0.0.1:11211,10.0.0.2:11211"}, fnv, true},
		{[]string{"--from-kind", "rendezvous", "--from", "s1=10.0.0.1:11211,s2=10.0.0.2:11211,s3=10.0.0.3:11212"}, rdv, false},
		{[]string{"--from-kind", "ketama", "--from-hash", "fnv1a_64", "--from", "10.0.0.1:11211,10.0.0.2:11211*2,gamma=10.0.0.3:11212"}, ketamaFNV, true},
	} {
		rep := planJSON(t, append(tc.args, "--to", to)...)
		want := ring.Compare(tc.from, toRing)
		if rep.ServerMoved != want.Moved || rep.Moved != want.Moved || rep.Exact != tc.wantExact || rep.Method != want.Method {
			t.Errorf("%v: moved %v (servers %v), exact %v (%s); ring.Compare %v, exact %v",
				tc.args, rep.Moved, rep.ServerMoved, rep.Exact, rep.Method, want.Moved, want.Exact)
		}
		if !rep.Exact && (rep.Samples != ring.CompareSamples || rep.StdErr <= 0) {
			t.Errorf("%v: sampled without its size or error: %d, %v", tc.args, rep.Samples, rep.StdErr)
		}
		total, moved := 0.0, 0.0
		for _, f := range rep.Flows {
			total += f.Share
			if f.From != f.To {
				moved += f.Share
			}
		}
		if math.Abs(total-1) > 1e-9 || math.Abs(moved-rep.ServerMoved) > 1e-9 {
			t.Errorf("%v: flows add up to %v, those between nodes to %v (moved %v)", tc.args, total, moved, rep.ServerMoved)
		}
		// Rows are servers, named as on our ring once they are in --to.
		for _, n := range rep.Nodes {
			if n.After == nil || n.After.Addr != n.Addr {
				t.Errorf("%v: row %+v: every server is in --to", tc.args, n)
			}
		}
		_, out, _ := runCmd(t, append([]string{"plan", "--to", to}, tc.args...)...)
		if tc.wantExact && !strings.Contains(out, "How: exact") ||
			!tc.wantExact && !strings.Contains(out, "How: sampled: keys located in both, 1048576 keys: the fractions are estimates, standard error") {
			t.Errorf("%v: the text does not say how exact it is:\n%s", tc.args, out)
		}
	}
	// Ketama's names appear beside ours.
	_, out, _ := runCmd(t, "plan", "--from-kind", "ketama", "--from", "10.0.0.1:11211,gamma=10.0.0.3:11212", "--to", to)
	for _, want := range []string{"Plan: ketama (twemproxy, libmemcached), 2 servers → ring, 4 nodes", "10.0.0.1 → a", "gamma → c"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPlanCountsServers: the mod-N row compares servers, as the ring rows
// do, and moved stays within [0, 1].
func TestPlanCountsServers(t *testing.T) {
	// Renamed on the same servers: mod-N moves nothing; the ring, whose
	// names are its points, moves its keys between the servers.
	rep := planJSON(t, "--from", "a=h1:1,b=h2:1", "--to", "x=h1:1,y=h2:1")
	if rep.ModNMoved != 0 || rep.AfterSwitch[0].HitRate != 0.95 || rep.AfterSwitch[0].DBLoad != 1 {
		t.Errorf("rename: mod-N moved %v, %+v; want 0, 95%% hit, ×1", rep.ModNMoved, rep.AfterSwitch[0])
	}
	if rep.Moved != 1 || rep.ServerMoved <= 0 || rep.ServerMoved >= 1 {
		t.Errorf("rename: moved %v (want 1: every name changes), server moved %v", rep.Moved, rep.ServerMoved)
	}
	// b moves to another server under its name: mod-N loses b's slot.
	rep = planJSON(t, "--from", "a=h1:1,b=h2:1", "--to", "a=h1:1,b=h3:1")
	if math.Abs(rep.ModNMoved-0.5) > 1e-12 || math.Abs(rep.AfterSwitch[0].HitRate-0.475) > 1e-12 {
		t.Errorf("b to h3: mod-N moved %v, %+v; want 0.5, 47.5%% hit", rep.ModNMoved, rep.AfterSwitch[0])
	}
	// 40 servers, all renamed: no sum of arcs strays past 1.
	var from, to []string
	for i := range 40 {
		from = append(from, fmt.Sprintf("n%d=h%d:1", i, i))
		to = append(to, fmt.Sprintf("m%d=h%d:1", i, i))
	}
	rep = planJSON(t, "--from", strings.Join(from, ","), "--to", strings.Join(to, ","), "--vnodes", "16")
	if rep.Moved > 1 || rep.ServerMoved > 1 || rep.ModNMoved > 1 || rep.MinMoved > 1 {
		t.Errorf("fractions past 1: moved %v, server %v, mod-N %v, min %v", rep.Moved, rep.ServerMoved, rep.ModNMoved, rep.MinMoved)
	}
}

func TestPlanKindErrors(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		want, lack string
	}{
		{[]string{"--vnodes", "0"}, "--vnodes 0: want 1..16384", "--from"},
		{[]string{"--from-kind", "jump"}, `--from-kind "jump": want one of ring, ketama, modulo, rendezvous`, ""},
		{[]string{"--from-hash", "fnv1a"}, "--from-hash: only for --from-kind modulo or ketama", ""},
		{[]string{"--from-kind", "ketama", "--from-hash", "crc32"}, "--from: unknown hash", ""},
		{[]string{"--from-kind", "rendezvous", "--from-hash-tag", "{}"}, "--from-hash-tag: only for --from-kind ketama or modulo", ""},
		{[]string{"--from-kind", "modulo", "--from-hash", "md5"}, "--from: unknown hash", ""},
		{[]string{"--from-kind", "ketama", "--from-hash-tag", "{"}, "--from: bad hash tag", ""},
		{[]string{"--from-kind", "rendezvous", "--from", "a:1*2,b:1"}, "--from: bad node weight", ""},
	} {
		code, _, errOut := runCmd(t, append([]string{"plan"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || tc.lack != "" && strings.Contains(errOut, tc.lack) {
			t.Errorf("plan %v: exit %d, %q; want exit 2 saying %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestPlanHelpDocumentsJSON(t *testing.T) {
	_, out, _ := runCmd(t, "help", "plan")
	for _, want := range []string{"-from-kind", "ketama", "rendezvous", "Exact or sampled", "moved ", "server_moved", "min_moved", "std_err"} {
		if !strings.Contains(out, want) {
			t.Errorf("help plan lacks %q", want)
		}
	}
}

// TestPlanForeignNameClash: a go-redis shard named "a" on a server that
// leaves, and our node "a" on a new one, are two rows, flows apart.
func TestPlanForeignNameClash(t *testing.T) {
	rep := planJSON(t, "--from-kind", "rendezvous", "--from", "a=h1:1,b=h2:1", "--to", "a=h3:1,b=h2:1")
	names := map[string]bool{}
	for _, n := range rep.Nodes {
		names[n.Name] = true
	}
	if len(rep.Nodes) != 3 || !names["a@h1:1"] || !names["a@h3:1"] || !names["b"] {
		t.Fatalf("rows %+v, want a@h1:1, a@h3:1 and b", rep.Nodes)
	}
	for _, f := range rep.Flows {
		if f.From == "a@h1:1" && f.To == "a@h1:1" {
			t.Errorf("keys stay on h1:1, which leaves: %+v", f)
		}
	}
}
