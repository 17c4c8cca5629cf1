package client

import (
	"github.com/shardcache/shardcache/internal/near"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/mcnode"
	"github.com/shardcache/shardcache/ring"
)

// newMemcachedNode makes the node client of a Memcached node: the
// package's own protocol over a pool of PoolSize connections, whose every
// value is also checked against the server's item limit (learned from it)
// unless Options.MaxValueSize set one; with a near cache store, behind it.
func (c *Client) newMemcachedNode(n ring.Node, creds Credentials, obs node.Observer, store *near.Cache) (node.Node, error) {
	o := &c.opts
	cfg := mcnode.Config{
		Addr: n.Addr, PoolSize: o.PoolSize, MaxIdle: o.MaxIdle,
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		TLS: creds.TLSConfig, Username: creds.Username, Password: creds.Password,
		Batch: o.AutoPipeline, Observer: obs,
	}
	if c.maxValueSet {
		cfg.MaxValueSize = o.MaxValueSize
	}
	return mcnode.WithNear(mcnode.New(cfg), store), nil
}
