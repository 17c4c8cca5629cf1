package client

import (
	"context"
	"errors"
	"strings"
	"sync"
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
	return fakeRaw(t, "fake:6379", len(mgetRequest), reply, got)
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
			items := make([]answer, len(keys))
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
				if it.found != hit || string(it.value) != w {
					t.Errorf("%s: found %v value %q; want found %v value %q", keys[i], it.found, it.value, hit, w)
				}
				if hit && (it.value == nil || cap(it.value) != len(it.value)) {
					t.Errorf("%s: value nil or with room past its end (cap %d, len %d)", keys[i], cap(it.value), len(it.value))
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

// TestAutoPipelineGetMultiRaw: with AutoPipeline and the client's own
// go-redis clients, a lone caller's MGETs go over the raw connections, and
// concurrent callers' MGETs, raw or queued on the auto-pipeliner, all find
// their values; a raw MGET counts as a call under way only while it is:
// once the callers are done, every node is idle again, and the next lone
// MGET goes raw.
func TestAutoPipelineGetMultiRaw(t *testing.T) {
	servers := testserver.Redis(t, 2)
	nodes := []ring.Node{{Name: "a", Addr: servers[0].Addr}, {Name: "b", Addr: servers[1].Addr}}
	c, err := New(Options{Nodes: nodes, AutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	keys := numberedKeys("apraw", 40)
	items := map[string][]byte{}
	for _, k := range keys[:30] {
		items[k] = []byte("v:" + k)
	}
	if err := c.SetMulti(ctx, items, time.Minute); err != nil {
		t.Fatal(err)
	}
	check := func() error { return getAll(ctx, c, keys, items) }
	st, _ := c.load()
	idle := func() (calls int64, pooled int) {
		for _, n := range nodes {
			nd := st.conn(n).(redisNode)
			nd.raw.mu.Lock()
			pooled += len(nd.raw.idle)
			nd.raw.mu.Unlock()
			calls += nd.ap.calls.Load()
		}
		return calls, pooled
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}
	if calls, pooled := idle(); calls != 0 || pooled != len(nodes) {
		t.Fatalf("after a lone GetMulti: %d calls under way, %d raw connections pooled; want 0 and one per node", calls, pooled)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 20 {
				if err := check(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if calls, _ := idle(); calls != 0 {
		t.Fatalf("after the callers: %d calls under way; want 0", calls)
	}
}

// TestRedisRawSaturated: while PoolSize multi-gets are under way on a
// node's raw connections, the next one's MGET goes through go-redis, whose
// pool holds PoolSize connections at most, rather than opening one more.
func TestRedisRawSaturated(t *testing.T) {
	servers := testserver.Redis(t, 1)
	node := ring.Node{Name: "a", Addr: servers[0].Addr}
	c, err := New(Options{Nodes: []ring.Node{node}, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "sat:1", []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	st, _ := c.load()
	raw := st.conn(node).(redisNode).raw
	pooled := func() int {
		raw.mu.Lock()
		defer raw.mu.Unlock()
		return len(raw.idle)
	}
	raw.inUse.Add(2) // as if two multi-gets were under way
	if hits, err := c.GetMulti(ctx, []string{"sat:1", "sat:2"}); err != nil || string(hits["sat:1"]) != "v" || len(hits) != 1 {
		t.Fatalf("GetMulti with the raw connections saturated = %q, %v", hits, err)
	}
	if n := pooled(); n != 0 {
		t.Fatalf("the raw connections were used while saturated: %d pooled", n)
	}
	raw.inUse.Add(-2)
	if hits, err := c.GetMulti(ctx, []string{"sat:1", "sat:2"}); err != nil || len(hits) != 1 {
		t.Fatalf("GetMulti = %q, %v", hits, err)
	}
	if n, used := pooled(), raw.inUse.Load(); n != 1 || used != 0 {
		t.Fatalf("after a GetMulti on the raw connections: %d pooled, %d under way; want 1 and 0", n, used)
	}
}
