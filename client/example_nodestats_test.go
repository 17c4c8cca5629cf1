package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

// Read what each server holds: items, memory over its limit, evictions.
// (Not run: the in-process servers of the other examples do not answer
// INFO memory; it needs real servers.)
func ExampleClient_NodeStats() {
	c, err := client.New(client.Options{
		Backend: client.Redis,
		Nodes: []ring.Node{
			{Name: "a", Addr: "10.0.0.1:6379"},
			{Name: "b", Addr: "10.0.0.2:6379"},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Off the request path: every minute, say, from a goroutine of its own
	// (package promstats polls it for Prometheus).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	usage, err := c.NodeStats(ctx)
	for _, u := range usage {
		switch {
		case errors.Is(u.Err, client.ErrNodeDown):
			fmt.Printf("%s: held down, not read\n", u.Node.Name)
		case u.Err != nil:
			fmt.Printf("%s: %v\n", u.Node.Name, u.Err)
		case u.MemoryLimit == 0:
			fmt.Printf("%s: %d items, %d bytes, no maxmemory\n", u.Node.Name, u.Items, u.Bytes)
		default:
			fmt.Printf("%s: %d items, %.0f%% of %d bytes, %d evicted\n",
				u.Node.Name, u.Items, 100*u.Fill(), u.MemoryLimit, u.Evictions)
		}
	}
	if err != nil {
		log.Print(err) // one *client.NodeError per node not read
	}
}
