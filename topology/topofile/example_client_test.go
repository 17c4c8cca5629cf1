package topofile_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/topofile"
)

// A client follows a topology file (config management, a Kubernetes
// ConfigMap). The file grows from two nodes to three without a migration
// of its own: the client starts one Lead after it read the change, for
// Window, as every process of the fleet does when it reads the file.
// topology.DNS and etcdsource.Source are followed the same way.
func ExampleSource_client() {
	var addrs []string
	for range 3 {
		s, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		addrs = append(addrs, s.Addr())
	}
	dir, err := os.MkdirTemp("", "topology")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "sessions.json")
	write := func(version, n int) {
		nodes := ""
		for i, a := range addrs[:n] {
			if i > 0 {
				nodes += ", "
			}
			nodes += fmt.Sprintf(`{"name": "cache-%d", "addr": %q}`, i, a)
		}
		if err := os.WriteFile(path, fmt.Appendf(nil, `{"version": %d, "nodes": [%s]}`, version, nodes), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	write(1, 2)

	applied := make(chan int64, 8)
	c, err := client.New(client.Options{
		Backend: client.Redis,
		Topology: &client.TopologyOptions{
			Source: &topofile.Source{Path: path},
			Lead:   time.Minute, // more than the fleet needs to read one change
			Window: time.Hour,
			// Report the version this process runs: to etcd
			// (etcdsource.Registration.Set), a log, a metric.
			OnApply: func(t *topology.Topology) { applied <- t.Version },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("applied version", <-applied, "with", len(c.Nodes()), "nodes")

	write(2, 3)
	fmt.Println("applied version", <-applied)
	s, m := c.TopologyInfo(), c.Migration()
	fmt.Printf("%s: %d → %d nodes, window %v\n", s.Phase, len(m.OldNodes), len(m.NewNodes), m.End.Sub(m.Start))
	// Output:
	// applied version 1 with 2 nodes
	// applied version 2
	// before start: 2 → 3 nodes, window 1h0m0s
}
