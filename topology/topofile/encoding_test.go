package topofile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

func TestParse(t *testing.T) {
	nodes := []ring.Node{{Name: "a", Addr: "cache-a:6379", Weight: 2}, {Addr: "cache-b:6379", Weight: 1}}
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	full := &topology.Topology{
		Version: 8, Nodes: nodes, Equalize: 0.01, MaxRemovedShare: 0.75,
		Migration: &topology.Migration{From: nodes[:1], FromKind: topology.KindKetama, FromHash: "md5", FromHashTag: "{}", Start: start, Window: 90 * time.Minute},
	}
	fromEqualized := &topology.Topology{Nodes: nodes, Equalize: 0.01,
		Migration: &topology.Migration{From: nodes, FromEqualize: 0.02, Start: start}}
	for _, tc := range []struct {
		name string
		f    Format
		in   string
		want *topology.Topology
	}{
		{"json list", JSON, `[{"name": "a", "addr": "cache-a:6379", "weight": 2}, {"addr": "cache-b:6379"}]`, &topology.Topology{Nodes: nodes}},
		{"json object", JSON, `{"nodes": [{"name": "a", "addr": "cache-a:6379", "weight": 2}, {"addr": "cache-b:6379"}]}`, &topology.Topology{Nodes: nodes}},
		{"yaml list", YAML, "- name: a\n  addr: cache-a:6379\n  weight: 2\n- addr: cache-b:6379\n", &topology.Topology{Nodes: nodes}},
		{"json full", JSON, `{"version": 8, "nodes": [{"name": "a", "addr": "cache-a:6379", "weight": 2}, {"addr": "cache-b:6379"}], "equalize": 0.01,
			"migration": {"from": [{"name": "a", "addr": "cache-a:6379", "weight": 2}], "from_kind": "ketama", "from_hash": "md5",
			"from_hash_tag": "{}", "start": "2026-05-01T10:00:00Z", "window": "1h30m"}, "max_removed_share": 0.75}`, full},
		{"yaml full, unquoted start", YAML, `version: 8
nodes:
  - {name: a, addr: "cache-a:6379", weight: 2}
  - addr: cache-b:6379
equalize: 0.01
migration:
  from: [{name: a, addr: "cache-a:6379", weight: 2}]
  from_kind: ketama
  from_hash: md5
  from_hash_tag: "{}"
  start: 2026-05-01T10:00:00Z
  window: 1h30m
max_removed_share: 0.75
`, full},
		{"yaml, from an equalized ring", YAML, `nodes: [{name: a, addr: "cache-a:6379", weight: 2}, {addr: "cache-b:6379"}]
equalize: 0.01
migration: {from: [{name: a, addr: "cache-a:6379", weight: 2}, {addr: "cache-b:6379"}], from_equalize: 0.02, start: 2026-05-01T10:00:00Z}
`, fromEqualized},
	} {
		got, err := Parse([]byte(tc.in), tc.f)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Parse = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	// Round trips.
	for _, f := range []Format{JSON, YAML} {
		for _, want := range []*topology.Topology{full, fromEqualized} {
			data, err := Marshal(want, f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse(data, f)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%v round trip: %+v, %v; want %+v\n%s", f, got, err, want, data)
			}
		}
	}
}

func TestParseRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Format
		in   string
		want error
	}{
		{"misspelt field", JSON, `[{"addr": "h:1", "wieght": 2}]`, ErrParse},
		{"misspelt field, yaml", YAML, "- addr: h:1\n  wieght: 2\n", ErrParse},
		{"misspelt top-level field", JSON, `{"nodes": [{"addr": "h:1"}], "verison": 3}`, ErrParse},
		{"misspelt migration field", YAML, "nodes: [{addr: 'h:1'}]\nmigration: {strat: 2026-05-01T10:00:00Z}\n", ErrParse},
		{"truncated json", JSON, `[{"addr": `, ErrParse},
		{"two documents", JSON, `[{"addr": "h:1"}] [{"addr": "h:2"}]`, ErrParse},
		{"broken yaml", YAML, "- addr: [h:1\n", ErrParse},
		{"empty yaml", YAML, "", ErrParse},
		{"empty list", JSON, `[]`, topology.ErrNoNodes},
		{"object without nodes", JSON, `{"version": 3}`, topology.ErrNoNodes},
		{"weight 0 written", JSON, `[{"addr": "h:1", "weight": 0}]`, topology.ErrBadWeight},
		{"weight negative", YAML, "- addr: h:1\n  weight: -2\n", topology.ErrBadWeight},
		{"no address", YAML, "- name: a\n", topology.ErrBadAddr},
		{"padded address", JSON, `[{"addr": " h:1"}]`, topology.ErrBadAddr},
		{"padded address, yaml", YAML, "- addr: 'h:1 '\n", topology.ErrBadAddr},
		{"duplicate names", JSON, `[{"name": "a", "addr": "h:1"}, {"name": "a", "addr": "h:2"}]`, topology.ErrDuplicateName},
		{"duplicate addresses", JSON, `[{"addr": "h:1"}, {"addr": "h:1"}]`, topology.ErrDuplicateAddr},
		{"bad start", JSON, `{"nodes": [{"addr": "h:1"}], "migration": {"start": "tomorrow", "window": "1h"}}`, ErrParse},
		{"bad window", JSON, `{"nodes": [{"addr": "h:1"}], "migration": {"start": "2026-05-01T10:00:00Z", "window": "an hour"}}`, topology.ErrBadWindow},
		{"window without a start", JSON, `{"nodes": [{"addr": "h:1"}], "migration": {"window": "1h"}}`, topology.ErrNoStart},
		{"unknown kind", JSON, `{"nodes": [{"addr": "h:1"}], "migration": {"from_kind": "jump", "start": "2026-05-01T10:00:00Z"}}`, topology.ErrBadKind},
		{"share above 1", JSON, `{"nodes": [{"addr": "h:1"}], "max_removed_share": 2}`, topology.ErrBadShare},
		{"equalize 1", JSON, `{"nodes": [{"addr": "h:1"}], "equalize": 1}`, topology.ErrBadEqualize},
		{"equalize negative, yaml", YAML, "nodes: [{addr: 'h:1'}]\nequalize: -0.01\n", topology.ErrBadEqualize},
		{"equalize NaN, yaml", YAML, "nodes: [{addr: 'h:1'}]\nequalize: .nan\n", topology.ErrBadEqualize},
		{"equalize as a string", JSON, `{"nodes": [{"addr": "h:1"}], "equalize": "1%"}`, ErrParse},
		{"from_equalize of ketama", JSON, `{"nodes": [{"addr": "h:1"}], "migration": {"from_kind": "ketama", "from_equalize": 0.01, "start": "2026-05-01T10:00:00Z"}}`, topology.ErrBadEqualize},
		{"misspelt equalize", JSON, `{"nodes": [{"addr": "h:1"}], "equalise": 0.01}`, ErrParse},
	} {
		got, err := Parse([]byte(tc.in), tc.f)
		if !errors.Is(err, tc.want) || got != nil {
			t.Errorf("%s: Parse = %+v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"a.json": `[{"addr": "h:1"}]`,
		"a.yaml": "- addr: h:1\n",
		"a.YML":  "- addr: h:1\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadFile(path); err != nil || len(got.Nodes) != 1 {
			t.Errorf("ReadFile(%s) = %+v, %v", name, got, err)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile of a missing file: %v, want os.ErrNotExist", err)
	}
}
