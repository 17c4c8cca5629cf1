package topology_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// A change of nodes with a migration, checked against the topology it
// replaces, and its phases.
func Example() {
	node := func(name string) ring.Node { return ring.Node{Name: name, Addr: "cache-" + name + ":11211"} }
	prev := &topology.Topology{Version: 7, Nodes: []ring.Node{node("a"), node("b"), node("c")}}
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	d := node("d")
	d.Weight = 2
	next := &topology.Topology{
		Version:   8,
		Nodes:     []ring.Node{node("a"), node("b"), d},
		Migration: &topology.Migration{From: prev.Nodes, Start: start, Window: time.Hour},
	}
	fmt.Println("valid:", topology.Validate(prev, next) == nil)
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
	prev := &topology.Topology{Nodes: []ring.Node{{Addr: "10.0.0.1:11211"}, {Addr: "10.0.0.2:11211"}, {Addr: "10.0.0.3:11211"}}}
	next := &topology.Topology{Nodes: []ring.Node{{Addr: "10.0.0.9:11211"}}}
	err := topology.Validate(prev, next)
	fmt.Println(errors.Is(err, topology.ErrTooMuchRemoved))
	next.MaxRemovedShare = 1
	fmt.Println(topology.Validate(prev, next))
	// Output:
	// true
	// <nil>
}

// A DNS source over a Kubernetes headless service: each pod of the
// StatefulSet keeps its place on the ring when it comes back with another
// IP. (Not run: it needs the cluster's DNS.)
func ExampleDNS() {
	src := &topology.DNS{Name: "_memcache._tcp.cache.default.svc.cluster.local", Interval: 10 * time.Second, Grace: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for u := range src.Watch(ctx) {
		if u.Err != nil {
			fmt.Println("keeping the last topology:", u.Err)
			continue
		}
		fmt.Println("version", u.Topology.Version, "nodes", u.Topology.Nodes)
	}
}
