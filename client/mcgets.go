package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
)

// A multi-get's round on Memcached goes over the node's raw connections, in
// two halves: getsSend writes the request of every node first, then
// getsRecv reads each node's answer in turn, on the caller's goroutine. The
// servers work in parallel as they would with a goroutine per node, and the
// client saves the goroutines, their wake-ups, and gomemcache's own
// goroutine and map per node. It is the classic "gets" command that
// gomemcache's GetMulti sends, so the answers carry flags and CAS ids too.

// mcGets is a multi-get sent on a raw connection, its answer not yet read.
type mcGets struct {
	call rawCall
	keys []string
	err  error // getting a connection or sending failed
}

// getsSend sends "gets <keys...>" on a connection of the pool. Its error,
// if any, is getsRecv's.
func (p *rawConns) getsSend(ctx context.Context, keys []string) mcGets {
	c, err := p.begin(ctx, opGetMulti)
	if err != nil {
		return mcGets{keys: keys, err: err}
	}
	g := mcGets{call: c, keys: keys}
	c.w.WriteString("gets")
	for _, k := range keys {
		c.w.WriteByte(' ')
		c.w.WriteString(k)
	}
	c.w.WriteString("\r\n")
	if err := c.w.Flush(); err != nil {
		g.err = c.end(err)
	}
	return g
}

// getsRecv reads the answer to g into out, one item per key of g in order,
// and ends the call.
func (g *mcGets) recv(out []item) error {
	if g.err != nil {
		return authErr(g.err)
	}
	found, err := g.call.readGets(g.keys, out)
	if err = g.call.end(err); err != nil {
		return authErr(err)
	}
	if h := g.call.p.h; h != nil {
		h.stats.keys(opGetMulti, found, len(g.keys)-found)
	}
	return nil
}

// getMulti is one multi-get of keys on a raw connection.
func (p *rawConns) getMulti(ctx context.Context, keys []string) ([]item, error) {
	items := make([]item, len(keys))
	g := p.getsSend(ctx, keys)
	if err := g.recv(items); err != nil {
		return nil, err
	}
	return items, nil
}

// maxArena bounds the buffers the values of one answer are cut from.
const maxArena = 64 << 10

// readGets reads the answer to "gets <keys...>": a "VALUE <key> <flags>
// <bytes> <cas>" line and the value for every key present, in the order of
// the request, then "END". It fills out[i] for keys[i] and returns the
// number of keys found. Values are cut from buffers shared with their
// neighbours, each slice capped at its own length: when a value does not fit
// what is left, the next buffer has room for as many values of its size as
// keys remain (up to maxArena), so values of one size take one allocation.
func (rc *rawConn) readGets(keys []string, out []item) (int, error) {
	for i, k := range keys {
		out[i].key = k
	}
	var arena []byte
	found, next := 0, 0
	for {
		l, err := rc.line()
		if err != nil {
			return found, err
		}
		if string(l) == "END" {
			return found, nil
		}
		key, flags, size, cas, err := parseValueLine(l)
		if err != nil {
			return found, err
		}
		// The server answers in the order asked, skipping misses.
		for next < len(keys) && keys[next] != string(key) {
			next++
		}
		if next == len(keys) {
			return found, fmt.Errorf("shardcache: memcached gets: unexpected key in %q", l)
		}
		if size+2 > len(arena) {
			arena = make([]byte, max(min((size+2)*(len(keys)-next), maxArena), size+2))
		}
		if _, err := io.ReadFull(rc.r, arena[:size+2]); err != nil {
			return found, err
		}
		if arena[size] != '\r' || arena[size+1] != '\n' {
			return found, fmt.Errorf("shardcache: memcached gets: value of %q not followed by CR LF", key)
		}
		it := &out[next]
		it.value, it.flags, it.cas, it.found = arena[:size:size], flags, cas, true
		arena = arena[size+2:]
		found++
		next++
	}
}

// parseValueLine parses "VALUE <key> <flags> <bytes> [<cas>]". Any other
// line is the server's error (SERVER_ERROR, CLIENT_ERROR, ERROR) or a
// protocol error, returned as such.
func parseValueLine(l []byte) (key []byte, flags uint32, size int, cas uint64, err error) {
	rest, ok := bytes.CutPrefix(l, []byte("VALUE "))
	if !ok {
		return nil, 0, 0, 0, fmt.Errorf("shardcache: memcached gets: %q", l)
	}
	var f [4][]byte
	n := 0
	for n < len(f) && len(rest) > 0 {
		var field []byte
		field, rest, _ = bytes.Cut(rest, []byte{' '})
		f[n] = field
		n++
	}
	if n < 3 || len(rest) > 0 {
		return nil, 0, 0, 0, fmt.Errorf("shardcache: memcached gets: bad line %q", l)
	}
	fl, err1 := strconv.ParseUint(string(f[1]), 10, 32)
	sz, err2 := strconv.Atoi(string(f[2]))
	var err3 error
	if n == 4 {
		cas, err3 = strconv.ParseUint(string(f[3]), 10, 64)
	}
	if err1 != nil || err2 != nil || err3 != nil || sz < 0 {
		return nil, 0, 0, 0, fmt.Errorf("shardcache: memcached gets: bad line %q", l)
	}
	return f[0], uint32(fl), sz, cas, nil
}
