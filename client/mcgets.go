package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
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
	resp bool  // a Redis MGET, read with readMget
	err  error // getting a connection or sending failed

	// deadline is when the answer is due: the pool's timeout from the
	// send, or the context's deadline if it comes first.
	deadline time.Time

	retried bool // sent again after a pooled connection was found closed
}

// readGrace is how long a multi-get's answer may still take to arrive once
// the caller's context has ended: the answers of the nodes read after a
// slow one are usually there already, and are returned. Go fails a read
// whose deadline has passed without looking for bytes already there, so
// the grace must outlast the reading goroutine's wait for a CPU on a busy
// machine: 2 ms did not, under -race in CI.
const readGrace = 10 * time.Millisecond

// lateGrace is how long an answer read after it was due may go without
// bringing bytes (mcGets.recv).
const lateGrace = 20 * time.Millisecond

// maxTime returns the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// getsSend sends "gets <keys...>" on a connection of the pool, bounded by
// ctx and the pool's timeout, in a place reserve gave. Its error, if any,
// is recv's.
func (p *rawConns) getsSend(ctx context.Context, keys []string) mcGets {
	return p.send(ctx, keys, false)
}

// send sends the multi-get of keys on a connection of the pool, in a place
// reserve gave: Memcached's "gets", or with resp Redis's MGET
// (redis_raw.go).
func (p *rawConns) send(ctx context.Context, keys []string, resp bool) mcGets {
	c, err := p.take(ctx, opGetMulti)
	if err != nil {
		return mcGets{keys: keys, err: err}
	}
	return c.sendGets(keys, resp)
}

// sendIdle is send on an idle connection; false, the place kept, when the
// pool has none (or is closed): send then dials.
func (p *rawConns) sendIdle(ctx context.Context, keys []string, resp bool) (mcGets, bool) {
	rc, _ := p.getIdle()
	if rc == nil {
		return mcGets{}, false
	}
	c := rawCall{rawConn: rc, p: p, ctx: ctx, o: opGetMulti, start: p.h.begin()}
	return c.sendGets(keys, resp), true
}

// sendGets writes the multi-get of keys on c's connection.
func (c rawCall) sendGets(keys []string, resp bool) mcGets {
	ctx, p := c.ctx, c.p
	g := mcGets{call: c, keys: keys, resp: resp}
	c.SetWriteDeadline(p.writeDeadline(ctx))
	if resp {
		writeMget(c.w, keys)
	} else {
		writeGets(c.w, keys)
	}
	if err := c.w.Flush(); err != nil {
		if !c.pooled {
			err = lastWords(c.Conn, c.r, err)
		}
		g.err = c.finish(ctxErr(ctx, err))
		return g
	}
	g.deadline = p.deadline(ctx) // the read's timeout starts once the request is out, as go-redis's
	return g
}

// writeGets writes "gets <keys...>".
func writeGets(w *bufio.Writer, keys []string) {
	w.WriteString("gets")
	for _, k := range keys {
		w.WriteByte(' ')
		w.WriteString(k)
	}
	w.WriteString("\r\n")
}

// lastWords returns why a TLS server closed conn, a connection just made,
// when the first write on it, err, found it closed: a server that refuses
// the client's certificate does so after the client's side of the
// handshake has ended (TLS 1.3), with an alert the write did not read. The
// alert, if still there to read from r, is the error; otherwise err.
func lastWords(conn net.Conn, r io.ByteReader, err error) error {
	if _, ok := conn.(*tls.Conn); !ok || !closedByPeer(err) {
		return err
	}
	conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, rerr := r.ReadByte(); rerr != nil && tlsFailure(rerr) {
		return rerr
	}
	return err
}

