package client

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The sweep on Memcached: lru_crawler metadump lists the keys with their
// absolute expiry, mg reads each one's value, flags and remaining TTL (a
// multi-get and the listing's expiry where the server has no mg), and add
// writes it only where absent, with that expiry.

func (n mcNode) scan(ctx context.Context, prefix string, count int, fn func(page []item) error) error {
	listed, err := n.raw.metadump(ctx)
	if err != nil {
		return err
	}
	listed = slices.DeleteFunc(listed, func(k listedKey) bool { return !strings.HasPrefix(k.key, prefix) })
	now := time.Now()
	page := make([]item, 0, count)
	for i, k := range listed {
		it := item{key: k.key, ttlKnown: true}
		if k.exp >= 0 {
			if it.ttl = time.Unix(k.exp, 0).Sub(now); it.ttl <= 0 {
				it.ttl = time.Millisecond // expiring: the read will tell
			}
		}
		page = append(page, it)
		if len(page) == count || i == len(listed)-1 {
			if err := fn(page); err != nil {
				return err
			}
			page = make([]item, 0, count)
		}
	}
	return nil
}

func (n mcNode) dump(ctx context.Context, keys []item) ([]item, error) {
	got, err := n.getMulti(ctx, itemKeys(keys), true)
	if err != nil {
		return nil, err
	}
	for i := range got {
		if got[i].found && !got[i].ttlKnown { // no mg: the listing's expiry
			got[i].ttl, got[i].ttlKnown = keys[i].ttl, true
		}
	}
	return got, nil
}

func (n mcNode) restore(ctx context.Context, items []item) ([]bool, error) {
	return n.addMulti(ctx, items)
}

func (n mcNode) exists(ctx context.Context, keys []string) ([]bool, error) {
	return getFound(ctx, n, keys)
}

// size is the node's curr_items.
func (n mcNode) size(ctx context.Context) (int64, error) {
	var items int64
	err := n.raw.do(ctx, opSweep, func(rc *rawConn) error {
		rc.w.WriteString("stats\r\n")
		if err := rc.w.Flush(); err != nil {
			return err
		}
		for {
			l, err := rc.line()
			if err != nil {
				return err
			}
			if string(l) == "END" {
				return nil
			}
			if v, ok := bytes.CutPrefix(l, []byte("STAT curr_items ")); ok {
				items, _ = strconv.ParseInt(string(v), 10, 64)
			}
		}
	})
	return items, err
}
