package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
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

// readGrace is how long a multi-get's answer may still take to arrive once
// the caller's context has ended: the answers of the nodes read after a
// slow one are usually there already, and are returned.
const readGrace = 2 * time.Millisecond

// getsSend sends "gets <keys...>" on a connection of the pool, bounded by
// ctx and the pool's timeout. Its error, if any, is recv's.
func (p *rawConns) getsSend(ctx context.Context, keys []string) mcGets {
	c, err := p.take(ctx, opGetMulti)
	if err != nil {
		return mcGets{keys: keys, err: err}
	}
	g := mcGets{call: c, keys: keys}
	c.SetDeadline(p.deadline(ctx))
	if err := c.sendGets(keys); err != nil {
		g.err = c.finish(ctxErr(ctx, err))
	}
	return g
}

// sendGets writes "gets <keys...>" and flushes it.
func (rc *rawConn) sendGets(keys []string) error {
	rc.w.WriteString("gets")
	for _, k := range keys {
		rc.w.WriteByte(' ')
		rc.w.WriteString(k)
	}
	rc.w.WriteString("\r\n")
	return rc.w.Flush()
}

// recv reads the answer to g into out, one item per key of g in order, and
// ends the call. The read has the pool's whole timeout from now, not from
// the send: the answers are read in turn, and one node's slow answer must
// not use up the next one's time. When ctx ends, the read has readGrace
// left; an answer read whole is a success however late.
func (g *mcGets) recv(out []item) error {
	if g.err != nil {
		return authErr(g.err)
	}
	ctx := g.call.ctx
	timeout, _ := g.call.p.knobs()
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok {
		if now := time.Now(); dl.Before(now) {
			dl = now
		}
		deadline = minTime(deadline, dl.Add(readGrace))
	}
	rc := g.call.rawConn
	rc.SetReadDeadline(deadline)
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { rc.SetReadDeadline(time.Now().Add(readGrace)) })
	}
	found, err := rc.readGets(g.keys, out)
	if stop != nil {
		stop()
	}
	if err != nil {
		if err, _ = pastDeadline(ctx, err); ctx.Err() != nil {
			err = ctxErr(ctx, err)
		}
	}
	if err = g.call.finish(err); err != nil {
		return authErr(err)
	}
	if h := g.call.p.h; h != nil {
		h.stats.keys(opGetMulti, found, len(g.keys)-found)
	}
	return nil
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
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
// neighbours, each slice capped at its own length: a buffer twice the last
// one (1 KiB first, up to maxArena), or the value's own when it is larger
// or the last the answer can hold (so a single key's value, as a Get reads
// it, is exactly its size). A value the caller keeps keeps its buffer alive.
func (rc *rawConn) readGets(keys []string, out []item) (int, error) {
	for i, k := range keys {
		out[i].key = k
	}
	var arena []byte
	chunk := 0 // the size of the last buffer
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
		// memcached answers in the order asked, skipping misses; another
		// server or a proxy may not.
		i := next
		for i < len(keys) && keys[i] != string(key) {
			i++
		}
		if i == len(keys) {
			i = slices.IndexFunc(out, func(it item) bool { return !it.found && it.key == string(key) })
			if i < 0 {
				return found, fmt.Errorf("shardcache: memcached gets: unexpected key in %q", l)
			}
		} else {
			next = i + 1
		}
		switch {
		case arena != nil && size <= len(arena):
		case found == len(keys)-1: // the last value: its own buffer, exactly
			arena = make([]byte, size)
		default: // twice the last buffer, up to maxArena, or the value alone
			chunk = min(max(2*chunk, 1<<10), maxArena)
			arena = make([]byte, max(chunk, size))
		}
		if err := rc.readValue(arena[:size], keys[i]); err != nil {
			return found, err
		}
		it := &out[i]
		it.value, it.flags, it.cas, it.found = arena[:size:size], flags, cas, true
		arena = arena[size:]
		found++
	}
}

// readValue reads the value of key into v, len(v) bytes, and the CR LF
// after it.
func (rc *rawConn) readValue(v []byte, key string) error {
	if _, err := io.ReadFull(rc.r, v); err != nil {
		return err
	}
	crlf, err := rc.r.Peek(2)
	if err != nil {
		return err
	}
	if crlf[0] != '\r' || crlf[1] != '\n' {
		return fmt.Errorf("shardcache: memcached gets: value of %q not followed by CR LF", key)
	}
	rc.r.Discard(2)
	return nil
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
