package topofile_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/topofile"
)

// A topology file with a migration, as publish writes one and a
// ConfigMap may hold it.
func ExampleParse() {
	t, err := topofile.Parse([]byte(`
version: 8
nodes:
  - {name: a, addr: "cache-a:11211"}
  - {name: d, addr: "cache-d:11211", weight: 2}
migration:
  from: [{name: a, addr: "cache-a:11211"}, {name: c, addr: "cache-c:11211"}]
  start: 2026-05-01T10:00:00Z
  window: 1h
`), topofile.YAML)
	fmt.Println(t.Version, t.Nodes, t.Migration.Start, t.Migration.Window, err)
	// Output: 8 [{a cache-a:11211 1 } {d cache-d:11211 2 }] 2026-05-01 10:00:00 +0000 UTC 1h0m0s <nil>
}

// Parse refuses what it cannot read exactly: a misspelt field, a padded
// address.
func ExampleParse_refusals() {
	_, err := topofile.Parse([]byte(`[{"addr": "10.0.0.1:11211", "wieght": 2}]`), topofile.JSON)
	fmt.Println(errors.Is(err, topofile.ErrParse))
	_, err = topofile.Parse([]byte(`[{"addr": "10.0.0.1:11211 "}]`), topofile.JSON)
	fmt.Println(errors.Is(err, topology.ErrBadAddr))
	// Output:
	// true
	// true
}

// A client follows a file: the first update is the file's topology, and
// each rewrite of the file sends the next one.
func ExampleSource() {
	dir, _ := os.MkdirTemp("", "topology")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "nodes.json")
	_ = os.WriteFile(path, []byte(`[{"name": "a", "addr": "cache-a:11211"}]`), 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	updates := (&topofile.Source{Path: path}).Watch(ctx)
	u := <-updates
	fmt.Println(u.Topology.Nodes, u.Err)

	_ = os.WriteFile(path, []byte(`[{"name": "a", "addr": "cache-a:11211"}, {"name": "b", "addr": "cache-b:11211"}]`), 0o644)
	u = <-updates
	fmt.Println(u.Topology.Nodes, u.Err)

	cancel()
	for range updates { // closed once the watch has stopped
	}
	// Output:
	// [{a cache-a:11211 1 }] <nil>
	// [{a cache-a:11211 1 } {b cache-b:11211 1 }] <nil>
}
