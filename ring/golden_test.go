package ring

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden vectors in testdata/golden (only for a deliberate, announced placement change)")

// golden is one frozen configuration and the node every key must map to.
type golden struct {
	Vnodes int         `json:"vnodes"`
	Nodes  []Node      `json:"nodes"`
	Keys   [][2]string `json:"keys"` // [key, node name]
}

func goldenConfigs() map[string]golden {
	mixed := []Node{
		{Name: "cache-a", Addr: "10.1.0.1:6379", Weight: 1},
		{Name: "cache-b", Addr: "10.1.0.2:6379", Weight: 2},
		{Name: "cache-c", Addr: "10.1.0.3:6379", Weight: 3},
		{Addr: "10.1.0.4:11211", Weight: 0},
	}
	return map[string]golden{
		"equal-weights": {Vnodes: DefaultVnodes, Nodes: equalNodes(8)},
		"mixed-weights": {Vnodes: 160, Nodes: mixed},
		"hash-tags":     {Vnodes: DefaultVnodes, Nodes: equalNodes(5)},
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

// TestGoldenVectors freezes placement: a change of hash, point naming,
// collision rule or search breaks users' caches and must fail here.
func TestGoldenVectors(t *testing.T) {
	for name, cfg := range goldenConfigs() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "testdata", "golden", "ring-"+name+".json")
			if *update {
				r := mustNew(t, cfg.Nodes, WithVnodes(cfg.Vnodes))
				for _, k := range goldenKeys(name) {
					cfg.Keys = append(cfg.Keys, [2]string{k, r.Locate(k).Name})
				}
				b, err := json.MarshalIndent(cfg, "", " ")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var g golden
			if err := json.Unmarshal(b, &g); err != nil {
				t.Fatal(err)
			}
			if len(g.Keys) < 1000 {
				t.Fatalf("%s holds %d keys, want at least 1000", path, len(g.Keys))
			}
			r := mustNew(t, g.Nodes, WithVnodes(g.Vnodes))
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
