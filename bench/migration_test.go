package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// BenchmarkMigration is what a migration's window costs a write of a key
// that moves, beside the same call outside any migration, paired in one
// run (BACKEND/OP/paired: base is the client without a migration, ours the
// client in the window of a migration 3 → 4 nodes): a Set reaches both
// owners at once, a Delete deletes the old owner and buries the key on the
// new one (a tombstone no copy stores over: client/copy.go). A Get of a key
// the new owner holds costs what it costs outside a window.
func BenchmarkMigration(b *testing.B) {
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		b.Run(backend.String(), func(b *testing.B) {
			nodes := backendNodes(b, backend, 4)
			steady, err := client.New(client.Options{Backend: backend, Nodes: nodes})
			if err != nil {
				b.Fatal(err)
			}
			defer steady.Close()
			migrating, err := client.New(client.Options{Backend: backend, Nodes: nodes,
				MigrateFrom: &client.MigrateFrom{Nodes: nodes[:3], Start: time.Now(), Window: time.Hour}})
			if err != nil {
				b.Fatal(err)
			}
			defer migrating.Close()
			from, _ := ring.New(nodes[:3])
			to, _ := ring.New(nodes)
			var moved []string
			for i := 0; len(moved) < 1024; i++ {
				if k := fmt.Sprintf("mig:%d", i); from.Locate(k).Addr != to.Locate(k).Addr {
					moved = append(moved, k)
				}
			}
			ctx := context.Background()
			const mask = 1023
			set := func(c *client.Client) func(int) error {
				return func(i int) error { return c.Set(ctx, moved[i&mask], benchValue, time.Hour) }
			}
			del := func(c *client.Client) func(int) error {
				return func(i int) error { return c.Delete(ctx, moved[i&mask]) }
			}
			get := func(c *client.Client) func(int) error {
				return func(i int) error { return checkValue(c.Get(ctx, moved[i&mask])) }
			}
			warm(b, set(steady), set(migrating), get(steady), get(migrating))
			b.Run("Set/paired", pairedSerial(set(steady), set(migrating)))
			b.Run("Get/paired", pairedSerial(get(steady), get(migrating)))
			b.Run("Delete/paired", pairedSerial(del(steady), del(migrating)))
		})
	}
}

// backendNodes starts n servers of backend and returns them as nodes
// cache-0, cache-1, ...
func backendNodes(b *testing.B, backend client.Backend, n int) []ring.Node {
	var servers []*testserver.Server
	if backend == client.Redis {
		servers = testserver.Redis(b, n)
	} else {
		servers = testserver.Memcached(b, n)
	}
	nodes := make([]ring.Node, len(servers))
	for i, s := range servers {
		nodes[i] = ring.Node{Name: fmt.Sprintf("cache-%d", i), Addr: s.Addr}
	}
	return nodes
}