// recv reads the answer to g into out, one answer per key of g in order,
// and ends the call. The answer is due by g.deadline, as if every node's
// were read at once. Read after that, because the client read slower nodes
// first, it has lateGrace for its first bytes, and lateGrace more after
// each read that brings some (the server, held back by flow control while
// the client read the others, is sending), up to one more timeout. When
// ctx ends, the read has readGrace left; an answer read whole is a success
// however late.
func (g *mcGets) recv(out []answer) error {
	if g.err != nil {
		return authErr(g.err)
	}
	ctx := g.call.ctx
	rc := g.call.rawConn
	deadline := g.deadline
	if now := time.Now(); now.Add(readGrace).After(deadline) {
		timeout, _ := g.call.p.knobs()
		rc.lateEnd = now.Add(timeout)
		if dl, ok := ctx.Deadline(); ok {
			rc.lateEnd = minTime(rc.lateEnd, maxTime(dl, now).Add(readGrace))
		}
		deadline = minTime(now.Add(lateGrace), rc.lateEnd)
		rc.late.Store(true)
		defer rc.late.Store(false)
	}
	rc.SetReadDeadline(deadline)
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() {
			rc.late.Store(false)
			rc.SetReadDeadline(time.Now().Add(readGrace))
		})
	}
	read := rc.readGets
	if g.resp {
		read = rc.readMget
	}
	found, err := read(g.keys, out)
	if stop != nil && !stop() {
		// The AfterFunc has run or is running: its deadline may land on the
		// connection after this, so it is not given to another call.
		g.call.noReuse = true
	}
	if err != nil && found == 0 && rc.pooled && !g.retried && closedByPeer(err) && ctx.Err() == nil {
		// The server closed the connection while it was idle, as it does
		// when it restarts (the answer ended before its first value): those
		// idle with it are closed too, and the multi-get, a read, is asked
		// again on a new connection, in the same place among the calls
		// under way.
		g.call.abandon()
		p := g.call.p
		p.closeIdle()
		p.inUse.Add(1)
		start := g.call.start
		*g = p.send(ctx, g.keys, g.resp)
		g.retried, g.call.start = true, start
		return g.recv(out)
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

// closedByPeer reports whether err is how a read finds a connection the
// peer closed: EOF before any byte, or a reset.
func closedByPeer(err error) bool {
	return err == io.EOF || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// getMulti is one multi-get of keys on a raw connection.
func (p *rawConns) getMulti(ctx context.Context, keys []string) ([]item, error) {
	out := make([]answer, len(keys))
	g := p.getsSend(ctx, keys)
	if err := g.recv(out); err != nil {
		return nil, err
	}
	items := make([]item, len(keys))
	for i := range out {
		items[i] = out[i].item(keys[i])
	}
	return items, nil
}

// answer is one key's answer to a multi-get on a raw connection: what an
// item has of it, in a third of an item's size and with one pointer where
// an item has four, for the garbage collector to scan.
type answer struct {
	value []byte
	cas   uint64
	flags uint32
	found bool
}

// item returns a as the item of key.
func (a *answer) item(key string) item {
	return item{key: key, value: a.value, found: a.found, flags: a.flags, cas: a.cas}
}

// maxArena bounds the buffers the values of one answer are cut from.
const maxArena = 64 << 10

// readGets reads the answer to "gets <keys...>": a "VALUE <key> <flags>
// <bytes> <cas>" line and the value for every key present, in the order of
// the request, then "END". It fills out[i] for keys[i] and returns the
// number of keys found. Values are cut from an arena.
func (rc *rawConn) readGets(keys []string, out []answer) (int, error) {
	a := arena{left: len(keys)}
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
			i = -1 // the first not found yet: a key may be asked for twice
			for j, k := range keys {
				if k == string(key) && !out[j].found {
					i = j
					break
				}
			}
			if i < 0 {
				return found, fmt.Errorf("shardcache: memcached gets: unexpected key in %q", l)
			}
		} else {
			next = i + 1
		}
		v, err := a.read(rc.r, size)
		if err != nil {
			return found, fmt.Errorf("shardcache: memcached gets: value of %q: %w", keys[i], err)
		}
		it := &out[i]
		it.value, it.flags, it.cas, it.found = v, flags, cas, true
		found++
	}
}

// arena is where the values of one answer are cut from: buffers shared
// with their neighbours, each value capped at its own length. A buffer is
// twice the last one (1 KiB first, up to maxArena), or the value's own when
// it is larger or the last the answer can hold (so that a single key's
// value, as a Get reads it, is one allocation of exactly its size). A value
// the caller keeps keeps its buffer alive.
type arena struct {
	buf   []byte
	chunk int // the size of the last buffer
	left  int // how many values the answer can still hold; 0: not known
}

// maxValue bounds the size of a value in an answer: a larger one is a
// protocol error rather than an allocation (Redis's proto-max-bulk-len
// default; Memcached's items are 1 MiB by default, 1 GiB at most).
const maxValue = 512 << 20

// read reads a value of size bytes and the CR LF after it from r.
func (a *arena) read(r *bufio.Reader, size int) ([]byte, error) {
	switch {
	case size > maxValue:
		return nil, fmt.Errorf("a value of %d bytes, over %d", size, maxValue)
	case a.buf != nil && size <= len(a.buf):
	case a.left == 1:
		a.buf = make([]byte, size)
	default:
		a.chunk = min(max(2*a.chunk, 1<<10), maxArena)
		a.buf = make([]byte, max(a.chunk, size))
	}
	a.left--
	if _, err := io.ReadFull(r, a.buf[:size]); err != nil {
		return nil, err
	}
	crlf, err := r.Peek(2)
	if err != nil {
		return nil, err
	}
	if crlf[0] != '\r' || crlf[1] != '\n' {
		return nil, errNoCRLF
	}
	r.Discard(2)
	v := a.buf[:size:size]
	a.buf = a.buf[size:]
	return v, nil
}

// errNoCRLF is a value not followed by CR LF.
var errNoCRLF = errors.New("not followed by CR LF")

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
