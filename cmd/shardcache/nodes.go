package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/topofile"
)

// nodesHelp documents the node-list grammar, for --help.
const nodesHelp = `A node list is comma-separated nodes, each [NAME=]HOST:PORT[*WEIGHT][@ZONE]:
  a=cache-a:6379*2,b=cache-b:6379   names a and b, a with twice b's weight
  a=cache-a:6379*1.05,b=...         weights may be fractional: a 5% correction
  10.0.0.1:11211,10.0.0.2:11211     the name is the address, the weight 1
  a=cache-a:6379@eu-1a,b=...@eu-1b  zones (failure domains), for plan --replicas
The name places the node on the ring: keep it when a server changes address.
A zone moves no key; it spreads a key's replicas over distinct zones first.
Or a file: @FILE, or a path ending in .json, .yaml or .yml, holding a list of
{name, addr, weight} objects (or {"nodes": [...]}), name and weight optional:
  [{"name": "a", "addr": "cache-a:6379", "weight": 2}, {"addr": "cache-b:6379"}]
Node files have no zone field yet: give zones in a list.`

// parseNodes reads a node list: the grammar of nodesHelp, or a file.
func parseNodes(s string) ([]ring.Node, error) {
	s = strings.TrimSpace(s)
	if path, ok := strings.CutPrefix(s, "@"); ok {
		return readNodes(path)
	}
	if ext := strings.ToLower(s[strings.LastIndexByte(s, '.')+1:]); !strings.Contains(s, ",") &&
		(ext == "json" || ext == "yaml" || ext == "yml") {
		return readNodes(s)
	}
	if s == "" {
		return nil, errors.New("empty node list")
	}
	var nodes []ring.Node
	for i, item := range strings.Split(s, ",") {
		n, err := parseNode(strings.TrimSpace(item))
		if err != nil {
			return nil, fmt.Errorf("node %d %q: %w", i+1, strings.TrimSpace(item), err)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// parseNode reads [NAME=]HOST:PORT[*WEIGHT][@ZONE].
func parseNode(s string) (ring.Node, error) {
	var n ring.Node
	if s == "" {
		return n, errors.New("empty node (two commas in a row, or one at an end?)")
	}
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		zone := strings.TrimSpace(s[i+1:])
		if err := checkZone(zone); err != nil {
			return n, err
		}
		n.Zone, s = zone, strings.TrimSpace(s[:i])
	}
	if name, rest, ok := strings.Cut(s, "="); ok {
		if name = strings.TrimSpace(name); name == "" {
			return n, errors.New("empty name before '='")
		}
		n.Name, s = name, strings.TrimSpace(rest)
	}
	if addr, weight, ok := strings.Cut(s, "*"); ok {
		w, err := strconv.ParseFloat(strings.TrimSpace(weight), 64)
		if err != nil || !(w > 0) || math.IsInf(w, 0) {
			return n, fmt.Errorf("weight %q: want a number above 0, such as 2 or 1.05", weight)
		}
		n.Weight, s = w, strings.TrimSpace(addr)
	}
	if err := checkAddr(s); err != nil {
		return n, err
	}
	n.Addr = s
	return n, nil
}

// checkAddr checks that addr is HOST:PORT with a port number, and holds no
// space or character of the grammar (topology.CheckAddr).
func checkAddr(addr string) error {
	if err := topology.CheckAddr(addr); err != nil {
		return fmt.Errorf("address %q: want HOST:PORT with a port in 1..65535, without spaces, '=', '*' or ','", addr)
	}
	return nil
}

// checkZone checks a zone of the node-list grammar: not empty, and without
// a space or a character of the grammar.
func checkZone(zone string) error {
	if zone == "" || strings.ContainsFunc(zone, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("=*,@", r)
	}) {
		return fmt.Errorf("zone %q: want a name after '@', such as eu-west-1a, without spaces, '=', '*', ',' or '@'", zone)
	}
	return nil
}

// noZones refuses nodes with a zone where it would be lost: a topology
// (topofile, etcd) has no zone field yet.
func noZones(nodes []ring.Node) error {
	for _, n := range nodes {
		if n.Zone != "" {
			return fmt.Errorf("node %s: zone %q: a topology has no zones yet; give the list without '@ZONE'", nodeNames([]ring.Node{n}), n.Zone)
		}
	}
	return nil
}

// readNodes reads the nodes of a JSON or YAML node file, strictly: an
// unknown field is an error, so that a misspelt "wieght" does not pass for
// weight 1. The file may be a whole topology (topofile.Parse); its nodes
// are the ones after any migration it describes.
func readNodes(path string) ([]ring.Node, error) {
	t, err := topofile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return t.Nodes, nil
}

// nodeNames returns the names of nodes (addresses when unnamed), joined.
func nodeNames(nodes []ring.Node) string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
		if names[i] == "" {
			names[i] = n.Addr
		}
	}
	return strings.Join(names, ",")
}
