package client

import (
	"context"
	"net"
	"sync"
)

// mcConns tracks the open connections of one node's gomemcache client, so
// that Close ends the calls in flight too: gomemcache's own Close closes only
// its idle connections, and a call that its caller gave up on (call's
// goroutine) or a probe stuck on a hung node would otherwise outlive Close
// by up to the node's timeout.
type mcConns struct {
	mu     sync.Mutex
	open   map[*mcConn]struct{}
	closed bool
}

// mcConn is a connection that leaves its set when closed.
type mcConn struct {
	net.Conn
	set *mcConns
}

func (c *mcConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.open, c)
	c.set.mu.Unlock()
	return c.Conn.Close()
}

// wrap returns dial, recording every connection it makes.
func (s *mcConns) wrap(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			conn.Close()
			return nil, net.ErrClosed
		}
		if s.open == nil {
			s.open = make(map[*mcConn]struct{})
		}
		c := &mcConn{Conn: conn, set: s}
		s.open[c] = struct{}{}
		return c, nil
	}
}

// closeAll closes every open connection, and any dialed from now on.
func (s *mcConns) closeAll() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	open := s.open
	s.open = nil
	s.mu.Unlock()
	for c := range open {
		c.Conn.Close()
	}
}
