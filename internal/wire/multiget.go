package wire

import (
	"bufio"
	"context"
	"time"
)

// A multi-get goes to each node in two halves: Send writes the request on
// a connection of the node's pool and returns, Recv reads the answer. A
// client that sends to every node first, then reads each answer in turn
// on its own goroutine, has the servers work in parallel as with a
// goroutine per node, and saves the goroutines and their wake-ups.

// Multi is a protocol's multi-get: how to write its request for keys, and
// read the answer into out, one Answer per key in order.
type Multi interface {
	// WriteMulti writes the request for keys to w.
	WriteMulti(w *bufio.Writer, keys []string)
	// ReadMulti returns the number of keys found, even beside an error.
	ReadMulti(c *Conn, keys []string, out []Answer) (found int, err error)
}

// Answer is one key's answer to a multi-get.
type Answer struct {
	Value []byte
	CAS   uint64
	Flags uint32
	Found bool
}

// readGrace is how long a multi-get's answer may still take to arrive once
// the caller's context has ended: the answers of the nodes read after a
// slow one are usually there already, and are returned. Go fails a read
// whose deadline has passed without looking for bytes already there, so
// the grace must outlast the reading goroutine's wait for a CPU on a busy
// machine (docs/performance.md, "The test suite on a busy machine").
const readGrace = 10 * time.Millisecond

// firstGrace is how long an answer read after it was due may take to
// bring its first bytes (Pending.Recv): a healthy node's are in the
// socket's buffer by then, so this only bounds what a second stalled node
// adds to a multi-get, and it must outlast the reading goroutine's wait
// for a CPU on a busy machine (docs/performance.md, "The test suite on a
// busy machine").
const firstGrace = 50 * time.Millisecond

// lateGrace is how long such an answer may go without bringing bytes once
// it has brought some: a quarter of ReadTimeout, at least firstGrace. Its
// server, held back by flow control while the client read other nodes,
// must be woken and given a CPU before it sends again: 50 ms was not
// always enough beside CPU-bound processes (a 24 MiB answer failed in a
// busy CI run), and the timeout the user chose says how much waiting on a
// node that is sending is normal.
func (p *Pool) lateGrace() time.Duration { return max(firstGrace, p.cfg.ReadTimeout/4) }

// Pending is a multi-get sent, its answer not yet read.
type Pending struct {
	c    *Call // nil when err
	p    *Pool
	m    Multi
	keys []string
	err  error // getting a connection or sending failed
	// deadline is when the answer is due: ReadTimeout from the send, or
	// the context's deadline if it comes first.
	deadline time.Time
	retried  bool // sent again after a pooled connection was found closed
}

// Send sends the multi-get of keys on a connection of the pool, waiting
// for one as Get does; a failure to get one or to send is Recv's.
func (p *Pool) Send(ctx context.Context, m Multi, keys []string) *Pending {
	c, err := p.Get(ctx)
	if err != nil {
		return &Pending{p: p, m: m, keys: keys, err: err}
	}
	return p.send(ctx, c, m, keys)
}

// SendIdle is Send on an idle connection; false when the pool has none
// (Send then dials, or waits). A context already ended is Recv's error, as
// Send's: nothing is sent.
func (p *Pool) SendIdle(ctx context.Context, m Multi, keys []string) (*Pending, bool) {
	if err := ctx.Err(); err != nil {
		return &Pending{p: p, m: m, keys: keys, err: err}, true
	}
	c := p.GetIdle()
	if c == nil {
		return nil, false
	}
	return p.send(ctx, c, m, keys), true
}

// TrySend is Send on TryGet's connection, without waiting: false when the
// pool has neither an idle connection nor a free place.
func (p *Pool) TrySend(ctx context.Context, m Multi, keys []string) (*Pending, bool) {
	c, err := p.TryGet(ctx)
	if err != nil {
		return &Pending{p: p, m: m, keys: keys, err: err}, true
	}
	if c == nil {
		return nil, false
	}
	return p.send(ctx, c, m, keys), true
}

func (p *Pool) send(ctx context.Context, c *Conn, m Multi, keys []string) *Pending {
	c.call = Call{Conn: c, ctx: ctx}
	g := &Pending{c: &c.call, p: p, m: m, keys: keys}
	c.SetWriteDeadline(deadlineIn(ctx, p.cfg.WriteTimeout))
	m.WriteMulti(c.W, keys)
	if err := c.W.Flush(); err != nil {
		if !c.pooled {
			err = LastWords(c.Conn, c.R, err)
		}
		g.err = g.c.End(CtxErr(ctx, err), false)
		g.c = nil
		return g
	}
	g.deadline = deadlineIn(ctx, p.cfg.ReadTimeout) // the read's timeout starts once the request is out, as go-redis's
	return g
}

