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

// Read each node's counts: calls, hits and misses, errors, latency.
func ExampleClient_Stats() {
	srv, err := miniredis.Run() // a Redis server, for the example
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c, err := client.New(client.Options{Nodes: []ring.Node{{Name: "a", Addr: srv.Addr()}}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	c.Set(ctx, "user:42", []byte("Ada"), time.Hour)
	c.Get(ctx, "user:42")
	c.Get(ctx, "user:43")

	for _, n := range c.Stats().Nodes {
		get := n.Op("get")
		fmt.Printf("%s up=%v calls=%d hits=%d misses=%d errors=%d timed=%d\n",
			n.Node.Name, n.Up, n.Calls(), get.Hits, get.Misses, n.Errors().Total(), get.Latency.Count())
	}
	// Output:
	// a up=true calls=3 hits=1 misses=1 errors=0 timed=2
}
