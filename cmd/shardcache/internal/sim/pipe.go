package sim

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// pipeDialer connects to an embedded server through an in-memory pipe
// rather than loopback TCP: the same go-redis client and protocol, without
// the four system calls per request that would make the default run several
// times slower. A stopped server refuses the dial, as a dead process's port
// does: the refusal comes back as a connection that fails with it, as from
// the client's own dialer (redisnode's quietDial), or go-redis would print
// every failed dial.
func pipeDialer(e *embedded) func(context.Context, string, string) (net.Conn, error) {
	return func(_ context.Context, network, addr string) (net.Conn, error) {
		e.mu.RLock()
		defer e.mu.RUnlock()
		if e.down {
			return refused{&net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}}, nil
		}
		client, server := net.Pipe()
		e.m.Server().ServeConn(newQueuedWrites(server))
		return &clientEnd{Conn: client}, nil
	}
}

// refused is a connection whose dial was refused: every read and write
// fails with err.
type refused struct{ err error }

func (r refused) Read([]byte) (int, error)       { return 0, r.err }
func (r refused) Write([]byte) (int, error)      { return 0, r.err }
func (refused) Close() error                     { return nil }
func (refused) LocalAddr() net.Addr              { return pipeAddr{} }
func (refused) RemoteAddr() net.Addr             { return pipeAddr{} }
func (refused) SetDeadline(time.Time) error      { return nil }
func (refused) SetReadDeadline(time.Time) error  { return nil }
func (refused) SetWriteDeadline(time.Time) error { return nil }

// pipeAddr is the address of a pipe's end.
type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// clientEnd is the client's end of a pipe. A write after the server closed
// its end fails as on a TCP connection, with EPIPE, which the client counts
// against the node: a pipe's own io.ErrClosedPipe would read as an answer.
type clientEnd struct {
	net.Conn
	closed atomic.Bool
}

func (c *clientEnd) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if errors.Is(err, io.ErrClosedPipe) && !c.closed.Load() {
		err = &net.OpError{Op: "write", Net: "pipe", Err: syscall.EPIPE}
	}
	return n, err
}

func (c *clientEnd) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// queuedWrites is the server's end of a pipe, whose writes never block: a
// goroutine delivers them in order. A net.Pipe is unbuffered, and a
// pipeline longer than the server's read buffer (a sweep's, a large
// SetMulti's) would otherwise deadlock: the server's first replies wait for
// a client that is still writing the rest of its commands.
type queuedWrites struct {
	net.Conn
	mu     sync.Mutex
	queue  chan []byte
	closed bool
}

func newQueuedWrites(c net.Conn) *queuedWrites {
	q := &queuedWrites{Conn: c, queue: make(chan []byte, 1<<14)}
	go func() {
		for p := range q.queue {
			if _, err := c.Write(p); err != nil {
				break
			}
		}
		c.Close()
		for range q.queue { // the client has gone: drop the rest
		}
	}()
	return q
}

// Write queues a copy of p.
func (q *queuedWrites) Write(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, net.ErrClosed
	}
	q.queue <- append([]byte(nil), p...)
	return len(p), nil
}

// Close closes the pipe once the queued writes are delivered.
func (q *queuedWrites) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.queue)
	}
	return nil
}
