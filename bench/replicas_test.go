package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
)

// BenchmarkReplicas is what Options.Replicas = 2 costs beside R = 1 over
// the same four servers, paired in one run (BACKEND/OP/paired: base is
// R = 1, ours R = 2): a Get of a key its first replica holds is one round
// trip either way (the replica set's look-up is the extra); a Set goes to
// both replicas at once, a Delete buries the key on both; a GetMulti of
// 100 keys asks each key's first replica.
func BenchmarkReplicas(b *testing.B) {
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		b.Run(backend.String(), func(b *testing.B) {
			nodes := backendNodes(b, backend, 4)
			one, err := client.New(client.Options{Backend: backend, Nodes: nodes})
			if err != nil {
				b.Fatal(err)
			}
			defer one.Close()
			two, err := client.New(client.Options{Backend: backend, Nodes: nodes, Replicas: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer two.Close()
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = fmt.Sprintf("rep:%d", i)
			}
			ctx := context.Background()
			const mask = 1023
			set := func(c *client.Client) func(int) error {
				return func(i int) error { return c.Set(ctx, keys[i&mask], benchValue, time.Hour) }
			}
			get := func(c *client.Client) func(int) error {
				return func(i int) error { return checkValue(c.Get(ctx, keys[i&mask])) }
			}
			del := func(c *client.Client) func(int) error {
				return func(i int) error { return c.Delete(ctx, keys[i&mask]) }
			}
			multi := func(c *client.Client) func(int) error {
				return func(i int) error {
					off := (i * 100) & mask
					if off > len(keys)-100 {
						off = 0
					}
					got, err := c.GetMulti(ctx, keys[off:off+100])
					if err == nil && len(got) != 100 {
						err = fmt.Errorf("GetMulti found %d of 100", len(got))
					}
					return err
				}
			}
			for i := range keys {
				if err := set(one)(i); err != nil {
					b.Fatal(err)
				}
				if err := set(two)(i); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("Get/paired", pairedSerial(get(one), get(two)))
			b.Run("GetMulti100/paired", pairedSerial(multi(one), multi(two)))
			b.Run("Set/paired", pairedSerial(set(one), set(two)))
			// Concurrent callers with AutoPipeline share round trips: a
			// Set's second replica costs its encoding more than its
			// syscalls.
			apOne, err := client.New(client.Options{Backend: backend, Nodes: nodes, AutoPipeline: true})
			if err != nil {
				b.Fatal(err)
			}
			defer apOne.Close()
			apTwo, err := client.New(client.Options{Backend: backend, Nodes: nodes, Replicas: 2, AutoPipeline: true})
			if err != nil {
				b.Fatal(err)
			}
			defer apTwo.Close()
			b.Run("Get/autopipeline/parallel/paired", pairedParallel(get(apOne), get(apTwo)))
			b.Run("Set/autopipeline/parallel/paired", pairedParallel(set(apOne), set(apTwo)))
			b.Run("Delete/paired", pairedSerial(del(one), del(two))) // last: the keys are gone after it
		})
	}
}
