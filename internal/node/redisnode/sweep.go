package redisnode

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// The sweep on Redis: SCAN lists the keys, a page at a time; DUMP and PTTL
// read each one whatever its type; RESTORE without REPLACE, in a script
// that consults the key's tombstone (tomb.go), writes it only where absent.

// Scan lists the keys that begin with o.Prefix with SCAN MATCH (o.Page:
// its COUNT hint) and calls fn with each non-empty page, Items with only
// Key set, leaving tombstones out. An error of fn ends the scan. The
// listing streams: SCAN's cursor holds nothing on the server.
func (n *Node) Scan(ctx context.Context, o node.ScanOptions, fn func(page []node.Item) error) error {
	match := ""
	if o.Prefix != "" {
		match = globEscape.Replace(o.Prefix) + "*"
	}
	count := o.PageSize()
	var cursor uint64
	for {
		keys, next, err := n.rdb.Scan(live(ctx), cursor, match, int64(count)).Result()
		if err != nil {
			return mapErr(ctx, err)
		}
		page := make([]node.Item, 0, len(keys))
		for _, k := range keys {
			if !strings.HasPrefix(k, TombPrefix) { // a tombstone is the new owner's alone
				page = append(page, node.Item{Key: k})
			}
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// Dump reads each key's DUMP payload and PTTL, in one pipeline; a key
// missing, or expired since, comes back with Found false.
func (n *Node) Dump(ctx context.Context, keys []node.Item) ([]node.Item, error) {
	dumps := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	ctx = withOp(ctx, node.OpSweep)
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range keys {
			dumps[i], ttls[i] = p.Dump(ctx, it.Key), p.PTTL(ctx, it.Key)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, mapErr(ctx, err)
	}
	items := make([]node.Item, len(keys))
	for i, k := range keys {
		items[i].Key = k.Key
		v, err := dumps[i].Bytes()
		t, ok := fromPTTL(ttls[i].Val())
		if err != nil || !ok {
			continue
		}
		items[i].Value, items[i].Found, items[i].TTL, items[i].TTLKnown = v, true, t, true
	}
	return items, nil
}

// Exists reports which keys are present, with EXISTS of each in one
// pipeline.
func (n *Node) Exists(ctx context.Context, keys []string) ([]bool, error) {
	cmds := make([]*redis.IntCmd, len(keys))
	ctx = withOp(ctx, node.OpExists)
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Exists(ctx, k)
		}
		return nil
	})
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	found := make([]bool, len(keys))
	for i, c := range cmds {
		found[i] = c.Val() > 0
	}
	return found, nil
}

// Size returns the number of keys in the node's database, tombstones
// included, with DBSIZE.
func (n *Node) Size(ctx context.Context) (int64, error) {
	v, err := n.rdb.DBSize(live(ctx)).Result()
	return v, mapErr(ctx, err)
}
