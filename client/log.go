package client

import (
	"log/slog"
	"strings"

	"github.com/shardcache/shardcache/ring"
)

// Options.Logger gets the client's events, each at the moment it happens and
// never once per call: a node down or up (internal/node/health), a migration started or
// over (client.go), the backfill queue full (below). The hot path logs
// nothing: a full queue logs when it starts dropping and when it accepts a
// copy again, not at each copy dropped.

// nodeList is a placement's nodes for a log line: "name=addr" each, in the
// placement's order.
func nodeList(p ring.Locator) string {
	var b strings.Builder
	for i, n := range p.Nodes() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n.Name)
		b.WriteByte('=')
		b.WriteString(n.Addr)
	}
	return b.String()
}

// queueFull logs, once until the queue accepts a copy again, that the
// backfill queue dropped copies for node n.
func (c *Client) queueFull(n ring.Node) {
	if c.full.Load() || !c.full.CompareAndSwap(false, true) {
		return
	}
	c.opts.Logger.Warn("shardcache: backfill queue full, dropping copies", slog.String("node", n.Name),
		slog.String("addr", n.Addr), slog.Int("queue", c.opts.BackfillQueue))
}

// queueAccepts logs that the backfill queue, full before, took a copy again.
func (c *Client) queueAccepts(n ring.Node) {
	if !c.full.Load() || !c.full.CompareAndSwap(true, false) {
		return
	}
	c.opts.Logger.Info("shardcache: backfill queue accepting copies again", slog.String("node", n.Name),
		slog.String("addr", n.Addr))
}
