package wire

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// Budget is the places for connections to one node, shared by the clients
// of the node in one process: each open connection holds one, from its
// dial to its Close. A Pool takes its connections' places from its Budget;
// another client of the node (go-redis's pool) takes them through Dial.
// One mutex per node guards the budget and its pools' idle lists, so that
// a place freed anywhere reaches the first waiter, whichever client it
// waits in.
type Budget struct {
	mu      sync.Mutex
	size    int       // places in all
	free    int       // places no connection holds
	waiters []*waiter // in arrival order
	pools   []*Pool   // whose idle connections handOver may give another client
}

// waiter is a caller waiting for a place: another client's dial (pool
// nil), which a connection put back into any pool is handed to, or a call
// of pool, which a connection put back into it is; a freed place lets
// either dial. ch receives the connection, or nil for a place.
type waiter struct {
	pool *Pool
	ch   chan *Conn
}

// NewBudget returns a budget of n places.
func NewBudget(n int) *Budget { return &Budget{size: max(n, 1), free: max(n, 1)} }

// handOver takes a place for a connection of another client: a free one
// (conn nil: dial), or an idle connection of the budget's pools with its
// place, or, when there is neither, the first place freed or connection
// put back, waiting until ctx ends.
func (b *Budget) handOver(ctx context.Context) (net.Conn, error) {
	b.mu.Lock()
	if b.free > 0 {
		b.free--
		b.mu.Unlock()
		return nil, nil
	}
	for _, p := range b.pools {
		if c := p.popIdleLocked(); c != nil {
			p.forgetLocked(c)
			b.mu.Unlock()
			return c.Conn, nil
		}
	}
	w := &waiter{ch: make(chan *Conn, 1)}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case c := <-w.ch:
		return connOf(c), nil
	case <-ctx.Done():
		if b.cancel(w) {
			return nil, ctx.Err()
		}
		return connOf(<-w.ch), nil // served at the same moment: it is ours
	}
}

// connOf is the connection under c, nil for a place alone.
func connOf(c *Conn) net.Conn {
	if c == nil {
		return nil
	}
	return c.Conn
}

// Release frees a place: the first waiter gets it, or it becomes free.
func (b *Budget) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseLocked()
}

func (b *Budget) releaseLocked() {
	if len(b.waiters) > 0 {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		w.ch <- nil
		return
	}
	b.free++
}

// cancel removes w from the waiters; false if it was served meanwhile.
func (b *Budget) cancel(w *waiter) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.waiters {
		if x == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// handLocked gives c, a connection put back into pool p, to the first of
// p's waiters or of the other clients' (c then leaves p, its place with
// it), if any; false when there is none.
func (b *Budget) handLocked(p *Pool, c *Conn) bool {
	for i, w := range b.waiters {
		if w.pool == p || w.pool == nil {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			if w.pool == nil {
				p.forgetLocked(c)
			}
			w.ch <- c
			return true
		}
	}
	return false
}

// Dial returns dial taking a place in the budget for each connection it
// opens (bounded by the dial's context), held until the connection is
// closed: the Dialer of another client of the node, such as go-redis's,
// whose own pool then counts against the same places. When every place is
// held and one of the budget's pools has an idle connection, that
// connection itself is handed over, place and all, rather than closed for
// a new one to be dialed: the node sees no connection come and go (the
// other client sets it up as its own, as it does a new one).
func (b *Budget) Dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := b.handOver(ctx)
		if err != nil {
			return nil, err
		}
		if conn == nil {
			if conn, err = dial(ctx, network, addr); err != nil {
				b.Release()
				return nil, err
			}
		}
		pc := &placeConn{Conn: conn, b: b}
		if sc, ok := conn.(syscall.Conn); ok {
			return &placeSysConn{pc, sc}, nil
		}
		return pc, nil
	}
}

// placeConn is a connection that frees its place when closed.
type placeConn struct {
	net.Conn
	b    *Budget
	once sync.Once
}

func (c *placeConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.b.Release)
	return err
}

// NetConn returns the connection underneath, as crypto/tls's Conn does:
// go-redis looks through it for the socket, to peek at it.
func (c *placeConn) NetConn() net.Conn { return c.Conn }

// placeSysConn is a placeConn over a socket, whose SyscallConn go-redis
// uses to check a pooled connection before it reuses it.
type placeSysConn struct {
	*placeConn
	sc syscall.Conn
}

func (c *placeSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// expired reports whether c, idle since c.idle, may no longer be used.
func (cfg *Config) expired(c *Conn, now time.Time) bool {
	return (cfg.IdleTimeout > 0 && now.Sub(c.idle) > cfg.IdleTimeout) ||
		(cfg.MaxLifetime > 0 && now.Sub(c.created) > cfg.MaxLifetime)
}
