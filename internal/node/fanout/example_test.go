package fanout_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/ring"
)

// conns is a client's routing: a node client per address, and a stand-in
// failing with ErrNodeDown for the one held down.
type conns map[string]node.Node

func (c conns) Conn(n ring.Node) node.Node {
	if nd, ok := c[n.Addr]; ok {
		return nd
	}
	return node.NewFailing(node.ErrNodeDown, nil)
}

// A multi-get over three nodes, one of them down: one batch per node, every
// request sent before any answer is read; the down node's batch fails
// alone, the others answer.
func Example() {
	ctx := context.Background()
	a, b := nodetest.NewMap(), nodetest.NewMap()
	_ = a.Set(ctx, "k1", []byte("one"), time.Minute)
	_ = b.Set(ctx, "k2", []byte("two"), time.Minute)
	nodes := []ring.Node{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}, {Name: "c", Addr: "c:1"}}
	keys := []string{"k1", "k2", "k3", "k4"}
	owner := []int{0, 1, 2, 0} // k4 on a, missing there

	bs := fanout.Read(conns{"a:1": a, "b:1": b}, keys, func(i int) ring.Node { return nodes[owner[i]] })
	bs.Gets(ctx, false)
	var scratch node.Item
	for _, bt := range bs.List {
		if bt.Err != nil {
			fmt.Printf("%s: %v for %v\n", bt.Node.Name, bt.Err, bt.Keys)
			continue
		}
		for i := range bt.Answered() {
			it := bt.Answer(i, &scratch)
			fmt.Printf("%s: %s found %v %q (caller's key %d)\n", bt.Node.Name, it.Key, it.Found, it.Value, bt.Idx[i])
		}
	}
	// Output:
	// a: k1 found true "one" (caller's key 0)
	// a: k4 found false "" (caller's key 3)
	// b: k2 found true "two" (caller's key 1)
	// c: shardcache: node down for [k3]
}
