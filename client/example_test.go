package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

func Example() {
	// Two Redis servers: in-process ones here, "10.0.0.1:6379" in production.
	a, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	c, err := client.New(client.Options{
		Backend: client.Redis,
		Nodes: []ring.Node{
			{Name: "a", Addr: a.Addr()},
			{Name: "b", Addr: b.Addr(), Weight: 2}, // twice the memory
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	if err := c.Set(ctx, "user:42", []byte("Ada"), time.Hour); err != nil {
		log.Fatal(err)
	}
	v, err := c.Get(ctx, "user:42")
	fmt.Printf("%s %v\n", v, err)

	_, err = c.Get(ctx, "user:43")
	fmt.Println(errors.Is(err, client.ErrCacheMiss))

	// One round trip per node; a missing key is absent from the map.
	hits, err := c.GetMulti(ctx, []string{"user:42", "user:43"})
	fmt.Println(len(hits), string(hits["user:42"]), err)

	// A hash tag keeps related keys on one node.
	fmt.Println(c.Locate("{user:42}:cart") == c.Locate("user:42"))
	// Output:
	// Ada <nil>
	// true
	// 1 Ada <nil>
	// true
}

func Example_memcached() {
	c, err := client.New(client.Options{
		Backend: client.Memcached,
		Nodes: []ring.Node{
			{Name: "a", Addr: "10.0.0.1:11211"},
			{Name: "b", Addr: "10.0.0.2:11211"},
			{Name: "c", Addr: "10.0.0.3:11211"},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// Memcached counts TTLs in whole seconds: this one is rounded up to 2s.
	if err := c.Set(ctx, "session:9f2c", []byte(`{"user":42}`), 1500*time.Millisecond); err != nil {
		log.Fatal(err)
	}
	n, err := c.Incr(ctx, "visits", 1) // created at 1 when missing
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("visits:", n)

	// A key with a space is malformed for Memcached, rejected before any I/O.
	err = c.Set(ctx, "user 42", nil, time.Minute)
	fmt.Println(errors.Is(err, client.ErrMalformedKey))
}
