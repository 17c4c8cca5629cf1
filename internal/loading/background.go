package loading

import (
	"context"
	"sync"
)

// Background is the group of background loads under way (the client's
// refreshes), which Stop cancels and waits for. The zero value is ready.
type Background struct {
	mu     sync.Mutex
	wg     sync.WaitGroup
	ctx    context.Context // canceled by Stop; made on first use
	cancel context.CancelFunc
	closed bool
}

// Start returns the context a background load runs in, made from base's
// values but not its deadline nor its cancellation, and done, to call when
// the load ends; false once stopped, when no load may start.
func (g *Background) Start(base context.Context) (ctx context.Context, done func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, nil, false
	}
	if g.ctx == nil {
		g.ctx, g.cancel = context.WithCancel(context.Background())
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(base))
	stop := context.AfterFunc(g.ctx, cancel)
	g.wg.Add(1)
	return ctx, func() { stop(); cancel(); g.wg.Done() }, true
}

// Wait waits for the loads under way to end.
func (g *Background) Wait() { g.wg.Wait() }

// Stop cancels the loads under way, waits for them, and refuses the next.
func (g *Background) Stop() {
	g.mu.Lock()
	g.closed = true
	if g.cancel != nil {
		g.cancel()
	}
	g.mu.Unlock()
	g.wg.Wait()
}
