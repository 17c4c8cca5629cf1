package client

import (
	"time"

	"github.com/shardcache/shardcache/ring"
)

// When a migration's window ends, the old placement is dropped and the pools
// of the nodes only it used are closed. An operation routed an instant
// before, still on its way to such a node, would then fail with "client
// closed". So the nodes are released after a grace period instead: twice the
// longest a round trip may take (dial, write, read), enough for an operation
// of several round trips routed before the end. Close closes everything at
// once.

// retireGrace returns the grace period for the options' timeouts.
func retireGrace(o *Options) time.Duration {
	return 2 * (o.DialTimeout + o.WriteTimeout + o.ReadTimeout)
}

// releaseLocked releases nodes once the grace period has passed. c.mu is
// held.
func (c *Client) releaseLocked(nodes []ring.Node) {
	if c.grace <= 0 {
		c.pools.Release(nodes)
		return
	}
	var t *time.Timer
	t = time.AfterFunc(c.grace, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, r := range c.releases {
			if r == t {
				c.releases = append(c.releases[:i], c.releases[i+1:]...)
				c.pools.Release(nodes)
				return
			}
		}
		// Close stopped it: the pools are closed already.
	})
	c.releases = append(c.releases, t)
}

// stopReleases cancels the pending releases: Close closes every pool. c.mu
// is held.
func (c *Client) stopReleases() {
	for _, t := range c.releases {
		t.Stop()
	}
	c.releases = nil
}
