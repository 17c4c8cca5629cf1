package ring

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden vectors in testdata/golden (only for a deliberate, announced placement change)")

// golden is one frozen configuration and the node every key must map to.
type golden struct {
	Vnodes int          `json:"vnodes"`
	Nodes  []goldenNode `json:"nodes"`
	// Tolerance is WithEqualize's, for an equalized ring; 0 for a classic
	// one. Counts are then each node's slots, by Name.
	Tolerance float64        `json:"tolerance,omitempty"`
	Counts    map[string]int `json:"counts,omitempty"`
	Keys      [][2]string    `json:"keys"` // [key, node name]
}

// goldenNode is a Node as the golden files write it: the files of before
// zones have none.
type goldenNode struct {
	Name   string
	Addr   string
	Weight float64
	Zone   string `json:",omitempty"`
}

func toGolden(ns []Node) []goldenNode {
	g := make([]goldenNode, len(ns))
	for i, n := range ns {
		g[i] = goldenNode(n)
	}
	return g
}

func fromGolden(g []goldenNode) []Node {
	ns := make([]Node, len(g))
	for i, n := range g {
		ns[i] = Node(n)
	}
	return ns
}

// mixedNodes are the nodes of the mixed-weights vectors.
func mixedNodes() []Node {
	return []Node{
		{Name: "cache-a", Addr: "10.1.0.1:6379", Weight: 1},
		{Name: "cache-b", Addr: "10.1.0.2:6379", Weight: 2},
		{Name: "cache-c", Addr: "10.1.0.3:6379", Weight: 3},
		{Addr: "10.1.0.4:11211", Weight: 0},
	}
}

// fractionalNodes have weights no whole vnode count reproduces: a 5%
// correction, a half, and one rounded at 160 vnodes (1.003×160 = 160.48).
func fractionalNodes() []Node {
	return []Node{
		{Name: "cache-a", Addr: "10.1.0.1:6379", Weight: 1.05},
		{Name: "cache-b", Addr: "10.1.0.2:6379", Weight: 0.5},
		{Name: "cache-c", Addr: "10.1.0.3:6379", Weight: 2.25},
		{Name: "cache-d", Addr: "10.1.0.4:6379", Weight: 1.003},
		{Name: "cache-e", Addr: "10.1.0.5:6379"},
	}
}

func goldenConfigs() map[string]golden {
	return map[string]golden{
		"equal-weights":      {Vnodes: DefaultVnodes, Nodes: toGolden(equalNodes(8))},
		"mixed-weights":      {Vnodes: 160, Nodes: toGolden(mixedNodes())},
		"hash-tags":          {Vnodes: DefaultVnodes, Nodes: toGolden(equalNodes(5))},
		"fractional-weights": {Vnodes: 160, Nodes: toGolden(fractionalNodes())},
		"equalized-equal-weights": {Vnodes: DefaultVnodes, Nodes: toGolden(equalNodes(8)),
			Tolerance: DefaultTolerance},
		"equalized-mixed-weights": {Vnodes: DefaultVnodes, Nodes: toGolden([]Node{
			{Name: "cache-a", Addr: "10.1.0.1:6379", Weight: 1.05},
			{Name: "cache-b", Addr: "10.1.0.2:6379", Weight: 2},
			{Name: "cache-c", Addr: "10.1.0.3:6379", Weight: 3},
			{Addr: "10.1.0.4:11211", Weight: 0},
			{Name: "cache-e", Addr: "10.1.0.5:6379", Weight: 0.75},
		}), Tolerance: DefaultTolerance},
	}
}

func goldenKeys(name string) []string {
	keys := make([]string, 0, 1500)
	for i := range 1500 {
		switch {
		case name != "hash-tags" && i%2 == 0:
			keys = append(keys, fmt.Sprintf("key:%d", i))
		case name != "hash-tags":
			keys = append(keys, fmt.Sprintf("user:%d:profile", i*7919))
		case i%3 == 0:
			keys = append(keys, fmt.Sprintf("{user%d}:cart", i/3))
		case i%3 == 1:
			keys = append(keys, fmt.Sprintf("session:{user%d}", i/3))
		default:
			keys = append(keys, fmt.Sprintf("{}{user%d}", i)) // empty first tag: whole key hashed
		}
	}
	return keys
}

// goldenOptions returns the options of New a golden configuration names.
func goldenOptions(vnodes int, tolerance float64) []Option {
	opts := []Option{WithVnodes(vnodes)}
	if tolerance != 0 {
		opts = append(opts, WithEqualize(tolerance))
	}
	return opts
}

// countsByName returns each node's number of points, by Name.
func countsByName(r *Ring) map[string]int {
	m := make(map[string]int, len(r.nodes))
	for i, n := range r.nodes {
		m[n.Name] = r.counts[i]
	}
	return m
}

