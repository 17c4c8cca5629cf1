package sim

import (
	"context"
	"net"
	"sync"

	"github.com/alicebob/miniredis/v2"
)

// pipeDialer connects to an embedded server through an in-memory pipe
// rather than loopback TCP: the same go-redis client and protocol, without
// the four system calls per request that would make the default run several
// times slower.
func pipeDialer(m *miniredis.Miniredis) func(context.Context, string, string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		m.Server().ServeConn(newQueuedWrites(server))
		return client, nil
	}
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
