package client

import (
	"fmt"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
)

// newMemcachedNode makes the node client of a Memcached node.
func (c *Client) newMemcachedNode(n ring.Node, creds Credentials, obs node.Observer) (node.Node, error) {
	return nil, fmt.Errorf("%w: memcached: not yet", ErrBadOptions)
}
