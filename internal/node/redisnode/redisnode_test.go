package redisnode

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/internal/testserver"
)

// mgetRequest is the RESP of "MGET a b c d".
const mgetRequest = "*5\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n"

// fakeServer accepts connections and answers the first request of each,
// len(mgetRequest) bytes, with reply, then closes it; it sends each request
// it read to got.
func fakeServer(t *testing.T, reply string, got chan<- string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, len(mgetRequest))
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				got <- string(buf)
				c.Write([]byte(reply)) // then closes: a reply cut short ends there
			}()
		}
	}()
	return ln.Addr().String()
}

// TestRawMget reads MGET answers from a fake server over the node's own
// connections: hits, misses (RESP2's and RESP3's nil), an empty value, a
// binary one, and each way an answer can be wrong, which is an error
// (never a panic or a wrong value) and closes the connection. Error
// replies are typed as go-redis's are.
func TestRawMget(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		name, reply string
		want        map[string]string // the hits; nil: an error
		wantErr     string
		is          func(error) bool // what the error must be, beside its text
	}{
		{name: "hits and misses", reply: "*4\r\n$3\r\nabc\r\n$-1\r\n$0\r\n\r\n$5\r\nx\r\nyz\r\n",
			want: map[string]string{"a": "abc", "c": "", "d": "x\r\nyz"}},
		{name: "RESP3 nulls", reply: "*4\r\n_\r\n_\r\n$1\r\nc\r\n_\r\n", want: map[string]string{"c": "c"}},
		{name: "all misses", reply: "*4\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n", want: map[string]string{}},
		{name: "no permission", reply: "-NOPERM this user has no permissions to access one of the keys\r\n", wantErr: "NOPERM",
			is: func(err error) bool { return errors.Is(err, node.ErrNoPerm) && !errors.Is(err, node.ErrAuth) }},
		{name: "not logged in", reply: "-NOAUTH Authentication required.\r\n", wantErr: "NOAUTH",
			is: func(err error) bool { return errors.Is(err, node.ErrAuth) }},
		{name: "server error", reply: "-LOADING Redis is loading the dataset in memory\r\n", wantErr: "LOADING"},
		{name: "too few values", reply: "*3\r\n$-1\r\n$-1\r\n$-1\r\n", wantErr: "answered 3 values"},
		{name: "not an array", reply: "$3\r\nabc\r\n", wantErr: "unexpected reply"},
		{name: "an integer among the values", reply: "*4\r\n:1\r\n", wantErr: "unexpected reply"},
		{name: "bad length", reply: "*4\r\n$x\r\n", wantErr: "bad length"},
		{name: "negative length", reply: "*4\r\n$-2\r\n", wantErr: "bad length"},
		{name: "no CR LF after the value", reply: "*4\r\n$1\r\nabc\r\n", wantErr: "not followed by CR LF"},
		{name: "huge length", reply: "*4\r\n$9223372036854775806\r\n", wantErr: "value of"},
		{name: "larger than any value", reply: "*4\r\n$600000000\r\n", wantErr: "value of"},
		{name: "cut short", reply: "*4\r\n$10\r\nabc", wantErr: "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			n, err := New(Config{Addr: fakeServer(t, tc.reply, got), ReadTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			out := make([]node.Answer, len(keys))
			err = n.Send(context.Background(), keys).Recv(out)
			if req := <-got; req != mgetRequest {
				t.Errorf("request %q", req)
			}
			idle := n.raw.Stats().Idle
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tc.wantErr)
				}
				if tc.is != nil && !tc.is(err) {
					t.Errorf("err = %v (%T): not the kind of error it should be", err, err)
				}
				if idle != 0 {
					t.Error("a connection that answered an error went back to the pool")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range out {
				w, hit := tc.want[keys[i]]
				if a.Found != hit || string(a.Value) != w {
					t.Errorf("%s: found %v value %q; want found %v value %q", keys[i], a.Found, a.Value, hit, w)
				}
				if hit && (a.Value == nil || cap(a.Value) != len(a.Value)) {
					t.Errorf("%s: value nil or with room past its end (cap %d, len %d)", keys[i], cap(a.Value), len(a.Value))
				}
			}
			if idle != 1 {
				t.Error("the connection did not go back to the pool")
			}
		})
	}
}

// mgetHook counts the MGETs of a go-redis client.
type mgetHook struct{ n *atomic.Int64 }

