// Package topofile is a topology as a file holds it: its JSON and YAML
// encoding, the CLI's node files extended (Parse, Marshal, ReadFile), and a
// topology.Source that watches a file (Source), for configuration
// management and Kubernetes ConfigMaps.
//
// It is a package of its own so that the client, which imports topology,
// needs neither yaml nor fsnotify.
package topofile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// ErrParse is a file or a value that does not decode: bad syntax, an
// unknown field, a start that is not RFC 3339.
var ErrParse = errors.New("shardcache/topofile: cannot parse")

// Format is an encoding of a topology.
type Format int

// The encodings: the same fields in both.
const (
	JSON Format = iota
	YAML
)

// FormatOf returns the format a file name implies: YAML for .yaml and .yml,
// JSON otherwise.
func FormatOf(path string) Format {
	if lower := strings.ToLower(path); strings.HasSuffix(lower, ".yaml") || strings.HasSuffix(lower, ".yml") {
		return YAML
	}
	return JSON
}

// String returns "json" or "yaml".
func (f Format) String() string {
	if f == YAML {
		return "yaml"
	}
	return "json"
}

// fileTopology is a topology as JSON and YAML write it: the CLI's node
// files ({"nodes": [...]}, or the list alone) with optional fields beside.
type fileTopology struct {
	Version         int64          `json:"version,omitempty" yaml:"version,omitempty"`
	Nodes           []fileNode     `json:"nodes" yaml:"nodes"`
	Equalize        float64        `json:"equalize,omitempty" yaml:"equalize,omitempty"`
	Migration       *fileMigration `json:"migration,omitempty" yaml:"migration,omitempty"`
	MaxRemovedShare float64        `json:"max_removed_share,omitempty" yaml:"max_removed_share,omitempty"`
}

// fileNode is a node as a file writes it; a missing weight is 1, and an
// explicit one must be 1 or more.
type fileNode struct {
	Name   string   `json:"name,omitempty" yaml:"name,omitempty"`
	Addr   string   `json:"addr" yaml:"addr"`
	Weight *float64 `json:"weight,omitempty" yaml:"weight,omitempty"`
}

// fileMigration is a Migration as a file writes it: Start in RFC 3339,
// Window as a Go duration ("1h30m").
type fileMigration struct {
	From         []fileNode    `json:"from,omitempty" yaml:"from,omitempty"`
	FromKind     topology.Kind `json:"from_kind,omitempty" yaml:"from_kind,omitempty"`
	FromEqualize float64       `json:"from_equalize,omitempty" yaml:"from_equalize,omitempty"`
	FromHash     string        `json:"from_hash,omitempty" yaml:"from_hash,omitempty"`
	FromHashTag  string        `json:"from_hash_tag,omitempty" yaml:"from_hash_tag,omitempty"`
	Start        string        `json:"start,omitempty" yaml:"start,omitempty"`
	Window       string        `json:"window,omitempty" yaml:"window,omitempty"`
}

