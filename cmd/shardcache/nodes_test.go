package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/ring"
)

func TestParseNodes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []ring.Node
	}{
		{"a=cache-a:6379*2,b=cache-b:6379", []ring.Node{{Name: "a", Addr: "cache-a:6379", Weight: 2}, {Name: "b", Addr: "cache-b:6379"}}},
		{"10.0.0.1:11211, 10.0.0.2:11211 ", []ring.Node{{Addr: "10.0.0.1:11211"}, {Addr: "10.0.0.2:11211"}}},
		{"[::1]:6379*3", []ring.Node{{Addr: "[::1]:6379", Weight: 3}}},
		{" x = h:1 * 4 ", []ring.Node{{Name: "x", Addr: "h:1", Weight: 4}}},
		{"a=h:1*1.05,b=h:2*0.5", []ring.Node{{Name: "a", Addr: "h:1", Weight: 1.05}, {Name: "b", Addr: "h:2", Weight: 0.5}}},
		{"a=h:1*2@eu-1a,h:2@eu-1b", []ring.Node{{Name: "a", Addr: "h:1", Weight: 2, Zone: "eu-1a"}, {Addr: "h:2", Zone: "eu-1b"}}},
		{" a = h:1 @ z ", []ring.Node{{Name: "a", Addr: "h:1", Zone: "z"}}},
	} {
		got, err := parseNodes(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseNodes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "a", "a=", "=h:1", "h:1,", "h:1*", "h:1*-1", "h:1*0", "h:1*NaN", "h:1*Inf", "h:0", "h:port", ":1", "a=b=h:1", "h:1@", "h:1@a b", "h:1@z@y", "h:1*2@", "@z"} {
		if got, err := parseNodes(in); err == nil {
			t.Errorf("parseNodes(%q) = %v, want an error", in, got)
		}
	}
	// Round trip through formatNodes.
	nodes := []ring.Node{{Name: "a", Addr: "h:1", Weight: 2}, {Addr: "h:2"}, {Name: "c", Addr: "h:3", Weight: 1.05, Zone: "eu-1a"}}
	if got, err := parseNodes(formatNodes(nodes)); err != nil || !reflect.DeepEqual(got, nodes) {
		t.Errorf("parseNodes(formatNodes(%v)) = %v, %v", nodes, got, err)
	}
}

func TestReadNodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	want := []ring.Node{{Name: "a", Addr: "cache-a:6379", Weight: 2}, {Addr: "cache-b:6379", Weight: 1}}
	for _, path := range []string{
		write("list.json", `[{"name": "a", "addr": "cache-a:6379", "weight": 2}, {"addr": "cache-b:6379"}]`),
		write("wrapped.json", `{"nodes": [{"name": "a", "addr": "cache-a:6379", "weight": 2}, {"addr": "cache-b:6379"}]}`),
		write("list.yaml", "- name: a\n  addr: cache-a:6379\n  weight: 2\n- addr: cache-b:6379\n"),
		write("wrapped.yml", "nodes:\n  - {name: a, addr: \"cache-a:6379\", weight: 2}\n  - addr: cache-b:6379\n"),
	} {
		for _, arg := range []string{path, "@" + path} {
			got, err := parseNodes(arg)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("parseNodes(%q) = %v, %v; want %v", arg, got, err, want)
			}
		}
	}
	for _, tc := range []struct{ name, text, want string }{
		{"typo.json", `[{"addr": "h:1", "wieght": 2}]`, "wieght"},
		{"typo.yaml", "- addr: h:1\n  wieght: 2\n", "wieght"},
		{"weight.json", `[{"addr": "h:1", "weight": 0}]`, "weight 0"},
		{"addr.yaml", "- name: a\n", "HOST:PORT"},
		{"empty.json", `[]`, "no nodes"},
		{"empty.yaml", ``, "empty file"},
		{"broken.json", `[{"addr": `, "unexpected EOF"},
		{"broken.yaml", "- addr: [h:1\n", "yaml"},
	} {
		_, err := parseNodes(write(tc.name, tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.want)
		}
	}
}
