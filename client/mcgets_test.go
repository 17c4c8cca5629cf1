package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// fakeMemcached answers one request on a raw connection with reply, and
// sends the request line it read to got.
func fakeMemcached(t *testing.T, reply string, got chan<- string) *rawConns {
	return fakeRaw(t, "fake:11211", 0, reply, got)
}

// fakeRaw is a pool of raw connections to a fake server at addr, which
// reads one request, a line or (with size) its first size bytes, sends it
// to got, and answers it with reply.
func fakeRaw(t *testing.T, addr string, size int, reply string, got chan<- string) *rawConns {
	t.Helper()
	p := &rawConns{addr: addr, timeout: 5 * time.Second, maxIdle: 1}
	p.dial = func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			r := bufio.NewReader(server)
			var req string
			var err error
			if size == 0 {
				req, err = r.ReadString('\n')
			} else {
				b := make([]byte, size)
				_, err = io.ReadFull(r, b)
				req = string(b)
			}
			got <- req
			if err == nil {
				server.Write([]byte(reply))
			}
		}()
		return client, nil
	}
	return p
}

// TestMemcachedGets reads multi-get answers from a fake server: hits in
// the order asked with their flags and CAS ids, misses, an empty value, and
// each way an answer can be wrong, which is an error (never a panic or a
// wrong value) and closes the connection.
func TestMemcachedGets(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		name, reply string
		want        map[string]item // the hits; nil: an error
		wantErr     string
	}{
		{name: "hits and misses",
			reply: "VALUE a 7 3 11\r\nabc\r\nVALUE c 0 0 12\r\n\r\nVALUE d 4294967295 5 13\r\nx\r\nyz\r\nEND\r\n",
			want: map[string]item{
				"a": {value: []byte("abc"), flags: 7, cas: 11},
				"c": {value: []byte{}, cas: 12},
				"d": {value: []byte("x\r\nyz"), flags: 4294967295, cas: 13},
			}},
		{name: "all misses", reply: "END\r\n", want: map[string]item{}},
		{name: "without cas", reply: "VALUE b 1 2\r\nhi\r\nEND\r\n", want: map[string]item{"b": {value: []byte("hi"), flags: 1}}},
		{name: "server error", reply: "SERVER_ERROR out of memory\r\n", wantErr: "SERVER_ERROR"},
		{name: "unknown key", reply: "VALUE z 0 1 1\r\nz\r\nEND\r\n", wantErr: "unexpected key"},
		{name: "out of order", reply: "VALUE c 0 1 1\r\nc\r\nVALUE a 0 1 2\r\na\r\nEND\r\n",
			want: map[string]item{"a": {value: []byte("a"), cas: 2}, "c": {value: []byte("c"), cas: 1}}},
		{name: "a key answered twice", reply: "VALUE a 0 1 1\r\na\r\nVALUE a 0 1 1\r\na\r\nEND\r\n", wantErr: "unexpected key"},
		{name: "no CR LF after the value", reply: "VALUE a 0 1 1\r\nabcEND\r\n", wantErr: "not followed by CR LF"},
		{name: "bad size", reply: "VALUE a 0 x 1\r\n", wantErr: "bad line"},
		{name: "negative size", reply: "VALUE a 0 -1 1\r\n", wantErr: "bad line"},
		{name: "too many fields", reply: "VALUE a 0 1 1 9\r\n", wantErr: "bad line"},
		{name: "too few fields", reply: "VALUE a 0\r\n", wantErr: "bad line"},
		{name: "cut short", reply: "VALUE a 0 10 1\r\nabc", wantErr: "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			p := fakeMemcached(t, tc.reply, got)
			items, err := p.getMulti(context.Background(), keys)
			if req := <-got; req != "gets a b c d\r\n" {
				t.Errorf("request %q", req)
			}
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tc.wantErr)
				}
				if len(p.idle) != 0 {
					t.Error("a connection that answered wrongly went back to the pool")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(items) != len(keys) {
				t.Fatalf("%d items for %d keys", len(items), len(keys))
			}
			for i, it := range items {
				w, hit := tc.want[keys[i]]
				if it.key != keys[i] || it.found != hit {
					t.Errorf("item %d: key %q found %v; want %q found %v", i, it.key, it.found, keys[i], hit)
				}
				if !hit {
					continue
				}
				if string(it.value) != string(w.value) || it.flags != w.flags || it.cas != w.cas {
					t.Errorf("%s: %q flags %d cas %d; want %q flags %d cas %d", it.key, it.value, it.flags, it.cas, w.value, w.flags, w.cas)
				}
				if it.value == nil || cap(it.value) != len(it.value) {
					t.Errorf("%s: value nil or with room past its end (cap %d, len %d)", it.key, cap(it.value), len(it.value))
				}
			}
			if len(p.idle) != 1 {
				t.Error("the connection did not go back to the pool")
			}
		})
	}
}

