package etcdsource_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/etcdsource"
)

// A publisher moves the fleet from its topology to one more node, starting
// in two minutes with a window of an hour; each process watches the key
// and registers the version it runs. (Not run: it needs an etcd.)
func Example() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	src := &etcdsource.Source{Client: cli, Key: "/shardcache/sessions"}

	// The publisher: read, change, write on the revision read.
	cur, err := src.Get(ctx)
	if err != nil {
		log.Fatal(err)
	}
	next := &topology.Topology{
		Nodes: append(cur.Nodes, ring.Node{Name: "cache-e", Addr: "10.0.0.5:11211"}),
		Migration: &topology.Migration{
			From: cur.Nodes, Start: time.Now().Add(2 * time.Minute).Truncate(time.Second), Window: time.Hour,
		},
	}
	version, err := src.Publish(ctx, next, cur.Version)
	if errors.Is(err, etcdsource.ErrConflict) {
		log.Fatal("someone published meanwhile: read again and decide again")
	}

	// Each process: follow the key, and say which version it runs.
	reg, err := src.Register(ctx, "web-1", cur.Version, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	for u := range src.Watch(ctx) {
		if u.Err != nil {
			log.Print(u.Err) // keep the last topology
			continue
		}
		// ... topology.Validate, then apply u.Topology ...
		_ = reg.Set(ctx, u.Topology.Version)
		if u.Topology.Version == version {
			break
		}
	}

	st, err := src.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st) // 12 processes on version 8, 1 still on 7
}