// Parse decodes a topology in format f and checks it (Check). The document
// is either a list of nodes, each {name, addr, weight} with name and
// weight optional, or an object:
//
//	{"version": 8,
//	 "nodes": [{"name": "a", "addr": "cache-a:11211", "weight": 2}, ...],
//	 "equalize": 0.01,
//	 "migration": {"from": [...], "from_kind": "ketama", "from_hash": "md5",
//	               "from_hash_tag": "{}", "start": "2026-05-01T10:00:00Z",
//	               "window": "1h"},
//	 "max_removed_share": 0.75}
//
// where every field but nodes is optional, and "from" defaults to the
// nodes (a change of kind alone). "equalize" is Topology.Equalize, and a
// migration's "from_equalize" (of a ring) Migration.FromEqualize. An unknown field is an error, so that a
// misspelt "wieght" does not pass for weight 1; nothing is trimmed. Syntax
// errors wrap ErrParse; the others wrap topology.Check's.
func Parse(data []byte, f Format) (*topology.Topology, error) {
	var list []fileNode
	var doc fileTopology
	var err error
	if f == YAML {
		err = decodeYAML(data, &list, &doc)
	} else {
		err = decodeJSON(data, &list, &doc)
	}
	if err != nil {
		// yaml lists its errors a line each: one line reads better in a log.
		return nil, fmt.Errorf("%w: %s", ErrParse, strings.Join(strings.Fields(err.Error()), " "))
	}
	if list != nil {
		doc.Nodes = list
	}
	t := &topology.Topology{Version: doc.Version, Equalize: doc.Equalize, MaxRemovedShare: doc.MaxRemovedShare}
	if t.Nodes, err = fromFile(doc.Nodes); err != nil {
		return nil, err
	}
	if fm := doc.Migration; fm != nil {
		m := &topology.Migration{FromKind: fm.FromKind, FromEqualize: fm.FromEqualize, FromHash: fm.FromHash, FromHashTag: fm.FromHashTag}
		if len(fm.From) > 0 {
			if m.From, err = fromFile(fm.From); err != nil {
				return nil, fmt.Errorf("migration from: %w", err)
			}
		}
		if fm.Start != "" {
			if m.Start, err = time.Parse(time.RFC3339Nano, fm.Start); err != nil {
				return nil, fmt.Errorf("%w: migration start %q: want RFC 3339, such as 2026-05-01T10:00:00Z", ErrParse, fm.Start)
			}
		}
		if fm.Window != "" {
			if m.Window, err = time.ParseDuration(fm.Window); err != nil {
				return nil, fmt.Errorf("%w: %q: want a duration such as 1h30m", topology.ErrBadWindow, fm.Window)
			}
		}
		t.Migration = m
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	return t, nil
}

// fromFile converts a file's nodes, refusing an explicit weight that is not
// positive (fractional weights, such as 1.05, are fine: see ring.Node).
func fromFile(list []fileNode) ([]ring.Node, error) {
	if len(list) == 0 {
		return nil, topology.ErrNoNodes
	}
	nodes := make([]ring.Node, len(list))
	for i, f := range list {
		nodes[i] = ring.Node{Name: f.Name, Addr: f.Addr, Weight: 1}
		if f.Weight != nil {
			if !(*f.Weight > 0) {
				return nil, fmt.Errorf("%w: node %d: weight %v: want a number above 0", topology.ErrBadWeight, i+1, *f.Weight)
			}
			nodes[i].Weight = *f.Weight
		}
	}
	return nodes, nil
}

// decodeJSON decodes a list into list, or an object into doc.
func decodeJSON(data []byte, list *[]fileNode, doc *fileTopology) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var err error
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		err = dec.Decode(list)
	} else {
		err = dec.Decode(doc)
	}
	if err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the topology")
	}
	return nil
}

// decodeYAML decodes a sequence into list, or a mapping into doc.
func decodeYAML(data []byte, list *[]fileNode, doc *fileTopology) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return err
	}
	if len(root.Content) == 0 {
		return errors.New("empty file")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if root.Content[0].Kind == yaml.SequenceNode {
		return dec.Decode(list)
	}
	return dec.Decode(doc)
}

// Marshal encodes t in format f, as an object (see Parse), indented.
func Marshal(t *topology.Topology, f Format) ([]byte, error) {
	if t == nil {
		return nil, topology.ErrNilTopology
	}
	doc := fileTopology{Version: t.Version, Nodes: toFile(t.Nodes), Equalize: t.Equalize, MaxRemovedShare: t.MaxRemovedShare}
	if m := t.Migration; m != nil {
		doc.Migration = &fileMigration{
			From: toFile(m.From), FromKind: m.FromKind, FromEqualize: m.FromEqualize, FromHash: m.FromHash, FromHashTag: m.FromHashTag,
		}
		if !m.Start.IsZero() {
			doc.Migration.Start = m.Start.Format(time.RFC3339Nano)
		}
		if m.Window != 0 {
			doc.Migration.Window = m.Window.String()
		}
	}
	if f == YAML {
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(doc); err != nil {
			return nil, err
		}
		return buf.Bytes(), enc.Close()
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	return append(data, '\n'), err
}

// toFile converts nodes for a file: weights 0 and 1 are left out.
func toFile(nodes []ring.Node) []fileNode {
	if nodes == nil {
		return nil
	}
	list := make([]fileNode, len(nodes))
	for i, n := range nodes {
		list[i] = fileNode{Name: n.Name, Addr: n.Addr}
		if n.Weight != 0 && n.Weight != 1 {
			w := n.Weight
			list[i].Weight = &w
		}
	}
	return list
}

// ReadFile reads and parses a topology file, in the format its name
// implies (FormatOf). Errors name the file.
func ReadFile(path string) (*topology.Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data, FormatOf(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}
