package node_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
)

// A node client without the usage capability (here a map) answers a read
// of its server's usage with ErrUnsupported; a node held down, with its
// stand-in's error.
func ExampleUsageOf() {
	ctx := context.Background()
	_, err := node.UsageOf(nodetest.NewMap()).Usage(ctx)
	fmt.Println(errors.Is(err, node.ErrUnsupported), err)
	_, err = node.UsageOf(node.NewFailing(node.ErrNodeDown, nil)).Usage(ctx)
	fmt.Println(err)
	// Output:
	// true shardcache: not supported by this backend: the node cannot read its server's usage
	// shardcache: node down
}
