package topofile

import "testing"

// FuzzParse decodes arbitrary documents in both formats: never a panic,
// and a topology that parses is one that checks, and that Marshal writes
// back to the same topology in either format.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`[{"name": "a", "addr": "cache-a:11211", "weight": 2}, {"addr": "cache-b:11211"}]`,
		`{"version": 8, "nodes": [{"addr": "a:1"}], "migration": {"from": [{"addr": "b:2", "weight": 1.5}], "from_kind": "ketama", "start": "2026-05-01T10:00:00Z", "window": "1h"}, "max_removed_share": 0.75}`,
		"nodes:\n  - addr: a:1\n    weight: 3\nmigration:\n  window: 90m\n",
		"- addr: a:1\n- {name: b, addr: 'b:2'}\n",
		`{"nodes": [{"addr": "a:1"}, {"addr": "b:2"}], "equalize": 0.01, "migration": {"from": [{"addr": "a:1"}], "from_equalize": 0.02, "start": "2026-05-01T10:00:00Z"}}`,
		"nodes: [{addr: 'a:1'}]\nequalize: 1\n",
		`{"nodes": [{"addr": "a:1", "wieght": 2}]}`,
		`{"nodes": [{"addr": " a:1"}]}`,
		`{"nodes": [{"addr": "a:1", "weight": 0}]}`,
		"",
		"null",
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, yaml bool) {
		format := JSON
		if yaml {
			format = YAML
		}
		top, err := Parse(data, format)
		if err != nil {
			return
		}
		if err := top.Check(); err != nil {
			t.Fatalf("Parse returned a topology that does not check: %v", err)
		}
		for _, out := range []Format{JSON, YAML} {
			b, err := Marshal(top, out)
			if err != nil {
				t.Fatalf("Marshal %v of a parsed topology: %v", out, err)
			}
			back, err := Parse(b, out)
			if err != nil {
				t.Fatalf("Parse of Marshal %v: %v\n%s", out, err, b)
			}
			if !back.Equal(top) || back.Version != top.Version || back.MaxRemovedShare != top.MaxRemovedShare ||
				back.Equalize != top.Equalize {
				t.Fatalf("%v round trip changed the topology:\n%s", out, b)
			}
		}
	})
}
