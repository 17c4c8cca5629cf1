package client

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

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// mgetRequest is the RESP of "MGET a b c d".
const mgetRequest = "*5\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n"

// fakeRedis answers one request of len(mgetRequest) bytes on a raw
// connection with reply, and sends the request it read to got.
func fakeRedis(t *testing.T, reply string, got chan<- string) *rawConns {
	t.Helper()
	p := &rawConns{addr: "fake:6379", timeout: 5 * time.Second, maxIdle: 1}
	p.dial = func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			req := make([]byte, len(mgetRequest))
			_, err := io.ReadFull(server, req)
			got <- string(req)
			if err == nil {
				server.Write([]byte(reply))
			}
		}()
		return client, nil
	}
	return p
}

// TestRedisRawMget reads MGET answers from a fake server: hits, misses
// (RESP2's and RESP3's nil), an empty value, a binary one, and each way an
// answer can be wrong, which is an error (never a panic or a wrong value)
// and closes the connection. An error reply is a redis.Error that
// go-redis's classifiers read as they read go-redis's own.
func TestRedisRawMget(t *testing.T) {
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
			is: func(err error) bool { return errors.Is(err, ErrNoPerm) && !errors.Is(err, ErrAuth) }},
		{name: "not logged in", reply: "-NOAUTH Authentication required.\r\n", wantErr: "NOAUTH",
			is: func(err error) bool { return errors.Is(err, ErrAuth) }},
		{name: "server error", reply: "-LOADING Redis is loading the dataset in memory\r\n", wantErr: "LOADING",
			is: func(err error) bool { var re redis.Error; return errors.As(err, &re) }},
		{name: "too few values", reply: "*3\r\n$-1\r\n$-1\r\n$-1\r\n", wantErr: "answered 3 values"},
		{name: "not an array", reply: "$3\r\nabc\r\n", wantErr: "unexpected reply"},
		{name: "an integer among the values", reply: "*4\r\n:1\r\n", wantErr: "unexpected reply"},
		{name: "bad length", reply: "*4\r\n$x\r\n", wantErr: "bad length"},
		{name: "negative length", reply: "*4\r\n$-2\r\n", wantErr: "bad length"},
		{name: "no CR LF after the value", reply: "*4\r\n$1\r\nabc\r\n", wantErr: "not followed by CR LF"},
		{name: "cut short", reply: "*4\r\n$10\r\nabc", wantErr: "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			p := fakeRedis(t, tc.reply, got)
			g := p.mgetSend(context.Background(), keys)
			items := make([]item, len(keys))
			err := g.recv(items)
			if req := <-got; req != mgetRequest {
				t.Errorf("request %q", req)
			}
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tc.wantErr)
				}
				if tc.is != nil && !tc.is(err) {
					t.Errorf("err = %v (%T): not the kind of error it should be", err, err)
				}
				if len(p.idle) != 0 {
					t.Error("a connection that answered an error went back to the pool")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, it := range items {
				w, hit := tc.want[keys[i]]
				if it.key != keys[i] || it.found != hit || string(it.value) != w {
					t.Errorf("item %d: %q found %v value %q; want %q found %v value %q", i, it.key, it.found, it.value, keys[i], hit, w)
				}
				if hit && (it.value == nil || cap(it.value) != len(it.value)) {
					t.Errorf("%s: value nil or with room past its end (cap %d, len %d)", it.key, cap(it.value), len(it.value))
				}
			}
			if len(p.idle) != 1 {
				t.Error("the connection did not go back to the pool")
			}
		})
	}
}

// countHook counts the MGETs a go-redis client sends.
type countHook struct{ mgets *atomic.Int64 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "mget" {
			h.mgets.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRedisGetMultiRaw: a client's own go-redis clients leave GetMulti's
// MGETs to the raw connections, and Stats counts them as it counts go-redis's
// (calls, hits, misses); the clients of a NewRedisClient hook get every
// MGET, so that the hooks they carry (tracing, metrics) see them.
func TestRedisGetMultiRaw(t *testing.T) {
	servers := testserver.Redis(t, 2)
	nodes := []ring.Node{{Name: "a", Addr: servers[0].Addr}, {Name: "b", Addr: servers[1].Addr}}
	ctx := context.Background()
	var mgets atomic.Int64
	own, err := New(Options{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	hooked, err := New(Options{Nodes: nodes, NewRedisClient: func(_ ring.Node, opt *redis.Options) *redis.Client {
		rdb := redis.NewClient(opt)
		rdb.AddHook(countHook{&mgets})
		return rdb
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer hooked.Close()
	keys := numberedKeys("raw", 40)
	for _, k := range keys[:30] {
		if err := own.Set(ctx, k, []byte("v:"+k), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*Client{own, hooked} {
		hits, err := c.GetMulti(ctx, keys)
		if err != nil || len(hits) != 30 {
			t.Fatalf("GetMulti: %d hits, %v; want 30", len(hits), err)
		}
		for _, k := range keys[:30] {
			if string(hits[k]) != "v:"+k {
				t.Fatalf("GetMulti[%q] = %q", k, hits[k])
			}
		}
	}
	if n := mgets.Load(); n != int64(len(nodes)) {
		t.Errorf("the hook's clients saw %d MGETs; want one per node, %d", n, len(nodes))
	}
	var calls, hits, misses int64
	for _, s := range own.Stats().Nodes {
		o := s.Op("get_multi")
		calls, hits, misses = calls+o.Calls(), hits+o.Hits, misses+o.Misses
	}
	if calls != int64(len(nodes)) || hits != 30 || misses != 10 {
		t.Errorf("Stats of the raw MGETs: %d calls, %d hits, %d misses; want %d, 30, 10", calls, hits, misses, len(nodes))
	}
}
