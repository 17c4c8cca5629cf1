package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// holdDeletes holds the first DEL of key its node gets, once armed, until
// release: a Delete routed during the window, on its way to the old owner.
type holdDeletes struct {
	*trap
	key              string
	entered, release chan struct{}
}

func (holdDeletes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h holdDeletes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "del" && cmd.Args()[1] == h.key && h.armed.CompareAndSwap(true, false) {
			close(h.entered)
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func (holdDeletes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestWindowEndGrace checks that an operation routed just before the window
// ends finishes on the old owner, which the end of the window would
// otherwise have closed under it ("client closed"); with no grace period it
// does fail, which shows the race is real.
func TestWindowEndGrace(t *testing.T) {
	for _, grace := range []bool{true, false} {
		name := map[bool]string{true: "grace", false: "no grace"}[grace]
		t.Run(name, func(t *testing.T) {
			cl := newCluster(t, "miniredis", 2)
			from, to := cl.nodes(0, 1), cl.nodes(0)
			var k string // a key of the old owner, node 1
			for i := 0; k == ""; i++ {
				if key := fmt.Sprintf("user:%d", i); mustRing(t, from).Locate(key).Addr == cl.addrs[1] {
					k = key
				}
			}
			hold := holdDeletes{trap: &trap{}, key: k, entered: make(chan struct{}), release: make(chan struct{})}
			clock := newFakeClock()
			c := cl.client(t, Options{Nodes: from, Now: clock.Now, NewRedisClient: func(n ring.Node, opt *redis.Options) *redis.Client {
				rdb := redis.NewClient(opt)
				if n.Addr == cl.addrs[1] {
					rdb.AddHook(hold)
				}
				return rdb
			}})
			if !grace {
				c.grace = 0
			}
			if err := c.Reshard(to, time.Minute); err != nil {
				t.Fatal(err)
			}
			hold.armed.Store(true)
			done := make(chan error, 1)
			go func() { done <- c.Delete(context.Background(), k) }()
			<-hold.entered // routed, and on its way to the old owner
			clock.Advance(2 * time.Minute)
			c.retireIfOver() // the window is over: the old owner is retired
			if st := c.state.Load(); st.mig != nil {
				t.Fatal("the migration was not retired")
			}
			close(hold.release)
			err := <-done
			if grace {
				if err != nil {
					t.Fatalf("Delete routed before the window ended = %v; want nil", err)
				}
				if open := c.pools.Addrs(); !slices.Contains(open, cl.addrs[1]) {
					t.Fatalf("the retired node's pool closed before its grace period: %v", open)
				}
				return
			}
			if !errors.Is(err, redis.ErrClosed) {
				t.Fatalf("without a grace period, Delete = %v; want the race's redis.ErrClosed", err)
			}
		})
	}
}

// stuckAdds is a Memcached stand-in that answers every get with a miss and
// never answers an add: a new owner that hangs on backfills.
type stuckAdds struct {
	addr  string
	added chan struct{} // closed when the first add arrives
}

func newStuckAdds(t *testing.T) *stuckAdds {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stuckAdds{addr: l.Addr().String(), added: make(chan struct{})}
	var wg sync.WaitGroup
	var once sync.Once
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					switch {
					case strings.HasPrefix(line, "get"):
						io.WriteString(conn, "END\r\n")
					case strings.HasPrefix(line, "add "):
						once.Do(func() { close(s.added) })
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns { // ends the stuck calls
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// TestCloseDuringBackfill checks that Close does not wait for an
// asynchronous backfill stuck on a node that does not answer.
func TestCloseDuringBackfill(t *testing.T) {
	old := testserver.Memcached(t, 1)[0]
	stuck := newStuckAdds(t)
	from := []ring.Node{{Name: "old", Addr: old.Addr}}
	to := []ring.Node{{Name: "new", Addr: stuck.addr}}
	const timeout = time.Hour // the stuck copy never ends by itself
	// The new node never answers: SkipEmptyCheck, or Reshard would
	// wait out its check and refuse it.
	c, err := New(Options{Backend: Memcached, Nodes: from, AsyncBackfill: true, SkipEmptyCheck: true,
		ReadTimeout: timeout, WriteTimeout: timeout, DialTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Reshard(to, time.Hour); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	<-stuck.added // the worker's copy is stuck on the new owner
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(faultWait):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("Close still waits after %v on a copy stuck on a node that never answers\n%s", faultWait, buf[:n])
	}
}

// TestCloseDuringProbe checks that Close does not wait for a probe stuck on
// a node that accepts connections and never answers.
func TestCloseDuringProbe(t *testing.T) {
	for _, b := range []Backend{Redis, Memcached} {
		t.Run(b.String(), func(t *testing.T) {
			// A port that first refuses (the node goes down), then accepts and
			// never answers (the probe hangs).
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			c, err := New(Options{Backend: b, Nodes: []ring.Node{{Name: "n", Addr: addr}}, FailureThreshold: 1,
				ProbeInterval: time.Millisecond, DialTimeout: time.Second, ReadTimeout: time.Hour, WriteTimeout: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			hole := make(chan net.Conn, 16)
			if _, err := c.Get(context.Background(), "k"); err == nil {
				t.Fatal("Get from a closed port succeeded")
			}
			if !c.Health()[0].Down {
				t.Fatalf("not down after a refused call: %+v", c.Health())
			}
			if l, err = net.Listen("tcp", addr); err != nil {
				t.Skipf("the port was taken meanwhile: %v", err)
			}
			defer l.Close()
			go func() {
				for {
					conn, err := l.Accept()
					if err != nil {
						close(hole)
						return
					}
					hole <- conn
				}
			}()
			conn := <-hole // the probe connected: its PING or version waits for ever
			defer conn.Close()
			done := make(chan struct{})
			go func() { c.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(faultWait):
				t.Fatalf("Close still waits after %v on a probe of a node that never answers", faultWait)
			}
			// And the probe's connection is closed: nothing waits on it.
			conn.SetReadDeadline(time.Now().Add(faultWait))
			if _, err := io.Copy(io.Discard, conn); err != nil {
				t.Fatalf("the probe's connection after Close: %v; want it closed by the client", err)
			}
			l.Close()
			for conn := range hole {
				conn.Close()
			}
		})
	}
}
