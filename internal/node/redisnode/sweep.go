package redisnode

import (
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// The sweep on Redis: SCAN lists the keys, a page at a time; DUMP and PTTL
// read each one whatever its type; RESTORE without REPLACE writes it only
// where absent.

func (n *Node) Scan(ctx context.Context, prefix string, count int, fn func(page []node.Item) error) error {
	match := ""
	if prefix != "" {
		match = globEscape.Replace(prefix) + "*"
	}
	var cursor uint64
	for {
		keys, next, err := n.rdb.Scan(live(ctx), cursor, match, int64(count)).Result()
		if err != nil {
			return mapErr(ctx, err)
		}
		if len(keys) > 0 {
			page := make([]node.Item, len(keys))
			for i, k := range keys {
				page[i].Key = k
			}
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

func (n *Node) Restore(ctx context.Context, items []node.Item) ([]bool, error) {
	cmds := make([]*redis.StatusCmd, len(items))
	ctx = withOp(ctx, node.OpSweep)
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			cmds[i] = p.Restore(ctx, it.Key, it.TTL, string(it.Value))
		}
		return nil
	})
	stored := make([]bool, len(items))
	if err == nil {
		for i := range stored {
			stored[i] = true
		}
		return stored, nil
	}
	var failed error
	for i, c := range cmds {
		switch err := c.Err(); {
		case err == nil:
			stored[i] = true
		case strings.HasPrefix(err.Error(), "BUSYKEY"): // the new owner has a newer value
		case failed == nil:
			failed = mapErr(ctx, err)
		}
	}
	if failed != nil && !slices.Contains(stored, true) {
		return nil, failed
	}
	return stored, failed
}

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

func (n *Node) Size(ctx context.Context) (int64, error) {
	v, err := n.rdb.DBSize(live(ctx)).Result()
	return v, mapErr(ctx, err)
}
