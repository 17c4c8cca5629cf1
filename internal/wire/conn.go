package wire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// Conn is one pooled connection with its buffers.
type Conn struct {
	net.Conn
	R *bufio.Reader
	W *bufio.Writer

	p *Pool
	// pooled: the connection has been idle in the pool, and the server may
	// have closed it meanwhile (a restart).
	pooled        bool
	created, idle time.Time
	// late, while an answer is read after it was due (Pending.Recv), makes
	// each read that brings bytes push the read deadline lateGrace on, up
	// to lateEnd: the answer came late because the client read others
	// first, and its server, held back by flow control meanwhile, is
	// sending.
	late    atomic.Bool
	lateEnd time.Time
	// call is the connection's call under way: a connection has one at a
	// time, and Begin reuses it rather than allocating one per call.
	call Call
}

func newConn(nc net.Conn, p *Pool) *Conn {
	c := &Conn{Conn: nc, W: bufio.NewWriter(nc), p: p, created: time.Now()}
	c.R = bufio.NewReader(lateReader{c})
	return c
}

// Pooled reports whether the connection was idle in the pool before this
// call: a failure on its first read may be a server that closed it while
// it was idle.
func (c *Conn) Pooled() bool { return c.pooled }

// lateReader reads c's connection, pushing its deadline on while c.late.
type lateReader struct{ c *Conn }

