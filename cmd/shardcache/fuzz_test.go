package main

import (
	"strings"
	"testing"

	"github.com/shardcache/shardcache/ring"
)

// FuzzParseNodes reads arbitrary node lists: never a panic, and a list
// that parses has valid addresses and positive weights, and reads back the
// same, zones included, from formatNodes (what plan prints for the next
// command).
func FuzzParseNodes(f *testing.F) {
	for _, seed := range []string{
		"a=cache-a:6379*2,b=cache-b:6379",
		"10.0.0.1:11211, 10.0.0.2:11211",
		"a=[::1]:6379*1.05",
		"a=h:1*0.5",
		"a=h:1*NaN",
		"a=h:1*+Inf",
		"=h:1",
		"h:1,,h:2",
		"h:99999",
		" h:1 ",
		"a=b=c:1",
		"a=h:1*2@eu-1a,h:2@eu-1b",
		"h:1@",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if t := strings.ToLower(strings.TrimSpace(s)); strings.HasPrefix(t, "@") || !strings.Contains(t, ",") &&
			(strings.HasSuffix(t, ".json") || strings.HasSuffix(t, ".yaml") || strings.HasSuffix(t, ".yml")) {
			return // a file name: topofile's FuzzParse covers what it reads
		}
		nodes, err := parseNodes(s)
		if err != nil {
			return
		}
		for _, n := range nodes {
			if err := checkAddr(n.Addr); err != nil {
				t.Fatalf("parsed an address that does not check: %v", err)
			}
			if n.Weight < 0 || n.Weight != n.Weight {
				t.Fatalf("parsed weight %v", n.Weight)
			}
		}
		back, err := parseNodes(formatNodes(nodes))
		if err != nil {
			t.Fatalf("formatNodes(%q) = %q does not parse: %v", s, formatNodes(nodes), err)
		}
		if len(back) != len(nodes) {
			t.Fatalf("round trip: %d nodes, then %d", len(nodes), len(back))
		}
		for i := range nodes {
			if back[i].Addr != nodes[i].Addr || nameOf(back[i]) != nameOf(nodes[i]) || !sameWeight(back[i].Weight, nodes[i].Weight) || back[i].Zone != nodes[i].Zone {
				t.Fatalf("round trip: %+v, then %+v", nodes[i], back[i])
			}
		}
	})
}

// nameOf is the name that places n: its address when it has none.
func nameOf(n ring.Node) string {
	if n.Name == "" {
		return n.Addr
	}
	return n.Name
}

// sameWeight treats 0 (unset) and 1 alike, as the ring does.
func sameWeight(a, b float64) bool {
	if a == 0 {
		a = 1
	}
	if b == 0 {
		b = 1
	}
	return a == b
}
