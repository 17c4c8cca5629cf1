package memcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/wire"
)

// Bounds of a listing's retries while the server's crawler is busy with
// another (one crawl at a time per server): 600 times 50 ms, 30 s.
const (
	busyRetries = 600
	busyWait    = 50 * time.Millisecond
)

// Bounds of a listing's wait for the server's hash table to end an
// expansion, which can take minutes on a large server: a wait that
// doubles from busyWait to expandWaitMax, 5 minutes in all.
const (
	expandWaitMax = time.Second
	expandBudget  = 5 * time.Minute
)

// errExpanding is ErrBusy because the server's hash table is expanding.
var errExpanding = fmt.Errorf("%w: hash table expanding", ErrBusy)

// Metadump lists every key of the server with "lru_crawler metadump",
// calling fn with each as its line is read: the key, URI-decoded (valid
// only during the call), and its expiry in Unix seconds, -1 for none. The
// listing streams: its memory does not grow with the server, whatever its
// size. fn's error ends the listing and is returned.
//
// It walks the hash table ("metadump hash", memcached 1.6): a walk of the
// LRUs ("metadump all", the fallback of older servers, remembered) misses
// keys that reads move between LRU segments meanwhile. While another crawl
// runs (BUSY) it retries, within ctx, every 50 ms for 30 s at most; while
// the server's hash table expands ("stats" says hash_is_expanding, or from
// memcached 1.6.28 "ERROR locked"), with a wait that doubles up to 1 s,
// for 5 minutes at most; then it returns ErrBusy. A server that cannot
// list (a proxy, memcached older than 1.4.31) gives ErrNoMetadump.
//
// The listing holds one connection of the pool, and the server's crawler,
// until it ends. fn must be quick: while the client does not read,
// memcached's crawler waits, which holds back its hash table's growth;
// before 1.6.39 it waits holding an item lock, so that commands to the keys
// of that lock, from any client, wait with it. A caller with slow work per
// key spools the listing first (mcnode's Scan does).
func (c *Client) Metadump(ctx context.Context, fn func(key []byte, exp int64) error) error {
	busy, wait := 0, time.Duration(0)
	var expandSince time.Time
	for {
		hash := !c.noHashDump.Load()
		listed, err := c.metadumpOnce(ctx, hash, fn)
		switch {
		case !listed && hash && errors.Is(err, ErrNoMetadump):
			c.noHashDump.Store(true)
			continue
		case err == errExpanding:
			if expandSince.IsZero() {
				expandSince, wait = time.Now(), busyWait
			} else {
				wait = min(2*wait, expandWaitMax)
			}
			if time.Since(expandSince) >= c.expandBudget() {
				return err
			}
		case err == ErrBusy && busy < busyRetries:
			busy++
			wait = busyWait
		default:
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// metadumpOnce runs one listing; listed once fn has had a key.
func (c *Client) metadumpOnce(ctx context.Context, hash bool, fn func(key []byte, exp int64) error) (listed bool, err error) {
	call, err := c.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	cmd := "lru_crawler metadump all"
	if hash {
		cmd = "lru_crawler metadump hash"
		// Before 1.6.28 the hash walk waits, holding the crawler, for a
		// hash table expansion to end, and can deadlock with one about
		// to start; a server that says it is expanding is left for now
		// (which narrows that race, but cannot close it).
		if err := c.expanding(call); err != nil {
			return false, err
		}
	}
	call.W.WriteString(cmd)
	call.W.WriteString("\r\n")
	if err = call.Flush(); err != nil {
		return false, call.End(err, false)
	}
	// Each stretch of the listing gets the read timeout, counted from the
	// last renewal: the time fn takes does not count.
	timeout := c.cfg.ReadTimeout
	renewAt := time.Now().Add(timeout / 4)
	var buf []byte
	began := false
	for {
		if now := time.Now(); now.After(renewAt) {
			call.SetReadDeadline(now.Add(timeout))
			renewAt = now.Add(timeout / 4)
			// After the renewal: a context that ended before it has had
			// its deadline overwritten.
			if err = ctx.Err(); err != nil {
				return listed, call.End(err, false)
			}
		}
		l, err := call.Line()
		if err != nil {
			return listed, call.End(err, false)
		}
		if !bytes.HasPrefix(l, []byte("key=")) {
			switch {
			case string(l) == "END":
				return listed, call.End(nil, true)
			case listed:
				return listed, call.End(protoErr(cmd, l), false)
			case string(l) == "OK" && !began:
				began = true // memcached 1.6.43 begins a listing with OK
				continue
			case bytes.HasPrefix(l, []byte("BUSY")): // another crawl runs
				return false, call.End(ErrBusy, true)
			case bytes.HasPrefix(l, []byte("ERROR locked")):
				// From 1.6.28: the hash table is expanding ("ERROR locked
				// try again later").
				return false, call.End(errExpanding, true)
			}
			err := fmt.Errorf("%w: %s: %q", ErrNoMetadump, cmd, truncLine(l))
			if se, ok := parseError(cmd, l); ok && se.is == ErrAuth {
				err = se
			}
			return false, call.End(err, true)
		}
		key, exp, perr := ParseMetadumpLine(l, buf[:0])
		if perr != nil {
			return listed, call.End(perr, false)
		}
		buf = key
		listed = true
		if err := fn(key, exp); err != nil {
			return listed, call.End(err, false)
		}
	}
}

// ParseMetadumpLine parses a metadump line, "key=<URI-encoded key>
// exp=<Unix seconds|-1> la=... cas=... ...": the key, decoded into buf's
// room (appended to buf[:0], which it returns), and its expiry.
func ParseMetadumpLine(l, buf []byte) (key []byte, exp int64, err error) {
	var gotKey, gotExp bool
	for rest := l; rest != nil; {
		var f []byte
		f, rest = nextField(rest)
		switch {
		case bytes.HasPrefix(f, []byte("key=")):
			if key, err = unescape(buf[:0], f[4:]); err != nil || len(key) == 0 {
				return nil, 0, fmt.Errorf("%w: lru_crawler metadump: bad key in %q", errProtocol, truncLine(l))
			}
			gotKey = true
		case bytes.HasPrefix(f, []byte("exp=")):
			var ok bool
			if exp, ok = parseInt(f[4:]); !ok || exp < -1 {
				return nil, 0, fmt.Errorf("%w: lru_crawler metadump: bad exp in %q", errProtocol, truncLine(l))
			}
			gotExp = true
		}
	}
	if !gotKey || !gotExp {
		return nil, 0, fmt.Errorf("%w: lru_crawler metadump: no key or exp in %q", errProtocol, truncLine(l))
	}
	return key, exp, nil
}

// expandBudget is how long a listing waits for an expansion to end.
func (c *Client) expandBudget() time.Duration {
	if c.expandFor > 0 {
		return c.expandFor
	}
	return expandBudget
}

// unescape appends s, URI-decoded (%XX), to dst.
func unescape(dst, s []byte) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			dst = append(dst, s[i])
			continue
		}
		if i+2 >= len(s) {
			return dst, errBadEscape
		}
		h, ok1 := unhex(s[i+1])
		l, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return dst, errBadEscape
		}
		dst = append(dst, h<<4|l)
		i += 2
	}
	return dst, nil
}

var errBadEscape = errors.New("bad %-escape")

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// expanding asks the server, on call's connection, whether its hash table
// is expanding (stats: hash_is_expanding), and ends call with errExpanding
// if so. A server whose stats do not say, or that refuses them, is taken as
// not expanding.
func (c *Client) expanding(call *wire.Call) error {
	call.W.WriteString("stats\r\n")
	err := call.Flush()
	busy := false
	if err == nil {
		err = readStats(call.R, "stats", func(name, value []byte) {
			busy = busy || string(name) == "hash_is_expanding" && string(value) == "1"
		})
	}
	switch {
	case err == nil && busy:
		return call.End(errExpanding, true)
	case err != nil && inStep(err, false):
		return nil // stats refused (a proxy): the listing will tell
	case err != nil:
		return call.End(err, false)
	}
	return nil
}