func (mgetHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h mgetHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "mget" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h mgetHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestExposedGoesThroughGoRedis: the MGETs go over the node's own
// connections until its go-redis client is handed out (Redis); from then
// on through that client, so that a hook added to it sees them.
func TestExposedGoesThroughGoRedis(t *testing.T) {
	s := testserver.Redis(t, 1)[0]
	n, err := New(Config{Addr: s.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	if err := n.Set(ctx, "a", []byte("1"), time.Minute); err != nil {
		t.Fatal(err)
	}
	get := func() {
		t.Helper()
		out := make([]node.Answer, 2)
		if err := n.Send(ctx, []string{"a", "b"}).Recv(out); err != nil || string(out[0].Value) != "1" || out[1].Found {
			t.Fatalf("MGET = %+v, %v", out, err)
		}
	}
	var seen atomic.Int64
	n.Client().AddHook(mgetHook{&seen}) // Client does not hand it out
	get()
	if seen.Load() != 0 || n.raw.Stats().Open != 1 {
		t.Fatalf("before Redis(): %d MGETs through go-redis, %d own connections; want 0 and 1", seen.Load(), n.raw.Stats().Open)
	}
	n.Redis()
	get()
	get()
	if seen.Load() != 2 {
		t.Fatalf("after Redis(): %d MGETs through go-redis; want 2", seen.Load())
	}
}

// TestBudgetShared: the node's own connections and go-redis's share
// PoolSize: with them all in go-redis's hands, an MGET goes through
// go-redis rather than open one more.
func TestBudgetShared(t *testing.T) {
	s := testserver.Redis(t, 1)[0]
	n, err := New(Config{Addr: s.Addr, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	// Two blocking calls hold go-redis's connections, hence both places.
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- n.Client().BLPop(ctx, time.Second, "nolist").Err() }()
	}
	for n.Client().PoolStats().TotalConns < 2 {
		time.Sleep(time.Millisecond) // polls go-redis's count until both calls hold their connection
	}
	out := make([]node.Answer, 1)
	if err := n.Send(ctx, []string{"x"}).Recv(out); err != nil {
		t.Fatal(err)
	}
	if open := n.raw.Stats().Open; open != 0 {
		t.Errorf("the node opened %d connections of its own with both places held", open)
	}
	for range 2 {
		if err := <-done; err != redis.Nil {
			t.Fatal(err)
		}
	}
}

// TestTombstones: node.Bury's contract on a real redis-server.
func TestTombstones(t *testing.T) {
	s := testserver.Redis(t, 1)[0]
	n, err := New(Config{Addr: s.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	nodetest.Tombstones(t, n, "tomb:")
}

// TestNoHiddenRetries counts what one failed call costs the network: a node
// that refuses connections is dialed once per call, and one that accepts
// and hangs up is connected to once per call. go-redis's defaults (5 dial
// attempts 100ms apart, then 3 command retries) made a refused node cost
// 1.7s a call; counting the attempts shows it without timing anything.
func TestNoHiddenRetries(t *testing.T) {
	const calls = 3
	ctx := context.Background()
	dialsTo := func(addr string) int64 {
		t.Helper()
		var dials atomic.Int64
		n, err := New(Config{Addr: addr, PoolSize: 2 * calls, NewClient: func(opt *redis.Options) *redis.Client {
			dial := opt.Dialer // the node's own, counted: a retry inside it is seen too
			if dial == nil {
				var d net.Dialer
				dial = d.DialContext
			}
			opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return dial(ctx, network, addr)
			}
			return redis.NewClient(opt)
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		for range calls {
			if _, err := n.Get(ctx, "k"); err == nil || errors.Is(err, node.ErrCacheMiss) {
				t.Fatalf("Get from %s = %v; want a connection error", addr, err)
			}
		}
		return dials.Load()
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := ln.Addr().String()
	ln.Close()
	if d := dialsTo(refusing); d != calls {
		t.Errorf("%d calls to a node refusing connections dialed it %d times; want %d", calls, d, calls)
	}

	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	dials := dialsTo(ln.Addr().String())
	if dials != calls || accepted.Load() != calls {
		t.Errorf("%d calls to a node that hangs up dialed it %d times, and it accepted %d connections; want %d (a retried command dials again)",
			calls, dials, accepted.Load(), calls)
	}
}