// TestMemcachedGetsContext: a multi-get whose context ends while the server
// has not answered returns the context's error.
func TestMemcachedGetsContext(t *testing.T) {
	p := &rawConns{addr: "fake:11211", timeout: time.Minute, maxIdle: 1}
	read := make(chan struct{})
	p.dial = func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			bufio.NewReader(server).ReadString('\n')
			close(read) // and never answer
		}()
		t.Cleanup(func() { server.Close() })
		return client, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-read
		cancel()
	}()
	if _, err := p.getMulti(ctx, []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestMemcachedHookDials: GetMulti's multi-gets go over the client's own
// connections, which dial as the node's gomemcache client does: through the
// DialContext of a client a NewMemcacheClient hook returns (which may set up
// TLS or count connections), and through the hook's wrap of the prepared
// client's DialContext.
func TestMemcachedHookDials(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	for _, own := range []bool{true, false} {
		t.Run(map[bool]string{true: "own client", false: "wrapped"}[own], func(t *testing.T) {
			var dials atomic.Int64
			c, err := New(Options{
				Backend: Memcached,
				Nodes:   []ring.Node{{Name: "n0", Addr: s.Addr}},
				NewMemcacheClient: func(_ ring.Node, mc *memcache.Client) *memcache.Client {
					dial := mc.DialContext
					if own {
						mc = memcache.New(s.Addr)
						dial = (&net.Dialer{}).DialContext
					}
					mc.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
						dials.Add(1)
						return dial(ctx, network, addr)
					}
					return mc
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := t.Context()
			if err := c.SetMulti(ctx, map[string][]byte{"a": []byte("1"), "b": []byte("2")}, 0); err != nil {
				t.Fatal(err)
			}
			before := dials.Load()
			got, err := c.GetMulti(ctx, []string{"a", "b", "c"})
			if err != nil || len(got) != 2 || string(got["a"]) != "1" || string(got["b"]) != "2" {
				t.Fatalf("GetMulti = %q, %v", got, err)
			}
			if dials.Load() == before {
				t.Error("GetMulti's connection was not dialed through the hook's DialContext")
			}
		})
	}
}

// keysFirstOn returns n keys of which the first is owned by the node at
// first, and the others spread over every node.
func keysFirstOn(c *Client, first string, n int) []string {
	keys := keysOn(c, first, "stall-first:", 1)
	for i := 0; len(keys) < n; i++ {
		keys = append(keys, fmt.Sprintf("stall:%d", i))
	}
	return keys
}

// TestMemcachedGetMultiStalledNode: GetMulti reads the nodes' answers in
// turn, and a node that does not answer (SIGSTOP), read first, costs the
// others nothing: their hits come back, with the stalled node's error
// alone, whether the pool's timeout or the caller's deadline ends the wait,
// and the healthy nodes stay up and count no failure.
func TestMemcachedGetMultiStalledNode(t *testing.T) {
	fc := newFaultCluster(t, "memcached", 3, Options{ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, FailureThreshold: 100})
	c, stalled := fc.c, fc.servers[0].Addr
	keys := keysFirstOn(c, stalled, 30)
	items := map[string][]byte{}
	want := 0
	for _, k := range keys {
		items[k] = []byte("v" + k)
		if c.Locate(k).Addr != stalled {
			want++
		}
	}
	if err := c.SetMulti(t.Context(), items, 0); err != nil {
		t.Fatal(err)
	}
	resume := paused(t, fc.servers[0])
	defer resume()
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: the pool's timeout ends the wait
	}{{"pool timeout", 0}, {"context deadline", 200 * time.Millisecond}} {
		for round := range 3 {
			ctx := t.Context()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			got, err := c.GetMulti(ctx, keys)
			var ne *NodeError
			if !errors.As(err, &ne) || ne.Node.Addr != stalled || strings.Count(err.Error(), "get_multi") != 1 {
				t.Fatalf("%s, round %d: err = %v; want the stalled node's alone", tc.name, round, err)
			}
			if len(got) != want {
				t.Fatalf("%s, round %d: %d hits from the healthy nodes, want %d", tc.name, round, len(got), want)
			}
		}
	}
	for _, s := range fc.servers[1:] {
		if h := health(t, c, s.Addr); h.Down || h.Failures != 0 {
			t.Errorf("healthy node %s: %+v", s.Addr, h)
		}
	}
}

// TestRestartedNode: the raw connections of multi-gets, pooled before a
// node restarted, do not outlive it. Restarted slowly, once marked down: a
// node marked down closes them. Restarted quickly, between two calls, too
// fast for its breaker to see: the first multi-get to find one closed asks
// again on a new connection and drops the others. Either way GetMulti then
// finds every key written since, no call fails, none counts against the
// node, and no call is left under way on the raw connections.
func TestRestartedNode(t *testing.T) {
	for _, kind := range []string{"memcached", "redis-server"} {
		for _, quick := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/quick=%t", kind, quick), func(t *testing.T) {
				fc := newFaultCluster(t, kind, 2, Options{})
				c, victim := fc.c, fc.servers[0]
				keys := keysFirstOn(c, victim.Addr, 20)
				fillRawPool(t, c, keys)
				victim.Stop()
				for attempt := 0; !quick && !health(t, c, victim.Addr).Down; attempt++ {
					if attempt == 1000 {
						t.Fatal("the stopped node is never marked down")
					}
					c.GetMulti(t.Context(), keys) // fails on the stopped node until it is marked down
				}
				victim.Restart()
				if !quick {
					waitHealth(t, c, victim.Addr, false)
				}
				checkRestarted(t, c, victim.Addr, keys)
				st, _ := c.load()
				var raw *rawConns
				switch nd := st.conn(fc.nodes[0]).(type) {
				case mcNode:
					raw = nd.raw
				case redisNode:
					raw = nd.raw
				}
				if n := raw.inUse.Load(); n != 0 {
					t.Errorf("%d calls still under way on the raw connections", n)
				}
			})
		}
	}
}

// fillRawPool fills the pool of raw connections with idle ones, by
// concurrent multi-gets of keys.
func fillRawPool(t *testing.T, c *Client, keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 5 {
				if _, err := c.GetMulti(t.Context(), keys); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

// checkRestarted writes keys and reads them back in 30 rounds of GetMulti,
// each of which must find them all, with no failure counted against the
// node at addr.
func checkRestarted(t *testing.T, c *Client, addr string, keys []string) {
	t.Helper()
	items := map[string][]byte{}
	for _, k := range keys {
		items[k] = []byte(k)
	}
	if err := c.SetMulti(t.Context(), items, 0); err != nil {
		t.Fatal(err)
	}
	before := health(t, c, addr)
	for round := range 30 {
		got, err := c.GetMulti(t.Context(), keys)
		if err != nil || len(got) != len(keys) {
			t.Fatalf("round %d after the restart: %d of %d keys, %v", round, len(got), len(keys), err)
		}
	}
	if h := health(t, c, addr); h.Down || h.Downs != before.Downs || h.Failures != before.Failures {
		t.Errorf("after the restart: %+v; marked down %d more times, %d more failures", h, h.Downs-before.Downs, h.Failures-before.Failures)
	}
}
