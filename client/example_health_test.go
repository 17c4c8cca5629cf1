package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

// A node that stops answering is held down after FailureThreshold failures
// in a row: its calls then fail at once with ErrNodeDown (or, with FailOpen,
// read as misses), the other nodes' keys are untouched, and a background
// probe brings it back when it answers again.
func ExampleClient_Health() {
	a, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New(client.Options{
		Nodes:            []ring.Node{{Name: "a", Addr: a.Addr()}, {Name: "b", Addr: b.Addr()}},
		FailureThreshold: 1, // for the example; default 3
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	var onB string // a key that node b owns
	for i := 0; onB == ""; i++ {
		if k := fmt.Sprint("user:", i); c.Locate(k).Name == "b" {
			onB = k
		}
	}
	b.Close() // node b dies
	_, err = c.Get(ctx, onB)
	fmt.Println("first call:", errors.Is(err, client.ErrNodeDown))
	_, err = c.Get(ctx, onB)
	fmt.Println("then:", errors.Is(err, client.ErrNodeDown))
	for _, h := range c.Health() {
		fmt.Printf("%s down: %v\n", h.Node.Name, h.Down)
	}
	// Output:
	// first call: false
	// then: true
	// a down: false
	// b down: true
}
