package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

// With NearCache, hot keys are answered from process memory, before any
// call to a node: each Redis server tells the client when any client
// changes a key it holds a copy of (RESP3 client-side caching). (It needs
// real redis-servers, 6.0 or later: this example is not run.)
func ExampleOptions_nearCache() {
	c, err := client.New(client.Options{
		Nodes: []ring.Node{
			{Name: "a", Addr: "10.0.0.1:6379"},
			{Name: "b", Addr: "10.0.0.2:6379"},
		},
		// Per node: 10,000 entries, and no copy served more than 10 s after
		// it was read (the defaults).
		NearCache: &client.NearCache{MaxEntries: client.DefaultNearCacheEntries, MaxAge: 10 * time.Second},
	})
	if err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrNearCache) with a DB other than 0
	}
	defer c.Close()
	ctx := context.Background()

	if err := c.Set(ctx, "config:flags", []byte("dark-mode"), 0); err != nil {
		log.Fatal(err)
	}
	for range 1000 {
		if _, err := c.Get(ctx, "config:flags"); err != nil { // one round trip, then memory
			log.Fatal(err)
		}
	}
	for _, s := range c.NearCacheStats() {
		fmt.Printf("%s: %d near hits, %d reads from the node, %d entries\n", s.Node.Name, s.Hits, s.Misses, s.Entries)
	}
}

// On Memcached the near cache is bounded by MaxAge alone: Memcached tells
// no client of another's writes, so a value another process writes is seen
// here once the copy is MaxAge old. This client's own writes drop its copy
// at once. (It needs a real memcached: this example is not run.)
func ExampleOptions_nearCacheMemcached() {
	c, err := client.New(client.Options{
		Backend:   client.Memcached,
		Nodes:     []ring.Node{{Name: "a", Addr: "10.0.0.1:11211"}},
		NearCache: &client.NearCache{MaxAge: time.Second}, // other processes' writes seen within 1 s
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "config:flags", []byte("dark-mode"), 0); err != nil {
		log.Fatal(err)
	}
	v, err := c.Get(ctx, "config:flags") // from the server, then from memory for up to 1 s
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", v)
}
