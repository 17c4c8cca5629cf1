package mcnode

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/shardcache/shardcache/internal/node"
)

// The sweep on Memcached: lru_crawler metadump lists the keys with their
// absolute expiry, spooled to disk as they arrive; mg reads each one's
// value, flags and remaining TTL (a multi-get and the listing's expiry
// where the server has no mg); add writes it only where absent, with that
// TTL.

// Scan lists the node's keys that start with o.Prefix, o.Page at a time,
// calling fn with each page. The listing (memcache.Client.Metadump) is
// read whole first, as fast as the server sends it, into a spool file in
// o.SpoolDir (see spool: about len(key)+6 bytes a key), then paged through
// fn: a slow fn never holds the server's crawler, and the memory for it
// does not grow with the node. Each item has its key and the listing's
// TTL (TTLKnown). A listing that fails partway still pages the keys it
// listed, then returns its error.
//
// The listing is observed as one OpSweep; fn's own error ends the Scan,
// and is returned, but is no outcome of the node's; nor is the spool's.
func (n *Node) Scan(ctx context.Context, o node.ScanOptions, fn func(page []node.Item) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	count := o.PageSize()
	sp, err := newSpool(o.SpoolDir)
	if err != nil {
		return err
	}
	defer sp.close()
	var spoolErr error
	pfx := []byte(o.Prefix)
	start := n.obs.Begin()
	spooled := 0
	listErr := n.mc.Metadump(ctx, func(key []byte, exp int64) error {
		if bytes.HasPrefix(key, pfx) {
			spoolErr = sp.add(key, exp)
			if spooled++; spoolErr == nil && o.Limit > 0 && spooled >= o.Limit {
				return errLimit
			}
		}
		return spoolErr
	})
	if errors.Is(listErr, errLimit) {
		listErr = nil
	}
	if spoolErr != nil {
		n.obs.Done(ctx, node.OpSweep, start, nil)
		return spoolErr
	}
	listErr = nodeErr(listErr)
	n.obs.Done(ctx, node.OpSweep, start, listErr)
	page := make([]node.Item, 0, count)
	now := time.Now() // per page: a slow fn must not age the next page's TTLs
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		err := fn(page)
		page, now = make([]node.Item, 0, count), time.Now()
		return err
	}
	err = sp.each(func(key []byte, exp int64) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		it := node.Item{Key: string(key), TTLKnown: true}
		if exp >= 0 {
			if it.TTL = time.Unix(exp, 0).Sub(now); it.TTL <= 0 {
				it.TTL = time.Millisecond // expiring: the read will tell
			}
		}
		page = append(page, it)
		if len(page) == count {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return err
	}
	return listErr
}

// Dump reads the keys' values, flags and remaining TTLs in one round trip
// (GetMulti with TTLs: mg); where the server has no meta commands, a key
// found gets the TTL its listing gave (keys[i].TTL). It is observed as
// OpSweep, its keys not counted, as Redis's DUMP is: a sweep reads every
// key of a node, and counted as a get_multi it would raise the
// application's hit rate.
func (n *Node) Dump(ctx context.Context, keys []node.Item) ([]node.Item, error) {
	names := make([]string, len(keys))
	for i := range keys {
		names[i] = keys[i].Key
	}
	got, err := n.getMulti(ctx, node.OpSweep, names, true)
	if err != nil {
		return nil, err
	}
	for i := range got {
		if got[i].Found && !got[i].TTLKnown {
			got[i].TTL, got[i].TTLKnown = keys[i].TTL, true
		}
	}
	return got, nil
}

// Restore adds each dumped item where its key is absent, with its flags
// and TTL, in one round trip of pipelined adds: AddMulti, observed as
// OpSweep, as Redis's RESTORE is, not as the application's add_multi.
func (n *Node) Restore(ctx context.Context, items []node.Item) ([]bool, error) {
	return n.addMulti(ctx, node.OpSweep, items)
}

// Exists reports which keys the node holds: a multi-get, observed as
// OpExists, its keys not counted, as Redis's EXISTS is: a copy's check is
// no read of the application's.
func (n *Node) Exists(ctx context.Context, keys []string) ([]bool, error) {
	items, err := n.getMulti(ctx, node.OpExists, keys, false)
	if err != nil {
		return nil, err
	}
	found := make([]bool, len(items))
	for i := range items {
		found[i] = items[i].Found
	}
	return found, nil
}

// Size is the node's curr_items (stats); observed as OpSweep.
func (n *Node) Size(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	start := n.obs.Begin()
	size, err := n.mc.CurrItems(ctx)
	err = nodeErr(err)
	n.obs.Done(ctx, node.OpSweep, start, err)
	return size, err
}

// errLimit ends a listing at ScanOptions.Limit.
var errLimit = errors.New("mcnode: the listing's limit reached")
