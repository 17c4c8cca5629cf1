package client

import (
	"strings"

	"github.com/shardcache/shardcache/ring"
)

// Options.Logger gets the client's events, each at the moment it happens and
// never once per call: a node down or up (internal/node/health), a migration started or
// over (client.go), the backfill queue full (internal/backfill). The hot
// path logs nothing: a full queue logs when it starts dropping and when it
// accepts a copy again, not at each copy dropped.

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
