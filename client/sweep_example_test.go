package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

func ExampleClient_Sweep() {
	// Two Redis servers, in-process here; a third joins.
	var addrs []string
	for range 3 {
		s, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		addrs = append(addrs, s.Addr())
	}
	nodes := []ring.Node{{Name: "a", Addr: addrs[0]}, {Name: "b", Addr: addrs[1]}}
	c, err := client.New(client.Options{Nodes: nodes})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := range 1000 {
		if err := c.Set(ctx, fmt.Sprintf("user:%d", i), []byte("x"), 0); err != nil { // no expiry
			log.Fatal(err)
		}
	}

	// The window covers the rollout of the new node list and the sweep.
	if err := c.Reshard(append(nodes, ring.Node{Name: "c", Addr: addrs[2]}), 10*time.Minute); err != nil {
		log.Fatal(err)
	}
	total, err := c.Sweep(ctx, client.SweepOptions{})
	if err != nil {
		log.Fatal(err)
	}
	m := c.Migration()
	fmt.Printf("scanned %d, copied %d (%.0f%% of the keys move), unmoved %d\n",
		total.Scanned, total.Copied, 100*m.Moved, total.SkippedUnmoved)

	// A second run finds everything in place.
	again, _ := c.Sweep(ctx, client.SweepOptions{})
	fmt.Printf("again: copied %d, already copied %d\n", again.Copied, again.AlreadyCopied)
	// Output:
	// scanned 1000, copied 353 (33% of the keys move), unmoved 647
	// again: copied 0, already copied 353
}
