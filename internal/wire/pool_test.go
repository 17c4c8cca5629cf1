package wire

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer accepts connections and answers every line with the same
// line; it counts the connections open at once and the most seen.
type echoServer struct {
	ln         net.Listener
	open, peak atomic.Int64
	wg         sync.WaitGroup
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := s.open.Add(1)
			for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.open.Add(-1)
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(l); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

// roundTrip sends one line on a call of p and reads it back.
func roundTrip(ctx context.Context, p *Pool) error {
	c, err := p.Begin(ctx)
	if err != nil {
		return err
	}
	c.W.WriteString("ping\r\n")
	if err = c.Flush(); err == nil {
		var l []byte
		if l, err = c.Line(); err == nil && string(l) != "ping" {
			err = errors.New("bad echo " + string(l))
		}
	}
	return c.End(err, err == nil)
}

func TestPoolBounded(t *testing.T) {
	s := newEchoServer(t)
	p := NewPool(Config{Addr: s.ln.Addr().String(), Size: 4})
	defer p.Close()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 50 {
				if err := roundTrip(context.Background(), p); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if peak := s.peak.Load(); peak > 4 {
		t.Errorf("the server saw %d connections at once from a pool of 4", peak)
	}
	if st := p.Stats(); st.Open > 4 || st.Waits == 0 {
		t.Errorf("stats %+v: want at most 4 open, and waits under 64 callers", st)
	}
}

// A budget shared with another client's dialer bounds both together, and
// the other client gets a place from the pool's idle connections.
func TestBudgetShared(t *testing.T) {
	s := newEchoServer(t)
	b := NewBudget(3)
	p := NewPool(Config{Addr: s.ln.Addr().String(), Size: 3, Budget: b})
	defer p.Close()
	var d net.Dialer
	dial := b.Dial(d.DialContext)
	// Fill the budget with the pool's connections, then leave them idle.
	var calls []*Call
	for range 3 {
		c, err := p.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	if c, err := p.TryBegin(context.Background()); c != nil || err != nil {
		t.Fatalf("TryBegin with every place held: %v, %v", c, err)
	}
	for _, c := range calls {
		c.End(nil, true)
	}
	// The other client's dials close idle ones for their places.
	var others []net.Conn
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := dial(ctx, "tcp", s.ln.Addr().String())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, conn)
	}
	if st := p.Stats(); st.Open != 0 {
		t.Errorf("pool still holds %d connections", st.Open)
	}
	// Now the pool waits for a place, and gets the one the other frees.
	got := make(chan error, 1)
	go func() { got <- roundTrip(context.Background(), p) }()
	for p.Stats().Waits == 0 {
		time.Sleep(time.Millisecond) // polls a counter the goroutine sets: bounded by the test's timeout
	}
	others[0].Close()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	for _, c := range others[1:] {
		c.Close()
	}
}

func TestPoolTimeoutAndClose(t *testing.T) {
	s := newEchoServer(t)
	p := NewPool(Config{Addr: s.ln.Addr().String(), Size: 1, PoolTimeout: 50 * time.Millisecond})
	c, err := p.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Begin(context.Background()); !errors.Is(err, ErrPoolTimeout) {
		t.Errorf("second Begin on a full pool: %v, want ErrPoolTimeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Begin(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Begin with a cancelled context: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Get(context.Background())
		done <- err
	}()
	for p.Stats().Waits < 2 {
		time.Sleep(time.Millisecond)
	}
	p.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("a waiter at Close: %v, want ErrClosed", err)
	}
	// The call in flight fails: its connection was closed.
	c.W.WriteString("ping\r\n")
	if err := c.Flush(); err == nil {
		if _, err = c.Line(); err == nil {
			t.Error("a call's connection survived Close")
		}
	}
	c.End(errors.New("closed"), false)
}