// Keys returns the keys the multi-get asks for.
func (g *Pending) Keys() []string { return g.keys }

// Recv reads the answer into out, one Answer per key in order, ends the
// call and returns the number of keys found. The answer is due by
// ReadTimeout after the send, as if every node's were read at once. Read
// after that, because the client read slower nodes first, it has
// firstGrace for its first bytes, and lateGrace more after each read that
// brings some (the server, held back by flow control while the client
// read the others, is sending), up to one more ReadTimeout. When ctx ends,
// the read has readGrace left; an answer read whole is a success however
// late. A pooled connection the server closed while it was idle (a
// restart) is found by the first read: the idle ones are closed too and
// the multi-get is asked again, once, on a new connection.
func (g *Pending) Recv(out []Answer) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	ctx := g.c.ctx
	rc := g.c.Conn
	deadline := g.deadline
	if now := time.Now(); now.Add(readGrace).After(deadline) {
		rc.lateEnd = now.Add(g.p.cfg.ReadTimeout)
		if dl, ok := ctx.Deadline(); ok {
			rc.lateEnd = minTime(rc.lateEnd, maxTime(dl, now).Add(readGrace))
		}
		deadline = minTime(now.Add(firstGrace), rc.lateEnd)
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
	found, err := g.m.ReadMulti(rc, g.keys, out)
	if stop != nil && !stop() {
		// The AfterFunc has run or is running: its deadline may land on the
		// connection after this, so it is not given to another call.
		g.c.noReuse = true
	}
	if err != nil && found == 0 && rc.pooled && !g.retried && ClosedByPeer(err) && ctx.Err() == nil {
		g.c.Abandon()
		g.p.CloseIdle()
		clear(out)
		next := g.p.Send(ctx, g.m, g.keys)
		next.retried = true
		*g = *next
		return g.Recv(out)
	}
	if err != nil {
		if err, _ = PastDeadline(ctx, err); ctx.Err() != nil {
			err = CtxErr(ctx, err)
		}
	}
	g.p.Put(rc, err == nil && !g.c.noReuse)
	return found, err
}

// MaxValue bounds the size of a value in an answer: a larger one is a
// protocol error rather than an allocation (Redis's proto-max-bulk-len
// default; Memcached's items are 1 MiB by default, 1 GiB at most).
const MaxValue = 512 << 20

// maxArena bounds the buffers the values of one answer are cut from.
const maxArena = 64 << 10

// Arena is where the values of one answer are cut from: buffers shared
// with their neighbours, each value capped at its own length. The first
// buffer holds as many values of the first one's size as the answer can
// still hold (1 KiB at least), each later one is twice the last; none is
// over 64 KiB unless a value is larger, and the last value the answer can
// hold gets a buffer of its own size (so that a single key's value is one
// allocation of exactly its size). A value the caller keeps keeps its
// buffer alive.
type Arena struct {
	buf   []byte
	chunk int // the size of the last buffer
	left  int // how many values the answer can still hold; 0: not known
}

// NewArena returns an arena for an answer of at most n values.
func NewArena(n int) Arena { return Arena{left: n} }

// Read reads a value of size bytes and the CR LF after it from r.
func (a *Arena) Read(r *bufio.Reader, size int) ([]byte, error) {
	switch {
	case size < 0 || size > MaxValue:
		return nil, errBadSize(size)
	case a.buf != nil && size <= len(a.buf):
	case a.left == 1:
		a.buf = make([]byte, size)
	case a.chunk == 0 && a.left > 0: // the first: room for the rest if they are this one's size
		a.chunk = min(max(a.left*size, 1<<10), maxArena)
		a.buf = make([]byte, max(a.chunk, size))
	default:
		a.chunk = min(max(2*a.chunk, 1<<10), maxArena)
		a.buf = make([]byte, max(a.chunk, size))
	}
	a.left--
	if _, err := ioReadFull(r, a.buf[:size]); err != nil {
		return nil, err
	}
	crlf, err := r.Peek(2)
	if err != nil {
		return nil, err
	}
	if crlf[0] != '\r' || crlf[1] != '\n' {
		return nil, ErrNoCRLF
	}
	r.Discard(2)
	v := a.buf[:size:size]
	a.buf = a.buf[size:]
	return v, nil
}
