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

// users stands for the database behind the cache.
var users = map[string]string{"user:42": "Ada", "user:43": "Grace"}

func ExampleClient_GetOrLoad() {
	srv, err := miniredis.Run() // "10.0.0.1:6379" in production
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c, err := client.New(client.Options{
		Nodes:       []ring.Node{{Name: "a", Addr: srv.Addr()}},
		NegativeTTL: time.Minute, // remember missing rows for a minute
		// At most 100 loads a second from this process; past that, callers
		// get ErrLoadThrottled instead of queueing on the database.
		LoadLimit: &client.LoadLimit{PerSecond: 100},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	loads := 0
	loadUser := func(id string) func(context.Context) ([]byte, error) {
		return func(ctx context.Context) ([]byte, error) {
			loads++ // however many callers miss at once: one load per key
			name, ok := users[id]
			if !ok {
				return nil, client.ErrNotFound
			}
			return []byte(name), nil
		}
	}
	ctx := context.Background()
	for range 3 {
		v, err := c.GetOrLoad(ctx, "user:42", time.Hour, loadUser("user:42"))
		fmt.Println(string(v), err)
	}
	_, err = c.GetOrLoad(ctx, "user:7", time.Hour, loadUser("user:7"))
	fmt.Println(errors.Is(err, client.ErrNotFound))
	_, err = c.GetOrLoad(ctx, "user:7", time.Hour, loadUser("user:7")) // cached as missing
	fmt.Println(errors.Is(err, client.ErrNotFound), "loads:", loads)
	// Output:
	// Ada <nil>
	// Ada <nil>
	// Ada <nil>
	// true
	// true loads: 2
}

func ExampleClient_GetMultiOrLoad() {
	srv, err := miniredis.Run()
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
	if err := c.Set(ctx, "user:42", []byte("Ada"), time.Hour); err != nil {
		log.Fatal(err)
	}
	// One bulk read; one batch load of exactly the misses (SELECT ... WHERE
	// id IN (...)); one bulk store.
	got, err := c.GetMultiOrLoad(ctx, []string{"user:42", "user:43", "user:7"}, time.Hour,
		func(ctx context.Context, missing []string) (map[string][]byte, error) {
			fmt.Println("loading", missing)
			rows := map[string][]byte{}
			for _, id := range missing {
				if name, ok := users[id]; ok {
					rows[id] = []byte(name)
				}
			}
			return rows, nil // a key left out is not found
		})
	fmt.Println(len(got), string(got["user:42"]), string(got["user:43"]), err)
	// Output:
	// loading [user:43 user:7]
	// 2 Ada Grace <nil>
}
