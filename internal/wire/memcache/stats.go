package memcache

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
)

// ParseStatLine parses "STAT <name> <value>"; the slices alias l. The
// value may hold spaces (a setting's text).
func ParseStatLine(l []byte) (name, value []byte, ok bool) {
	rest, ok := bytes.CutPrefix(l, []byte("STAT "))
	if !ok {
		return nil, nil, false
	}
	name, value = nextField(rest)
	if len(name) == 0 || value == nil {
		return nil, nil, false
	}
	return name, value, true
}

// Stats runs "stats" (or "stats <args>": "settings", "items", "slabs")
// and returns its lines as a map of name to value.
func (c *Client) Stats(ctx context.Context, args string) (map[string]string, error) {
	cmd := "stats"
	if args != "" {
		cmd += " " + args
	}
	call, err := c.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	call.W.WriteString(cmd)
	call.W.WriteString("\r\n")
	m := map[string]string{}
	if err = call.Flush(); err == nil {
		err = readStats(call.R, cmd, func(name, value []byte) { m[string(name)] = string(value) })
	}
	if err = end(call, err, false); err != nil {
		return nil, err
	}
	return m, nil
}

// readStats reads "STAT" lines to "END", calling fn with each.
func readStats(r *bufio.Reader, cmd string, fn func(name, value []byte)) error {
	for {
		l, err := line(r)
		if err != nil {
			return err
		}
		if string(l) == "END" {
			return nil
		}
		name, value, ok := ParseStatLine(l)
		if !ok {
			return lineErr(cmd, l)
		}
		fn(name, value)
	}
}

// Usage is what a server holds and has done, from "stats" and "stats
// settings": what balancing nodes by their load needs.
type Usage struct {
	CurrItems     int64 // items held now
	Bytes         int64 // bytes they take
	LimitMaxBytes int64 // the memory limit (-m)
	Evictions     int64 // items evicted for room since the start
	GetHits       int64
	GetMisses     int64
	ItemSizeMax   int64 // the item limit (-I)
}

// Usage reads the server's usage: "stats" and "stats settings" pipelined,
// one round trip.
func (c *Client) Usage(ctx context.Context) (Usage, error) {
	var u Usage
	stats := map[string]*int64{
		"curr_items": &u.CurrItems, "bytes": &u.Bytes, "limit_maxbytes": &u.LimitMaxBytes,
		"evictions": &u.Evictions, "get_hits": &u.GetHits, "get_misses": &u.GetMisses,
	}
	settings := map[string]*int64{"item_size_max": &u.ItemSizeMax}
	call, err := c.pool.Begin(ctx)
	if err != nil {
		return u, err
	}
	call.W.WriteString("stats\r\nstats settings\r\n")
	var bad error
	parse := func(fields map[string]*int64) func(name, value []byte) {
		return func(name, value []byte) {
			if p := fields[string(name)]; p != nil {
				n, ok := parseInt(value)
				if !ok && bad == nil {
					bad = fmt.Errorf("%w: memcached stats: %s %q", errProtocol, name, truncLine(value))
				}
				*p = n
			}
		}
	}
	if err = call.Flush(); err == nil {
		if err = readStats(call.R, "stats", parse(stats)); err == nil {
			err = readStats(call.R, "stats settings", parse(settings))
		}
	}
	if err = end(call, err, false); err != nil {
		return u, err
	}
	if bad != nil {
		return u, bad
	}
	return u, nil
}

// CurrItems returns the number of items the server holds (stats
// curr_items).
func (c *Client) CurrItems(ctx context.Context) (int64, error) {
	m, err := c.Stats(ctx, "")
	if err != nil {
		return 0, err
	}
	n, ok := parseInt([]byte(m["curr_items"]))
	if !ok {
		return 0, fmt.Errorf("%w: memcached stats: curr_items %q", errProtocol, m["curr_items"])
	}
	return n, nil
}

// The item limit.
//
// memcached refuses an item whose total size exceeds item_size_max (-I,
// default 1 MiB): items.c's item_make_header counts, beside the value,
// sizeof(item) (48 bytes on 64-bit servers), the key with its terminating
// NUL, the client flags when not 0 (4 bytes, 8 on a build with
// --enable-large-client-flags, so 8 here), the value's own CR LF (the
// data block is stored with it), and the 8-byte CAS id unless the server
// runs without CAS (-C). A value that passes here is accepted by the
// server, on every build.

