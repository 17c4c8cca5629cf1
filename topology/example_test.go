package topology_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shardcache/shardcache/topology"
)

// A topology file as the CLI reads it, with a migration, parsed, checked
// against the topology it replaces, and its phases.
func Example() {
	prev, err := topology.Parse([]byte(`[
		{"name": "a", "addr": "cache-a:11211"},
		{"name": "b", "addr": "cache-b:11211"},
		{"name": "c", "addr": "cache-c:11211"}]`), topology.JSON)
	if err != nil {
		fmt.Println(err)
		return
	}
	next, err := topology.Parse([]byte(`
version: 8
nodes:
  - {name: a, addr: "cache-a:11211"}
  - {name: b, addr: "cache-b:11211"}
  - {name: d, addr: "cache-d:11211", weight: 2}
migration:
  from: [{name: a, addr: "cache-a:11211"}, {name: b, addr: "cache-b:11211"}, {name: c, addr: "cache-c:11211"}]
  start: 2026-05-01T10:00:00Z
  window: 1h
`), topology.YAML)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("valid:", topology.Validate(prev, next) == nil)
	start := next.Migration.Start
	for _, at := range []time.Time{start.Add(-time.Minute), start.Add(time.Minute), start.Add(2 * time.Hour)} {
		fmt.Println(at.Format(time.Kitchen), next.PhaseAt(at))
	}
	fmt.Println("received after the start:", next.Late(start.Add(time.Second)))
	// Output:
	// valid: true
	// 9:59AM before start
	// 10:01AM during window
	// 12:00PM after window
	// received after the start: true
}

// Validate refuses a change that removes more than half of the weight,
// unless the new topology allows it for this change.
func ExampleValidate() {
	prev, _ := topology.Parse([]byte(`[{"addr": "10.0.0.1:11211"}, {"addr": "10.0.0.2:11211"}, {"addr": "10.0.0.3:11211"}]`), topology.JSON)
	next, _ := topology.Parse([]byte(`[{"addr": "10.0.0.9:11211"}]`), topology.JSON)
	err := topology.Validate(prev, next)
	fmt.Println(errors.Is(err, topology.ErrTooMuchRemoved))
	next.MaxRemovedShare = 1
	fmt.Println(topology.Validate(prev, next))
	// Output:
	// true
	// <nil>
}

// Parse refuses what it cannot read exactly: a misspelt field, a padded
// address.
func ExampleParse() {
	_, err := topology.Parse([]byte(`[{"addr": "10.0.0.1:11211", "wieght": 2}]`), topology.JSON)
	fmt.Println(errors.Is(err, topology.ErrParse))
	_, err = topology.Parse([]byte(`[{"addr": "10.0.0.1:11211 "}]`), topology.JSON)
	fmt.Println(errors.Is(err, topology.ErrBadAddr))
	// Output:
	// true
	// true
}

// A client follows a file: the first update is the file's topology, and
// each rewrite of the file sends the next one.
func ExampleFile() {
	dir, _ := os.MkdirTemp("", "topology")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "nodes.json")
	_ = os.WriteFile(path, []byte(`[{"name": "a", "addr": "cache-a:11211"}]`), 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	updates := (&topology.File{Path: path}).Watch(ctx)
	u := <-updates
	fmt.Println(u.Topology.Nodes, u.Err)

	_ = os.WriteFile(path, []byte(`[{"name": "a", "addr": "cache-a:11211"}, {"name": "b", "addr": "cache-b:11211"}]`), 0o644)
	u = <-updates
	fmt.Println(u.Topology.Nodes, u.Err)

	cancel()
	for range updates { // closed once the watch has stopped
	}
	// Output:
	// [{a cache-a:11211 1}] <nil>
	// [{a cache-a:11211 1} {b cache-b:11211 1}] <nil>
}
