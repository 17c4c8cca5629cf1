package client

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
)

// DefaultNodeStatsTimeout bounds NodeStats's read of each node, when the
// caller's context does not end sooner.
const DefaultNodeStatsTimeout = 2 * time.Second

// NodeUsage is what one node's server holds and has done since it
// started, as the server counts it (Redis INFO, Memcached stats): what
// Stats, which counts this client's own calls, cannot see.
type NodeUsage struct {
	// Node is the node, as its placement lists it (the current one's, for
	// a node in both).
	Node ring.Node
	// Current and Old say which placements list the node, as in Stats.
	Current, Old bool
	// Items is the keys the server holds: on Redis those of the client's
	// database (INFO keyspace), on Memcached curr_items.
	Items int64
	// Bytes is the memory the data takes: Redis used_memory, what its
	// maxmemory is compared with; Memcached bytes, the items' sizes.
	Bytes int64
	// BaseBytes is the part of Bytes an empty server takes: Redis
	// used_memory_startup, 0 on Memcached.
	BaseBytes int64
	// MemoryLimit is the memory the server evicts at: Redis maxmemory,
	// Memcached limit_maxbytes (-m). 0 means none: a Redis without
	// maxmemory, which grows until the machine runs out (SystemMemory).
	MemoryLimit int64
	// SystemMemory is the machine's memory as Redis reports it
	// (total_system_memory); 0 on Memcached.
	SystemMemory int64
	// Evictions counts the keys the server evicted for room since it
	// started: Redis evicted_keys, Memcached evictions.
	Evictions int64
	// Hits and Misses are the server's own counts of reads that found
	// their key and of those that did not, every client's: Redis
	// keyspace_hits and keyspace_misses, Memcached get_hits and
	// get_misses.
	Hits, Misses int64
	// EvictionPolicy is Redis's maxmemory-policy ("allkeys-lru"; with
	// "noeviction" a full server refuses writes instead); empty on
	// Memcached, which evicts the least recently used items.
	EvictionPolicy string
	// Err is why the node could not be read, nil when it was: a
	// *NodeError whose cause is ErrNodeDown for a node the client holds
	// down (nothing was sent), or the network's or the server's error. The
	// other fields are then zero.
	Err error
}

// Fill returns the share of its memory limit the node uses,
// Bytes/MemoryLimit; NaN without a limit or a reading.
func (u NodeUsage) Fill() float64 {
	if u.Err != nil || u.MemoryLimit <= 0 {
		return math.NaN()
	}
	return float64(u.Bytes) / float64(u.MemoryLimit)
}

// NodeStats reads every node's usage from its server, all nodes at once,
// each within DefaultNodeStatsTimeout (or ctx's deadline, if sooner):
// those of the current placement and, during a migration, of the old one,
// sorted by name as in Stats. It sends one round trip per node (Redis
// INFO memory, stats and keyspace pipelined; Memcached "stats" and "stats
// settings"), counted as "other" in the node's Stats; poll it every so
// often from a goroutine of its own (package promstats does), never on a
// request's path.
//
// A node that cannot be read has its error in its NodeUsage.Err, and the
// error returned joins them all (nil when every node answered); after
// Close NodeStats returns ErrClosed.
func (c *Client) NodeStats(ctx context.Context) ([]NodeUsage, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	st := c.state.Load()
	if st == nil {
		return nil, ErrClosed
	}
	var out []NodeUsage
	for _, p := range st.listed() {
		out = append(out, NodeUsage{Node: p.Node, Current: p.current, Old: p.old})
	}
	var wg sync.WaitGroup
	for i := range out {
		u := &out[i]
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, DefaultNodeStatsTimeout)
			defer cancel()
			nu, err := node.UsageOf(st.conn(u.Node)).Usage(nctx)
			if err != nil {
				u.Err = &NodeError{Op: "node_stats", Node: u.Node, Err: err}
				return
			}
			u.Items, u.Bytes, u.BaseBytes, u.MemoryLimit, u.SystemMemory = nu.Items, nu.Bytes, nu.BaseBytes, nu.Limit, nu.SystemMemory
			u.Evictions, u.Hits, u.Misses, u.EvictionPolicy = nu.Evictions, nu.Hits, nu.Misses, nu.Policy
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b NodeUsage) int { return strings.Compare(a.Node.Name, b.Node.Name) })
	var errs []error
	for _, u := range out {
		if u.Err != nil {
			errs = append(errs, u.Err)
		}
	}
	return out, errors.Join(errs...)
}
