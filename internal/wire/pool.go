package wire

import (
	"context"
	"sync/atomic"
	"time"
)

// Pool is one node's connections: at most Config.Size open at once, with
// those of the other clients sharing its Budget.
type Pool struct {
	cfg  Config
	b    *Budget
	done chan struct{} // closed by Close: wakes the pool's waiters

	// Under b.mu.
	idle   []*Conn        // most recently used last
	all    map[*Conn]bool // every open connection of the pool
	closed bool

	dials, waits, timeouts atomic.Int64
}

// NewPool returns an empty pool: connections are dialed on first use.
func NewPool(cfg Config) *Pool {
	cfg.init()
	p := &Pool{cfg: cfg, b: cfg.Budget, done: make(chan struct{}), all: make(map[*Conn]bool)}
	p.b.mu.Lock()
	p.b.pools = append(p.b.pools, p)
	p.b.mu.Unlock()
	return p
}

// Config returns the pool's configuration, defaults applied.
func (p *Pool) Config() Config { return p.cfg }

// Stats is what a pool holds and has done.
type Stats struct {
	Open, Idle int   // connections open now, and of those idle
	Dials      int64 // connections dialed
	Waits      int64 // callers that waited for a connection
	Timeouts   int64 // of those, the ones that got none (ErrPoolTimeout)
}

// Stats returns the pool's statistics.
func (p *Pool) Stats() Stats {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	return Stats{Open: len(p.all), Idle: len(p.idle), Dials: p.dials.Load(), Waits: p.waits.Load(), Timeouts: p.timeouts.Load()}
}

// Get returns a connection: an idle one, a new one while the budget has
// places, or, when every place is held, the first one put back or dialed
// in a place freed, waiting at most PoolTimeout and until ctx ends.
func (p *Pool) Get(ctx context.Context) (*Conn, error) {
	c, err := p.get(ctx, true)
	return c, err
}

// TryGet returns an idle connection, or a new one if the budget has a free
// place; nil, without an error, when neither.
func (p *Pool) TryGet(ctx context.Context) (*Conn, error) {
	return p.get(ctx, false)
}

// GetIdle returns an idle connection, nil when there is none.
func (p *Pool) GetIdle() *Conn {
	b, now := p.b, p.idleClock()
	b.mu.Lock()
	if p.closed {
		b.mu.Unlock()
		return nil
	}
	c, stale := p.takeIdleLocked(now)
	b.mu.Unlock()
	closeAll(stale)
	return c
}

func (p *Pool) get(ctx context.Context, wait bool) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, now := p.b, p.idleClock()
	b.mu.Lock()
	if p.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	c, stale := p.takeIdleLocked(now)
	if c != nil {
		b.mu.Unlock()
		closeAll(stale)
		return c, nil
	}
	if b.free > 0 {
		b.free--
		b.mu.Unlock()
		closeAll(stale)
		return p.dial(ctx)
	}
	if !wait {
		b.mu.Unlock()
		closeAll(stale)
		return nil, nil
	}
	w := &waiter{pool: p, ch: make(chan *Conn, 1)}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	closeAll(stale)
	p.waits.Add(1)
	t := time.NewTimer(p.cfg.PoolTimeout)
	defer t.Stop()
	var err error
	select {
	case c := <-w.ch:
		return p.served(ctx, c)
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		p.timeouts.Add(1)
		err = ErrPoolTimeout
	case <-p.done:
		err = ErrClosed
	}
	if b.cancel(w) {
		return nil, err
	}
	// Served at the same moment: give it back.
	if c := <-w.ch; c != nil {
		p.Put(c, true)
	} else {
		b.Release()
	}
	return nil, err
}

// served turns what a waiter received into a connection: c itself, or a
// new one in the place it got.
func (p *Pool) served(ctx context.Context, c *Conn) (*Conn, error) {
	if c != nil {
		return c, nil
	}
	return p.dial(ctx)
}