func (l lateReader) Read(b []byte) (int, error) {
	n, err := l.c.Conn.Read(b)
	if n > 0 && l.c.late.Load() {
		l.c.Conn.SetReadDeadline(minTime(time.Now().Add(l.c.p.lateGrace()), l.c.lateEnd))
	}
	return n, err
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Line reads one line without its CR LF; the slice is valid until the next
// read.
func (c *Conn) Line() ([]byte, error) { return ReadLine(c.R) }

// ReadLine reads one line from r without the CR and LF bytes that end it;
// the slice is valid until the next read. It trims what bytes.TrimRight(l,
// "\r\n") would, by hand: that call takes the general path for a set of
// two bytes, 3% of a multi-get's client CPU.
func ReadLine(r *bufio.Reader) ([]byte, error) {
	l, err := r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	for len(l) > 0 && (l[len(l)-1] == '\n' || l[len(l)-1] == '\r') {
		l = l[:len(l)-1]
	}
	return l, nil
}

// Call is a call under way on one connection of a pool, from Begin to End:
// bounded by its context (an AfterFunc expires the connection's deadline
// when the context ends) and by the pool's timeouts. It is valid until End
// or Abandon: the connection's next call reuses it.
type Call struct {
	*Conn
	ctx  context.Context
	stop func() bool // the context's AfterFunc; nil for a context that cannot end
	// noReuse: the connection is closed when the call ends, even after a
	// success (a deadline set by an AfterFunc may still land on it).
	noReuse bool
}

// Begin takes a connection for a call (waiting, as Get does) and bounds
// it: the write by WriteTimeout, the read by ReadTimeout from the Flush,
// both by ctx. The answer is read after Call.Flush, which sets the read's
// deadline.
func (p *Pool) Begin(ctx context.Context) (*Call, error) {
	c, err := p.Get(ctx)
	if err != nil {
		return nil, err
	}
	return p.begin(ctx, c), nil
}

// TryBegin is Begin on TryGet's connection: nil, without an error, when
// the pool has neither an idle connection nor a free place.
func (p *Pool) TryBegin(ctx context.Context) (*Call, error) {
	c, err := p.TryGet(ctx)
	if c == nil || err != nil {
		return nil, err
	}
	return p.begin(ctx, c), nil
}

func (p *Pool) begin(ctx context.Context, c *Conn) *Call {
	call := &c.call
	*call = Call{Conn: c, ctx: ctx}
	// The read's deadline is Flush's to set: one deadline set a call
	// fewer, as gomemcache's one SetDeadline sets two.
	c.SetWriteDeadline(deadlineIn(ctx, p.cfg.WriteTimeout))
	if ctx.Done() != nil {
		nc := c.Conn
		call.stop = context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	}
	return call
}

// Ctx returns the call's context.
func (c *Call) Ctx() context.Context { return c.ctx }

// Flush writes the request out and starts the answer's ReadTimeout. A
// failure on a connection just made is explained by what a TLS server
// said, if it refused the client's certificate (LastWords).
func (c *Call) Flush() error {
	if err := c.W.Flush(); err != nil {
		if !c.pooled {
			err = LastWords(c.Conn.Conn, c.R, err)
		}
		return err
	}
	c.SetReadDeadline(deadlineIn(c.ctx, c.p.cfg.ReadTimeout))
	if c.stop != nil && c.ctx.Err() != nil {
		// The context ended before this deadline was set: its AfterFunc's
		// has been overwritten, and must hold.
		c.SetDeadline(time.Unix(1, 0))
	}
	return nil
}

// End ends the call with err, the outcome of its I/O, and returns it as
// the caller should see it: the context's error, wrapping err, once ctx is
// done; a network timeout at ctx's deadline wrapped in
// context.DeadlineExceeded. The connection goes back to the pool when
// inStep, that is the stream is still in step after err (nil, or an error
// the server answered), and is closed otherwise.
func (c *Call) End(err error, inStep bool) error {
	ctxEnded := false
	if c.stop != nil {
		if !c.stop() {
			c.noReuse, ctxEnded = true, true
		} else {
			ctxEnded = c.ctx.Err() != nil
		}
	}
	if ctxEnded {
		err = CtxErr(c.ctx, err)
		inStep = false
	} else if err != nil {
		err, _ = PastDeadline(c.ctx, err)
	}
	c.p.Put(c.Conn, inStep && !c.noReuse)
	return err
}

// Abandon ends the call with no outcome and closes its connection: the
// request is asked again on another.
func (c *Call) Abandon() {
	if c.stop != nil {
		c.stop()
	}
	c.p.Put(c.Conn, false)
}

// ClosedByPeer reports whether err is how a read or a write finds a
// connection the peer closed: EOF before any byte, a reset, a broken pipe.
func ClosedByPeer(err error) bool {
	return err == io.EOF || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// LastWords returns why a TLS server closed conn, a connection just made,
// when the first write on it, err, found it closed: a server that refuses
// the client's certificate does so after the client's side of the
// handshake has ended (TLS 1.3), with an alert the write did not read. The
// alert, if still there to read from r, is the error; otherwise err.
func LastWords(conn net.Conn, r io.ByteReader, err error) error {
	if _, done := conn.(*tlsConn); done || !isTLS(conn) || !ClosedByPeer(err) {
		return err
	}
	conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, rerr := r.ReadByte(); rerr != nil && TLSFailure(rerr) {
		return rerr
	}
	return err
}

// isTLS reports whether conn, or the connection it wraps, is TLS.
func isTLS(conn net.Conn) bool {
	for range 8 {
		switch c := conn.(type) {
		case *tls.Conn, *tlsConn:
			return true
		case interface{ NetConn() net.Conn }:
			conn = c.NetConn()
		default:
			return false
		}
	}
	return false
}

// tlsConn is a TLS connection whose first write, when it finds the
// connection closed, returns why the server closed it if it said
// (LastWords): a server that refuses the client's certificate does so
// after the client's side of the handshake (TLS 1.3), and the write, not
// the handshake, is the first to fail.
type tlsConn struct {
	*tls.Conn
	wrote bool
}

func (c *tlsConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil && !c.wrote {
		err = LastWords(c.Conn, byteReader{c.Conn}, err)
	}
	c.wrote = true
	return n, err
}

// NetConn returns the TLS connection's own.
func (c *tlsConn) NetConn() net.Conn { return c.Conn.NetConn() }

// byteReader reads one byte at a time from a connection.
type byteReader struct{ c net.Conn }

func (r byteReader) ReadByte() (byte, error) {
	var b [1]byte
	_, err := r.c.Read(b[:])
	return b[0], err
}

// NewConn returns nc with its buffers, outside any pool: for a protocol's
// tests and fuzzing, which read answers from bytes.
func NewConn(nc net.Conn) *Conn { return newConn(nc, nil) }

// BytesConn is a net.Conn that reads b and discards what is written: the
// connection of a fuzz target.
type BytesConn struct {
	R *bytes.Reader
}

// Read reads from R.
func (c BytesConn) Read(p []byte) (int, error) { return c.R.Read(p) }

// Write discards p and reports it all written.
func (BytesConn) Write(p []byte) (int, error) { return len(p), nil }

// Close does nothing.
func (BytesConn) Close() error { return nil }

// LocalAddr returns an empty TCP address.
func (BytesConn) LocalAddr() net.Addr { return &net.TCPAddr{} }

// RemoteAddr returns an empty TCP address.
func (BytesConn) RemoteAddr() net.Addr { return &net.TCPAddr{} }

// SetDeadline does nothing: R never blocks.
func (BytesConn) SetDeadline(time.Time) error { return nil }

// SetReadDeadline does nothing: R never blocks.
func (BytesConn) SetReadDeadline(time.Time) error { return nil }

// SetWriteDeadline does nothing: writes never block.
func (BytesConn) SetWriteDeadline(time.Time) error { return nil }

// Stale reports whether err, a call's failure before any byte of its
// answer was read, is how a connection the server closed while it was idle
// fails (a restart of the server), on a connection that had been idle in
// the pool, with ctx still live: the request reached no live server and may
// be asked again, once, on a new connection. When it does, the call is
// abandoned and the pool's other idle connections, which the restart
// closed too, are closed.
func (c *Call) Stale(err error) bool {
	if err == nil || !c.pooled || !ClosedByPeer(err) || c.ctx.Err() != nil {
		return false
	}
	c.Abandon()
	c.p.CloseIdle()
	return true
}
