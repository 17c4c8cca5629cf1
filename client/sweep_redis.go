package client

import (
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The sweep on Redis: SCAN lists the keys, DUMP and PTTL read each one
// whatever its type, RESTORE without REPLACE writes it only where absent.

func (n redisNode) scan(ctx context.Context, prefix string, count int, fn func(page []item) error) error {
	match := ""
	if prefix != "" {
		match = globEscape.Replace(prefix) + "*"
	}
	var cursor uint64
	for {
		keys, next, err := n.rdb.Scan(ctx, cursor, match, int64(count)).Result()
		if err != nil {
			return redisErr(ctx, err)
		}
		if len(keys) > 0 {
			page := make([]item, len(keys))
			for i, k := range keys {
				page[i].key = k
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

// globEscape escapes the characters SCAN MATCH reads as a pattern.
var globEscape = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

func (n redisNode) dump(ctx context.Context, keys []item) ([]item, error) {
	dumps := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range keys {
			dumps[i], ttls[i] = p.Dump(ctx, it.key), p.PTTL(ctx, it.key)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, redisErr(ctx, err)
	}
	items := make([]item, len(keys))
	for i, k := range keys {
		items[i].key = k.key
		v, err := dumps[i].Bytes()
		ttl, ok := fromPTTL(ttls[i].Val())
		if err != nil || !ok {
			continue
		}
		items[i].value, items[i].found, items[i].ttl, items[i].ttlKnown = v, true, ttl, true
	}
	return items, nil
}

func (n redisNode) restore(ctx context.Context, items []item) ([]bool, error) {
	cmds := make([]*redis.StatusCmd, len(items))
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			cmds[i] = p.Restore(ctx, it.key, it.ttl, string(it.value))
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
			failed = redisErr(ctx, err)
		}
	}
	if failed != nil && !slices.Contains(stored, true) {
		return nil, failed
	}
	return stored, failed
}

func (n redisNode) exists(ctx context.Context, keys []string) ([]bool, error) {
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Exists(ctx, k)
		}
		return nil
	})
	if err != nil {
		return nil, redisErr(ctx, err)
	}
	found := make([]bool, len(keys))
	for i, c := range cmds {
		found[i] = c.Val() > 0
	}
	return found, nil
}

func (n redisNode) size(ctx context.Context) (int64, error) {
	v, err := n.rdb.DBSize(ctx).Result()
	return v, redisErr(ctx, err)
}