// idleClock reads the clock that takeIdleLocked checks the idle
// connections' limits at, before the lock is taken (the fewer steps under
// it, the less 64 callers of one node queue for it); zero when the pool
// has no limit to check.
func (p *Pool) idleClock() time.Time {
	if p.cfg.IdleTimeout > 0 || p.cfg.MaxLifetime > 0 {
		return time.Now()
	}
	return time.Time{}
}

// takeIdleLocked pops the most recently used idle connection that has not
// expired at now (idleClock's); the expired ones it found are returned to
// be closed, their places released.
func (p *Pool) takeIdleLocked(now time.Time) (c *Conn, stale []*Conn) {
	check := !now.IsZero()
	for {
		c = p.popIdleLocked()
		if c == nil || !check || !p.cfg.expired(c, now) {
			return c, stale
		}
		p.forgetLocked(c)
		p.b.releaseLocked()
		stale = append(stale, c)
	}
}

func (p *Pool) popIdleLocked() *Conn {
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	c := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	return c
}

func (p *Pool) forgetLocked(c *Conn) { delete(p.all, c) }

func closeAll(cs []*Conn) {
	for _, c := range cs {
		c.Conn.Close()
	}
}

// dial opens a connection in a place the caller holds, bounded by
// DialTimeout and ctx; a failure frees the place.
func (p *Pool) dial(ctx context.Context) (*Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	p.dials.Add(1)
	nc, err := p.cfg.Dial(dctx, "tcp", p.cfg.Addr)
	if err != nil {
		p.b.Release()
		return nil, CtxErr(ctx, err)
	}
	c := newConn(nc, p)
	p.b.mu.Lock()
	if p.closed {
		p.b.releaseLocked()
		p.b.mu.Unlock()
		nc.Close()
		return nil, ErrClosed
	}
	p.all[c] = true
	p.b.mu.Unlock()
	return c, nil
}

// Put gives c back: to a waiter of the pool, or to the idle list if reuse
// and there is room; otherwise it is closed and its place freed. A place
// some other client waits for is freed rather than kept idle.
func (p *Pool) Put(c *Conn, reuse bool) {
	b, now := p.b, p.idleClock() // read before the lock
	b.mu.Lock()
	if !p.all[c] { // closed by Close meanwhile, and forgotten
		b.mu.Unlock()
		c.Conn.Close()
		return
	}
	if reuse && !p.closed && b.handLocked(p, c) {
		b.mu.Unlock()
		return
	}
	if !reuse || p.closed || len(b.waiters) > 0 || len(p.idle) >= p.cfg.MaxIdle || p.cfg.expired(c, now) {
		p.forgetLocked(c)
		b.releaseLocked()
		b.mu.Unlock()
		c.Conn.Close()
		return
	}
	c.pooled, c.idle = true, now
	p.idle = append(p.idle, c)
	b.mu.Unlock()
}

// CloseIdle closes the idle connections; the pool stays usable. A node
// that goes down has them closed, so that none outlives a restart of the
// server to fail a call once it is back.
func (p *Pool) CloseIdle() {
	b := p.b
	b.mu.Lock()
	idle := p.idle
	p.idle = nil
	for _, c := range idle {
		p.forgetLocked(c)
		b.releaseLocked()
	}
	b.mu.Unlock()
	closeAll(idle)
}

// Close closes every connection of the pool, those of calls in flight
// included (which then fail), and fails the calls that wait for one.
func (p *Pool) Close() error {
	b := p.b
	b.mu.Lock()
	if p.closed {
		b.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	var open []*Conn
	for c := range p.all {
		open = append(open, c)
		b.releaseLocked()
	}
	clear(p.all)
	p.idle = nil
	for i, q := range b.pools {
		if q == p {
			b.pools = append(b.pools[:i], b.pools[i+1:]...)
			break
		}
	}
	b.mu.Unlock()
	closeAll(open)
	return nil
}
