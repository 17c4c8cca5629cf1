package mcnode_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/near"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/mcnode"
)

func Example() {
	ctx := context.Background()
	n := mcnode.New(mcnode.Config{Addr: "127.0.0.1:11211", PoolSize: 8, Batch: true})
	defer n.Close()
	if err := n.Set(ctx, "user:42", []byte("Ada"), time.Hour); err != nil {
		fmt.Println(err) // node.ErrValueTooLarge before any I/O, if the server's items cannot hold it
		return
	}
	v, err := n.Get(ctx, "user:42")
	switch err {
	case nil:
		fmt.Printf("%s\n", v)
	case node.ErrCacheMiss:
		fmt.Println("miss")
	}
}

// A multi-get over several nodes: every node's request is sent first, then
// each answer read in turn, on the caller's goroutine.
func ExampleNode_Send() {
	ctx := context.Background()
	nodes := []*mcnode.Node{
		mcnode.New(mcnode.Config{Addr: "127.0.0.1:11211"}),
		mcnode.New(mcnode.Config{Addr: "127.0.0.1:11212"}),
	}
	keys := [][]string{{"a", "b"}, {"c"}}
	pending := make([]node.Pending, len(nodes))
	for i, n := range nodes {
		pending[i] = n.Send(ctx, keys[i])
	}
	for i, p := range pending {
		out := make([]node.Answer, len(keys[i]))
		err := p.Recv(out)
		fmt.Println(i, err)
	}
}

// A sweep's listing: the node's keys a page at a time, streamed.
func ExampleNode_Scan() {
	ctx := context.Background()
	n := mcnode.New(mcnode.Config{Addr: "127.0.0.1:11211"})
	defer n.Close()
	err := n.Scan(ctx, node.ScanOptions{Prefix: "user:", Page: 500}, func(page []node.Item) error {
		dumped, err := n.Dump(ctx, page) // values, flags and remaining TTLs
		_ = dumped
		return err
	})
	fmt.Println(err)
}

// A node behind a near cache: a Get keeps a copy in process memory, which
// the store answers from until a write through the node drops it, or
// MaxAge passes (Memcached tells no client of another's writes).
func ExampleWithNear() {
	ctx := context.Background()
	store := near.New(near.Config{MaxEntries: 10000, MaxAge: 10 * time.Second})
	n := mcnode.WithNear(mcnode.New(mcnode.Config{Addr: "127.0.0.1:11211"}), store)
	defer n.Close()
	_ = n.Set(ctx, "user:42", []byte("Ada"), time.Hour)
	if _, err := n.Get(ctx, "user:42"); err == nil { // from the node: the store keeps a copy
		v, found, ok := store.Get("user:42")
		fmt.Printf("%s %v %v\n", v, found, ok)
	}
	_ = n.Delete(ctx, "user:42") // drops the copy
}
