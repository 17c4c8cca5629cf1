package nodetest

import (
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
)

// Conns is a client's routing over test nodes, a node client per address,
// for the packages that take a fanout.Conns.
type Conns map[string]node.Node

// Conn returns the client of n's address, nil without one.
func (c Conns) Conn(n ring.Node) node.Node { return c[n.Addr] }
