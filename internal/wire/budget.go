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
	pools   []*Pool   // whose idle connections Acquire may close for a place
}

// waiter is a caller waiting for a place, or (pool set) for a connection
// of that pool: the first Put hands it one, and a freed place lets it
// dial. ch receives the connection, or nil for a place.
type waiter struct {
	pool *Pool
	ch   chan *Conn
}

// NewBudget returns a budget of n places.
func NewBudget(n int) *Budget { return &Budget{size: max(n, 1), free: max(n, 1)} }

// TryAcquire takes a place if one is free.
func (b *Budget) TryAcquire() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.free > 0 {
		b.free--
		return true
	}
	return false
}

// Acquire takes a place, closing an idle connection of the budget's pools
// for it if none is free, or waiting for one until ctx ends.
func (b *Budget) Acquire(ctx context.Context) error {
	b.mu.Lock()
	if b.free > 0 {
		b.free--
		b.mu.Unlock()
		return nil
	}
	for _, p := range b.pools {
		if c := p.popIdleLocked(); c != nil {
			// c's place becomes ours: close it without releasing.
			p.forgetLocked(c)
			b.mu.Unlock()
			c.Conn.Close()
			return nil
		}
	}
	w := &waiter{ch: make(chan *Conn, 1)}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		if b.cancel(w) {
			return ctx.Err()
		}
		<-w.ch // a place came at the same moment: it is ours
		return nil
	}
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
// p's waiters, if any.
func (b *Budget) handLocked(p *Pool, c *Conn) bool {
	for i, w := range b.waiters {
		if w.pool == p {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			w.ch <- c
			return true
		}
	}
	return false
}

// Dial returns dial taking a place in the budget for each connection it
// opens (Acquire, bounded by the dial's context), held until the
// connection is closed: the Dialer of another client of the node, such as
// go-redis's, whose own pool then counts against the same places.
func (b *Budget) Dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := b.Acquire(ctx); err != nil {
			return nil, err
		}
		conn, err := dial(ctx, network, addr)
		if err != nil {
			b.Release()
			return nil, err
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