// TestGoldenVectors freezes placement: a change of hash, point naming,
// collision rule, search, rounding of fractional weights or equalization
// breaks users' caches and must fail here.
func TestGoldenVectors(t *testing.T) {
	for name, cfg := range goldenConfigs() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "testdata", "golden", "ring-"+name+".json")
			if *update {
				r := mustNew(t, fromGolden(cfg.Nodes), goldenOptions(cfg.Vnodes, cfg.Tolerance)...)
				if cfg.Tolerance != 0 {
					cfg.Counts = countsByName(r)
				}
				for _, k := range goldenKeys(name) {
					cfg.Keys = append(cfg.Keys, [2]string{k, r.Locate(k).Name})
				}
				writeGolden(t, path, cfg)
			}
			var g golden
			readGolden(t, path, &g)
			if len(g.Keys) < 1000 {
				t.Fatalf("%s holds %d keys, want at least 1000", path, len(g.Keys))
			}
			r := mustNew(t, fromGolden(g.Nodes), goldenOptions(g.Vnodes, g.Tolerance)...)
			if g.Tolerance != 0 {
				if got := countsByName(r); fmt.Sprint(got) != fmt.Sprint(g.Counts) {
					t.Errorf("points per node %v, golden %v", got, g.Counts)
				}
				if d := r.Deviation(); d > g.Tolerance {
					t.Errorf("equalized ring deviates %.3f%% from the fair shares, tolerance %v%%", 100*d, 100*g.Tolerance)
				}
			}
			owners := map[string]int{}
			for _, kv := range g.Keys {
				owners[kv[1]]++
				if got := r.Locate(kv[0]).Name; got != kv[1] {
					t.Errorf("Locate(%q) = %s, golden %s", kv[0], got, kv[1])
				}
			}
			if len(owners) != len(g.Nodes) {
				t.Errorf("golden keys land on %d of %d nodes: vectors too weak", len(owners), len(g.Nodes))
			}
		})
	}
}

// goldenReplicas is one frozen configuration of a placement and the nodes,
// in order, that keep each key.
type goldenReplicas struct {
	Placement string          `json:"placement"` // ring, ketama, modulo or rendezvous
	Vnodes    int             `json:"vnodes,omitempty"`
	Tolerance float64         `json:"tolerance,omitempty"`
	Nodes     []goldenNode    `json:"nodes"`
	Keys      []goldenReplica `json:"keys"`
}

type goldenReplica struct {
	Key   string   `json:"key"`
	N     int      `json:"n"`
	Nodes []string `json:"nodes"` // names, the owner first
}

// zonedNodes are nine nodes in three zones of four, three and two.
func zonedNodes() []Node {
	ns := equalNodes(9)
	for i := range ns {
		ns[i].Zone = "eu-west-1" + string("aaaabbbcc"[i])
	}
	return ns
}

func goldenReplicaConfigs() map[string]goldenReplicas {
	ketama := []Node{
		{Addr: "10.0.1.1:11211", Zone: "a"}, {Name: "beta", Addr: "10.0.1.2:11211", Weight: 2, Zone: "b"},
		{Addr: "10.0.1.3:11211", Zone: "a"}, {Addr: "10.0.1.4:22122", Zone: "c"}, {Addr: "10.0.1.5:11211", Zone: "b"},
	}
	return map[string]goldenReplicas{
		"ring-replicas":           {Placement: "ring", Vnodes: DefaultVnodes, Nodes: toGolden(equalNodes(8))},
		"ring-replicas-zones":     {Placement: "ring", Vnodes: DefaultVnodes, Nodes: toGolden(zonedNodes())},
		"ring-replicas-equalized": {Placement: "ring", Vnodes: 160, Tolerance: 0.05, Nodes: toGolden(zonedNodes()[2:])},
		"ketama-replicas":         {Placement: "ketama", Nodes: toGolden(ketama)},
		"modulo-replicas":         {Placement: "modulo", Nodes: toGolden(ketama)},
		"rendezvous-replicas":     {Placement: "rendezvous", Nodes: toGolden(zonedNodes())},
	}
}

// goldenPlacement builds the placement g names.
func goldenPlacement(t *testing.T, g goldenReplicas) LocatorN {
	t.Helper()
	nodes := fromGolden(g.Nodes)
	var (
		l   LocatorN
		err error
	)
	switch g.Placement {
	case "ring":
		l, err = New(nodes, goldenOptions(g.Vnodes, g.Tolerance)...)
	case "ketama":
		l, err = NewKetama(nodes)
	case "modulo":
		var addrs []string
		if addrs, err = ModuloSlots(nodes); err == nil {
			l, err = NewModulo(addrs)
		}
	case "rendezvous":
		for i := range nodes {
			nodes[i].Weight = 0
		}
		l, err = NewRendezvous(nodes)
	default:
		t.Fatalf("unknown placement %q", g.Placement)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestGoldenReplicas freezes the replica sets of every placement: the
// nodes and their order, for n below, at and above the number of zones and
// of nodes.
func TestGoldenReplicas(t *testing.T) {
	for name, cfg := range goldenReplicaConfigs() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "testdata", "golden", name+".json")
			if *update {
				l := goldenPlacement(t, cfg)
				for i, k := range goldenKeys(name)[:1000] {
					n := []int{2, 3, 4, 1, len(cfg.Nodes) + 1}[i%5]
					var names []string
					for _, nd := range LocateN(l, k, n) {
						names = append(names, nd.Name)
					}
					cfg.Keys = append(cfg.Keys, goldenReplica{Key: k, N: n, Nodes: names})
				}
				writeGolden(t, path, cfg)
			}
			var g goldenReplicas
			readGolden(t, path, &g)
			if len(g.Keys) < 1000 {
				t.Fatalf("%s holds %d keys, want at least 1000", path, len(g.Keys))
			}
			l := goldenPlacement(t, g)
			seconds := map[string]bool{}
			var buf []Node
			for _, kr := range g.Keys {
				buf = l.AppendLocateN(buf[:0], kr.Key, kr.N)
				var got []string
				for _, nd := range buf {
					got = append(got, nd.Name)
				}
				if !slices.Equal(got, kr.Nodes) {
					t.Errorf("LocateN(%q, %d) = %s, golden %s", kr.Key, kr.N, strings.Join(got, " "), strings.Join(kr.Nodes, " "))
				}
				if len(got) > 1 {
					seconds[got[1]] = true
				}
			}
			if len(seconds) != len(g.Nodes) {
				t.Errorf("golden keys have %d of %d nodes as second replica: vectors too weak", len(seconds), len(g.Nodes))
			}
		})
	}
}

func writeGolden(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readGolden(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
