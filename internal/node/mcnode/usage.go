package mcnode

import (
	"context"

	"github.com/shardcache/shardcache/internal/node"
)

var _ node.UsageReporter = (*Node)(nil)

// Usage reads the server's usage: "stats" and "stats settings" pipelined
// in one round trip (memcache.Client.Usage), observed as node.OpOther.
func (n *Node) Usage(ctx context.Context) (node.Usage, error) {
	if err := ctx.Err(); err != nil {
		return node.Usage{}, err
	}
	start := n.obs.Begin()
	u, err := n.mc.Usage(ctx)
	err = nodeErr(err)
	n.obs.Done(ctx, node.OpOther, start, err)
	if err != nil {
		return node.Usage{}, err
	}
	return node.Usage{
		Items: u.CurrItems, Bytes: u.Bytes, Limit: u.LimitMaxBytes,
		Evictions: u.Evictions, Hits: u.GetHits, Misses: u.GetMisses,
	}, nil
}
