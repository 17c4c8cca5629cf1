package client_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/alicebob/miniredis/v2"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

// With AutoPipeline, concurrent callers of one node share round trips; each
// still gets its own answer, and a lone caller's call is sent at once.
func ExampleOptions_autoPipeline() {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	c, err := client.New(client.Options{
		Nodes:        []ring.Node{{Name: "a", Addr: m.Addr()}},
		AutoPipeline: true, // also batches Gets on Memcached
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	var wg sync.WaitGroup
	vals := make([]string, 8)
	for i := range vals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("user:%d", i)
			if err := c.Set(ctx, k, []byte(fmt.Sprint("name ", i)), 0); err != nil {
				log.Fatal(err)
			}
			v, err := c.Get(ctx, k)
			if err != nil {
				log.Fatal(err)
			}
			vals[i] = string(v)
		}()
	}
	wg.Wait()
	fmt.Println(vals[0], "...", vals[7])
	// Output: name 0 ... name 7
}