// DefaultItemSizeMax is memcached's default item limit (-I 1m): the limit
// assumed for a server that does not tell its own ("stats settings"
// refused, as by a proxy).
const DefaultItemSizeMax = 1 << 20

// minItemSizeMax is the smallest item limit memcached accepts (-I 1k): a
// value within it for its key needs no look-up.
const minItemSizeMax = 1024

// Sizes of memcached's item header (items.c, item_make_header).
const (
	itemHeader = 48 // sizeof(item) on a 64-bit server
	itemCAS    = 8  // the CAS id, unless -C
	itemFlags  = 8  // the client flags when not 0: 4, or 8 with large client flags
	itemCRLF   = 2  // the value's CR LF, stored with it
)

// MaxValueFor returns the longest value a server with item limit
// itemSizeMax (with cas: CAS ids on, its default) stores under key with
// flags; negative when none fits.
func MaxValueFor(itemSizeMax int64, cas bool, key string, flags uint32) int64 {
	n := itemSizeMax - itemHeader - int64(len(key)) - 1 - itemCRLF
	if cas {
		n -= itemCAS
	}
	if flags != 0 {
		n -= itemFlags
	}
	return n
}

// limits is the server's item limit, learned once: sizeMax 0 until then.
type limits struct {
	sizeMax atomic.Int64
	cas     atomic.Bool
	learn   chan struct{} // one look-up at a time
}

func (l *limits) init() { l.learn = make(chan struct{}, 1) }

func (l *limits) learned(sizeMax int64, cas bool) {
	l.cas.Store(cas)
	l.sizeMax.Store(sizeMax)
}

// MaxValue returns the longest value the server stores under key with
// flags: Config.MaxValueSize when set, or what its item limit allows,
// learned on first use from "stats settings" (DefaultItemSizeMax when the
// server does not tell).
func (c *Client) MaxValue(ctx context.Context, key string, flags uint32) (int64, error) {
	if c.cfg.MaxValueSize > 0 {
		return int64(c.cfg.MaxValueSize), nil
	}
	sizeMax := c.limits.sizeMax.Load()
	if sizeMax == 0 {
		var err error
		if sizeMax, err = c.learnLimit(ctx); err != nil {
			return 0, err
		}
	}
	return MaxValueFor(sizeMax, c.limits.cas.Load(), key, flags), nil
}

// CheckValue returns ErrValueTooLarge when a value of n bytes is too long
// for the server under key with flags (MaxValue). A value that fits the
// smallest limit memcached can have needs no look-up.
func (c *Client) CheckValue(ctx context.Context, key string, flags uint32, n int) error {
	if c.cfg.MaxValueSize <= 0 && int64(n) <= MaxValueFor(minItemSizeMax, true, key, 1) {
		return nil
	}
	max, err := c.MaxValue(ctx, key, flags)
	if err != nil {
		return err
	}
	if int64(n) > max {
		return fmt.Errorf("%w: %q: %d bytes, the server at %s takes at most %d under that key",
			ErrValueTooLarge, truncKey(key), n, c.cfg.Addr, max)
	}
	return nil
}

// learnLimit reads the server's item_size_max and cas_enabled once. A
// server that answers without them (a proxy) gets DefaultItemSizeMax; a
// failure to ask is returned, and the next call asks again.
func (c *Client) learnLimit(ctx context.Context) (int64, error) {
	select {
	case c.limits.learn <- struct{}{}:
		defer func() { <-c.limits.learn }()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if n := c.limits.sizeMax.Load(); n != 0 { // learned while this one waited
		return n, nil
	}
	m, err := c.Stats(ctx, "settings")
	if err != nil {
		if se, ok := err.(*ServerError); !ok || se.is == ErrAuth {
			return 0, err
		}
		m = nil // a server without stats settings
	}
	sizeMax, ok := parseInt([]byte(m["item_size_max"]))
	if !ok || sizeMax <= 0 {
		sizeMax = DefaultItemSizeMax
	}
	c.limits.learned(sizeMax, m["cas_enabled"] != "no")
	return sizeMax, nil
}
