package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/pool"
	"github.com/shardcache/shardcache/ring"
)

// CheckEmpty checks that each of nodes holds no keys, as a change that adds
// them needs before its start, and fails with ErrNodeNotEmpty (naming the
// node and its count) when one does. Reshard checks the nodes it adds
// itself; a change published to a fleet (Options.MigrateFrom, a Topology
// source) is checked by whoever publishes it, before its start: once it
// starts, the processes' own writes reach the added nodes. `shardcache
// topology publish` calls it.
//
// Each failure is a *NodeError of op "check_empty": one that holds keys
// wraps ErrNodeNotEmpty; one that cannot be read wraps its error, for
// whether it holds old keys is then unknown. A node that can neither count
// nor list its keys (ErrUnsupported) passes. A server whose count is above
// 0 is listed, stopping at the first key, since memcached counts flushed
// items until it reclaims them. The nodes are dialled with the client's
// Options (credentials, TLS), each read bounded by DefaultNodeStatsTimeout,
// and released after.
//
// It checks by address only: a server that stays in the placement while a
// key moves away from it and back (a weight raised, then lowered) may
// still hold the key's old copy, which no check of an added node sees.
func (c *Client) CheckEmpty(ctx context.Context, nodes []ring.Node) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	if len(nodes) == 0 {
		return nil
	}
	conns, err := c.acquire(nodes)
	if err != nil {
		return err
	}
	defer c.pools.Release(nodes)
	return checkEmpty(ctx, nodes, conns)
}

// acquire is c.pools.Acquire, its error ErrClosed once the client is
// closed.
func (c *Client) acquire(nodes []ring.Node) (map[string]*member, error) {
	conns, err := c.pools.Acquire(nodes)
	if errors.Is(err, pool.ErrClosed) {
		return nil, ErrClosed
	}
	return conns, err
}

// checkAdded checks the nodes p adds to the current placement, which it
// returns, through own, the clients of p's nodes.
func (c *Client) checkAdded(p ring.Locator, own map[string]*member) (ring.Locator, error) {
	st := c.state.Load()
	if st == nil {
		return nil, ErrClosed
	}
	return st.placement, checkEmpty(context.Background(), ring.Added(st.placement.Nodes(), p.Nodes()), own)
}

// checkEmpty checks each node through conns, in parallel.
func checkEmpty(ctx context.Context, nodes []ring.Node, conns map[string]*member) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, DefaultNodeStatsTimeout)
			defer cancel()
			switch count, err := holdsKeys(nctx, conns[n.Addr].Node); {
			case errors.Is(err, node.ErrUnsupported):
			case err != nil:
				errs[i] = &NodeError{Op: "check_empty", Node: n, Err: err}
			case count != 0:
				about := ""
				if count > 0 {
					about = fmt.Sprintf(" (%d by its count)", count)
				}
				errs[i] = &NodeError{Op: "check_empty", Node: n,
					Err: fmt.Errorf("%w%s, maybe older than what was written since it left: flush it before adding it", ErrNodeNotEmpty, about)}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// errHolds ends holdsKeys's listing at its first key.
var errHolds = errors.New("holds keys")

// holdsKeys reports whether n holds a live key: 0 when it holds none; when
// it does, the server's count of its keys, or -1 when the server gave no
// count. A server's count of 0 is enough (one round trip); a count above 0
// may include keys expired or flushed and not yet reclaimed (memcached's
// curr_items right after flush_all), so the node's key listing
// (Sweeper.Scan), which skips them, decides, stopping at its first key. A
// Redis whose INFO is partial (miniredis) is listed at once.
func holdsKeys(ctx context.Context, n node.Node) (int64, error) {
	count := int64(-1)
	if u, err := node.UsageOf(n).Usage(ctx); err == nil {
		if u.Items == 0 {
			return 0, nil
		}
		count = u.Items
	}
	sw := node.SweeperOf(n)
	if sw == nil {
		if count > 0 {
			return count, nil // counted, and no listing to say otherwise
		}
		return 0, fmt.Errorf("%w: the node can neither count nor list its keys", node.ErrUnsupported)
	}
	err := sw.Scan(ctx, node.ScanOptions{Page: 1, Limit: 1}, func(page []node.Item) error {
		if len(page) > 0 {
			return errHolds
		}
		return nil
	})
	switch {
	case errors.Is(err, errHolds):
		return count, nil
	case errors.Is(err, node.ErrSweepUnsupported) && count > 0:
		return count, nil
	case err != nil:
		return 0, err
	}
	return 0, nil
}
