package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/shardcache/shardcache/ring"
)

// nodesHelp documents the node-list grammar, for --help.
const nodesHelp = `A node list is comma-separated nodes, each [NAME=]HOST:PORT[*WEIGHT]:
  a=cache-a:6379*2,b=cache-b:6379   names a and b, a with twice b's weight
  10.0.0.1:11211,10.0.0.2:11211     the name is the address, the weight 1
The name places the node on the ring: keep it when a server changes address.
Or a file: @FILE, or a path ending in .json, .yaml or .yml, holding a list of
{name, addr, weight} objects (or {"nodes": [...]}), name and weight optional:
  [{"name": "a", "addr": "cache-a:6379", "weight": 2}, {"addr": "cache-b:6379"}]`

// fileNode is a node as a JSON or YAML file writes it.
type fileNode struct {
	Name   string `json:"name" yaml:"name"`
	Addr   string `json:"addr" yaml:"addr"`
	Weight *int   `json:"weight" yaml:"weight"`
}

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

// parseNode reads [NAME=]HOST:PORT[*WEIGHT].
func parseNode(s string) (ring.Node, error) {
	var n ring.Node
	if s == "" {
		return n, errors.New("empty node (two commas in a row, or one at an end?)")
	}
	if name, rest, ok := strings.Cut(s, "="); ok {
		if name = strings.TrimSpace(name); name == "" {
			return n, errors.New("empty name before '='")
		}
		n.Name, s = name, strings.TrimSpace(rest)
	}
	if addr, weight, ok := strings.Cut(s, "*"); ok {
		w, err := strconv.Atoi(strings.TrimSpace(weight))
		if err != nil || w < 1 {
			return n, fmt.Errorf("weight %q: want a whole number >= 1", weight)
		}
		n.Weight, s = float64(w), strings.TrimSpace(addr)
	}
	if err := checkAddr(s); err != nil {
		return n, err
	}
	n.Addr = s
	return n, nil
}

// checkAddr checks that addr is HOST:PORT with a port number.
func checkAddr(addr string) error {
	if err := ring.CheckAddr(addr); err != nil {
		return fmt.Errorf("address %q: want HOST:PORT with a port in 1..65535", addr)
	}
	host, _, _ := net.SplitHostPort(addr)
	if strings.ContainsAny(host, "=*, \t") {
		return fmt.Errorf("address %q: host %q holds a character of the node-list grammar", addr, host)
	}
	return nil
}

// readNodes reads a JSON or YAML node file, strictly: an unknown field is an
// error, so that a misspelt "wieght" does not pass for weight 1.
func readNodes(path string) ([]ring.Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list []fileNode
	var wrapped struct {
		Nodes []fileNode `json:"nodes" yaml:"nodes"`
	}
	if lower := strings.ToLower(path); strings.HasSuffix(lower, ".yaml") || strings.HasSuffix(lower, ".yml") {
		err = decodeYAML(data, &list, &wrapped)
	} else {
		err = decodeJSON(data, &list, &wrapped)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if list == nil {
		list = wrapped.Nodes
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%s: no nodes", path)
	}
	nodes := make([]ring.Node, len(list))
	for i, f := range list {
		if err := checkAddr(f.Addr); err != nil {
			return nil, fmt.Errorf("%s: node %d: %w", path, i+1, err)
		}
		nodes[i] = ring.Node{Name: f.Name, Addr: f.Addr, Weight: 1}
		if f.Weight != nil {
			if *f.Weight < 1 {
				return nil, fmt.Errorf("%s: node %d: weight %d: want a whole number >= 1", path, i+1, *f.Weight)
			}
			nodes[i].Weight = float64(*f.Weight)
		}
	}
	return nodes, nil
}

// decodeJSON decodes a list into list, or an object into wrapped.
func decodeJSON(data []byte, list *[]fileNode, wrapped any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		return dec.Decode(list)
	}
	return dec.Decode(wrapped)
}

// decodeYAML decodes a sequence into list, or a mapping into wrapped.
func decodeYAML(data []byte, list *[]fileNode, wrapped any) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if len(doc.Content) == 0 {
		return errors.New("empty file")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if doc.Content[0].Kind == yaml.SequenceNode {
		return dec.Decode(list)
	}
	return dec.Decode(wrapped)
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
