package memcache

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/wire"
)

// fakeClient is a client whose connections are pipes to a fake server:
// serve runs on the server's end of each, n counting from 1, and the pipe
// closes when it returns.
func fakeClient(t *testing.T, cfg wire.Config, serve func(n int, r *bufio.Reader, w io.Writer)) *Client {
	t.Helper()
	var conns atomic.Int32
	var wg sync.WaitGroup
	if cfg.Addr == "" {
		cfg.Addr = "fake:11211"
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout, cfg.WriteTimeout = 5*time.Second, 5*time.Second
	}
	var mu sync.Mutex
	var servers []net.Conn
	cfg.Dial = func(context.Context, string, string) (net.Conn, error) {
		n := int(conns.Add(1))
		client, server := net.Pipe()
		mu.Lock()
		servers = append(servers, server)
		mu.Unlock()
		wg.Go(func() {
			defer server.Close()
			serve(n, bufio.NewReader(server), server)
		})
		return client, nil
	}
	c := New(Config{Config: cfg})
	t.Cleanup(func() {
		c.Close()
		mu.Lock()
		for _, s := range servers {
			s.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return c
}

// answerOnce is a fake server that reads one request line, sends it to
// got, and answers reply.
func answerOnce(reply string, got chan<- string) func(int, *bufio.Reader, io.Writer) {
	return func(_ int, r *bufio.Reader, w io.Writer) {
		req, err := r.ReadString('\n')
		got <- req
		if err == nil {
			io.WriteString(w, reply)
		}
		// Keep the pipe open until the client closes it: a pooled
		// connection must not look closed by the server.
		io.Copy(io.Discard, r)
	}
}

// TestGetAnswers reads single-key Get answers from a fake server: a hit
// with its flags and CAS id, a miss, and each way an answer can be wrong,
// which is an error (never a panic or a wrong value) and closes the
// connection. A hit, a miss and a server's error line leave it in the
// pool.
func TestGetAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, reply string
		want        *Item // nil: a miss or an error
		wantErr     string
		is          error // the error errors.Is must find
		pooled      bool  // an error that leaves the connection in the pool
	}{
		{name: "hit", reply: "VALUE k 7 3 11\r\nabc\r\nEND\r\n", want: &Item{Value: []byte("abc"), Flags: 7, CAS: 11}},
		{name: "empty value", reply: "VALUE k 0 0 12\r\n\r\nEND\r\n", want: &Item{Value: []byte{}, CAS: 12}},
		{name: "without cas", reply: "VALUE k 1 2\r\nhi\r\nEND\r\n", want: &Item{Value: []byte("hi"), Flags: 1}},
		{name: "miss", reply: "END\r\n", is: ErrCacheMiss, pooled: true},
		{name: "server error", reply: "SERVER_ERROR out of memory\r\n", wantErr: "SERVER_ERROR out of memory", pooled: true},
		{name: "login refused", reply: "CLIENT_ERROR unauthenticated\r\n", wantErr: "unauthenticated", is: ErrAuth},
		{name: "malformed line", reply: "VALUE k 0 x 1\r\n", wantErr: "bad line", is: wire.ErrProtocol},
		{name: "another key", reply: "VALUE z 0 1 1\r\nz\r\nEND\r\n", wantErr: "unexpected key", is: wire.ErrProtocol},
		{name: "no CR LF after the value", reply: "VALUE k 0 1 1\r\nabcEND\r\n", is: wire.ErrNoCRLF},
		{name: "no END after the value", reply: "VALUE k 0 1 1\r\na\r\nVALUE\r\n", wantErr: "VALUE", is: wire.ErrProtocol},
		{name: "size past the limit", reply: "VALUE k 0 999999999999 1\r\n", wantErr: "bad line", is: wire.ErrProtocol},
		{name: "cut short", reply: "VALUE k 0 10 1\r\nabc", wantErr: "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			c := fakeClient(t, wire.Config{ReadTimeout: 200 * time.Millisecond}, answerOnce(tc.reply, got))
			if tc.name == "cut short" {
				c = fakeClient(t, wire.Config{}, func(_ int, r *bufio.Reader, w io.Writer) {
					req, _ := r.ReadString('\n')
					got <- req
					io.WriteString(w, tc.reply) // and close
				})
			}
			it, err := c.Get(context.Background(), "k")
			if req := <-got; req != "gets k\r\n" {
				t.Errorf("request %q", req)
			}
			switch {
			case tc.want != nil:
				if err != nil {
					t.Fatal(err)
				}
				if it.Key != "k" || string(it.Value) != string(tc.want.Value) || it.Flags != tc.want.Flags || it.CAS != tc.want.CAS {
					t.Errorf("item %+v; want %q flags %d cas %d", it, tc.want.Value, tc.want.Flags, tc.want.CAS)
				}
				if it.Value == nil || cap(it.Value) != len(it.Value) {
					t.Errorf("value nil or with room past its end (cap %d, len %d)", cap(it.Value), len(it.Value))
				}
				tc.pooled = true
			case tc.is == ErrCacheMiss:
				if err != ErrCacheMiss {
					t.Fatalf("miss: %+v, %v; want ErrCacheMiss itself", it, err)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || (tc.is != nil && !errors.Is(err, tc.is)) {
					t.Fatalf("err = %v, want one with %q (errors.Is %v)", err, tc.wantErr, tc.is)
				}
			}
			if idle := c.Pool().Stats().Idle; (idle == 1) != tc.pooled {
				t.Errorf("%d idle connections after the answer; want the connection pooled: %v", idle, tc.pooled)
			}
		})
	}
}

// TestGetsAnswers reads multi-get answers from a fake server: hits in the
// order asked with their flags and CAS ids, misses, an empty value, and
// each way an answer can be wrong, which is an error (never a panic or a
// wrong value) and closes the connection.
func TestGetsAnswers(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		name, reply string
		want        map[string]wire.Answer // the hits; nil: an error
		wantErr     string
	}{
		{name: "hits and misses",
			reply: "VALUE a 7 3 11\r\nabc\r\nVALUE c 0 0 12\r\n\r\nVALUE d 4294967295 5 13\r\nx\r\nyz\r\nEND\r\n",
			want: map[string]wire.Answer{
				"a": {Value: []byte("abc"), Flags: 7, CAS: 11},
				"c": {Value: []byte{}, CAS: 12},
				"d": {Value: []byte("x\r\nyz"), Flags: 4294967295, CAS: 13},
			}},
		{name: "all misses", reply: "END\r\n", want: map[string]wire.Answer{}},
		{name: "without cas", reply: "VALUE b 1 2\r\nhi\r\nEND\r\n", want: map[string]wire.Answer{"b": {Value: []byte("hi"), Flags: 1}}},
		{name: "server error", reply: "SERVER_ERROR out of memory\r\n", wantErr: "SERVER_ERROR"},
		{name: "unknown key", reply: "VALUE z 0 1 1\r\nz\r\nEND\r\n", wantErr: "unexpected key"},
		{name: "out of order", reply: "VALUE c 0 1 1\r\nc\r\nVALUE a 0 1 2\r\na\r\nEND\r\n",
			want: map[string]wire.Answer{"a": {Value: []byte("a"), CAS: 2}, "c": {Value: []byte("c"), CAS: 1}}},
		{name: "a key answered twice", reply: "VALUE a 0 1 1\r\na\r\nVALUE a 0 1 1\r\na\r\nEND\r\n", wantErr: "unexpected key"},
		{name: "no CR LF after the value", reply: "VALUE a 0 1 1\r\nabcEND\r\n", wantErr: "not followed by CR LF"},
		{name: "bad size", reply: "VALUE a 0 x 1\r\n", wantErr: "bad line"},
		{name: "negative size", reply: "VALUE a 0 -1 1\r\n", wantErr: "bad line"},
		{name: "flags past 32 bits", reply: "VALUE a 4294967296 1 1\r\n", wantErr: "bad line"},
		{name: "too many fields", reply: "VALUE a 0 1 1 9\r\n", wantErr: "bad line"},
		{name: "too few fields", reply: "VALUE a 0\r\n", wantErr: "bad line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			c := fakeClient(t, wire.Config{}, answerOnce(tc.reply, got))
			out := make([]wire.Answer, len(keys))
			found, err := c.GetMulti(context.Background(), keys, out)
			if req := <-got; req != "gets a b c d\r\n" {
				t.Errorf("request %q", req)
			}
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tc.wantErr)
				}
				if c.Pool().Stats().Idle != 0 {
					t.Error("a connection that answered wrongly went back to the pool")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if found != len(tc.want) {
				t.Errorf("found %d, want %d", found, len(tc.want))
			}
			for i, a := range out {
				w, hit := tc.want[keys[i]]
				if a.Found != hit {
					t.Errorf("%s: found %v, want %v", keys[i], a.Found, hit)
				}
				if !hit {
					continue
				}
				if string(a.Value) != string(w.Value) || a.Flags != w.Flags || a.CAS != w.CAS {
					t.Errorf("%s: %q flags %d cas %d; want %q flags %d cas %d", keys[i], a.Value, a.Flags, a.CAS, w.Value, w.Flags, w.CAS)
				}
				if a.Value == nil || cap(a.Value) != len(a.Value) {
					t.Errorf("%s: value nil or with room past its end (cap %d, len %d)", keys[i], cap(a.Value), len(a.Value))
				}
			}
			if c.Pool().Stats().Idle != 1 {
				t.Error("the connection did not go back to the pool")
			}
		})
	}
}

// TestGetsContext: a multi-get whose context ends while the server has
// not answered returns the context's error.
func TestGetsContext(t *testing.T) {
	read := make(chan struct{})
	c := fakeClient(t, wire.Config{ReadTimeout: time.Minute}, func(_ int, r *bufio.Reader, _ io.Writer) {
		r.ReadString('\n')
		close(read) // and never answer
		io.Copy(io.Discard, r)
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-read
		cancel()
	}()
	if _, err := c.GetMulti(ctx, []string{"a"}, make([]wire.Answer, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestGetClosedPooledConnection: a pooled connection the server closed
// while it was idle (a restart) is found by the first read, and the Get
// asked again, once, on a new connection; a connection that ends after
// part of an answer fails the call instead, which is not asked again
// (that would mix the dead connection's values with the next answer).
func TestGetClosedPooledConnection(t *testing.T) {
	var restarted atomic.Bool
	c := fakeClient(t, wire.Config{Size: 2}, func(n int, r *bufio.Reader, w io.Writer) {
		for req := 0; ; req++ {
			if _, err := r.ReadString('\n'); err != nil {
				return
			}
			switch {
			case n == 1 && req == 0: // a first call, to pool the connection
				io.WriteString(w, "END\r\n")
			case n == 2 && restarted.Load(): // closed while idle
				return
			case n == 1: // a's value, then the server dies before END
				io.WriteString(w, "VALUE a 0 3 1\r\nold\r\nVALUE b 0 3 1\r\nol")
				return
			default: // the restarted server: empty
				io.WriteString(w, "END\r\n")
			}
		}
	})
	ctx := context.Background()
	if _, err := c.Get(ctx, "x"); err != ErrCacheMiss {
		t.Fatalf("first Get: %v", err)
	}
	out := make([]wire.Answer, 2)
	if _, err := c.GetMulti(ctx, []string{"a", "b"}, out); err == nil || c.Pool().Stats().Dials != 1 {
		t.Fatalf("multi-get after part of an answer: %v on %d connections; want the connection's failure, and no second connection", err, c.Pool().Stats().Dials)
	}
	// Pool a connection again, then have the server close it while idle.
	if _, err := c.Get(ctx, "x"); err != ErrCacheMiss {
		t.Fatalf("Get on a new connection: %v", err)
	}
	restarted.Store(true)
	if _, err := c.Get(ctx, "x"); err != ErrCacheMiss || c.Pool().Stats().Dials != 3 {
		t.Fatalf("Get on a connection closed while idle: %v after %d dials; want a miss from a third connection", err, c.Pool().Stats().Dials)
	}
}

// TestNoMeta: a server without meta commands answers ERROR; the client
// remembers it, and sends no meta command again.
func TestNoMeta(t *testing.T) {
	var lines atomic.Int32
	c := fakeClient(t, wire.Config{}, func(_ int, r *bufio.Reader, w io.Writer) {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines.Add(1)
			if strings.HasPrefix(l, "gets ") {
				io.WriteString(w, "VALUE a 0 1 1\r\nx\r\nEND\r\n")
			} else {
				io.WriteString(w, "ERROR\r\n") // as memcached 1.4 answers mg
			}
		}
	})
	ctx := context.Background()
	out := make([]TTLAnswer, 2)
	if _, err := c.GetTTL(ctx, []string{"a", "b"}, out); !errors.Is(err, ErrNoMeta) {
		t.Fatalf("mg on a server without meta: %v, want ErrNoMeta", err)
	}
	sent := lines.Load()
	if ok, err := c.HasMeta(ctx); ok || err != nil {
		t.Errorf("HasMeta = %v, %v", ok, err)
	}
	if _, err := c.MetaOne(ctx, Meta{Cmd: MetaGet, Key: "a", Flags: FlagsOf("v")}); !errors.Is(err, ErrNoMeta) {
		t.Errorf("a later mg: %v", err)
	}
	if lines.Load() != sent {
		t.Errorf("%d more lines sent to a server known to lack meta", lines.Load()-sent)
	}
	if it, err := c.Get(ctx, "a"); err != nil || string(it.Value) != "x" {
		t.Errorf("gets on the same server: %q, %v", it.Value, err)
	}
	// HasMeta finds out with mn when nothing has told yet.
	d := fakeClient(t, wire.Config{}, func(_ int, r *bufio.Reader, w io.Writer) {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if l == "mn\r\n" {
				io.WriteString(w, "ERROR\r\n")
			}
		}
	})
	if ok, err := d.HasMeta(ctx); ok || err != nil {
		t.Errorf("HasMeta by mn = %v, %v", ok, err)
	}
}

// serveLines is a fake server's loop: each line the client sends, in
// order, is answered with answer's text, until the connection closes.
func serveLines(r *bufio.Reader, w io.Writer, answer func(line string) string) {
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return
		}
		io.WriteString(w, answer(l))
	}
}

// TestMetadumpWaits: a listing is put off while the server says its hash
// table expands (stats), and retried after "ERROR locked" (memcached
// 1.6.28 and later, while it expands) as after BUSY; the "OK" that
// memcached 1.6.43 sends before the keys is no key and no refusal. An
// expansion that outlasts the wait's budget gives ErrBusy.
func TestMetadumpWaits(t *testing.T) {
	var mu sync.Mutex
	var reqs []string
	dumps := 0
	c := fakeClient(t, wire.Config{}, func(_ int, r *bufio.Reader, w io.Writer) {
		serveLines(r, w, func(l string) string {
			mu.Lock()
			defer mu.Unlock()
			reqs = append(reqs, strings.TrimSpace(l))
			if l == "lru_crawler metadump hash\r\n" {
				dumps++
			}
			switch {
			case l == "stats\r\n" && len(reqs) == 1:
				return "STAT pid 1\r\nSTAT hash_is_expanding 1\r\nEND\r\n"
			case l == "stats\r\n":
				return "STAT hash_is_expanding 0\r\nEND\r\n"
			case dumps == 1:
				return "ERROR locked try again later\r\n"
			case dumps == 2:
				return "OK\r\nERROR locked try again later\r\n"
			case dumps == 3:
				return "BUSY currently processing crawler request\r\n"
			}
			return "OK\r\nkey=a exp=-1 la=1 cas=2 fetch=no cls=1 size=60\r\nkey=b exp=-1 la=1\r\nEND\r\n"
		})
	})
	var got []string
	err := c.Metadump(context.Background(), func(key []byte, exp int64) error {
		got = append(got, string(key))
		return nil
	})
	if err != nil || strings.Join(got, ",") != "a,b" {
		t.Fatalf("listing: %v, %v; want a and b", got, err)
	}
	want := "stats,stats,lru_crawler metadump hash,stats,lru_crawler metadump hash,stats,lru_crawler metadump hash,stats,lru_crawler metadump hash"
	if strings.Join(reqs, ",") != want {
		t.Errorf("requests\n%q; want\n%q", strings.Join(reqs, ","), want)
	}
	if st := c.Pool().Stats(); st.Dials != 1 {
		t.Errorf("%d dials; want one connection, in step throughout", st.Dials)
	}

	var asked atomic.Int32
	e := fakeClient(t, wire.Config{}, func(_ int, r *bufio.Reader, w io.Writer) {
		serveLines(r, w, func(string) string {
			asked.Add(1)
			return "STAT hash_is_expanding 1\r\nEND\r\n"
		})
	})
	e.expandFor = 200 * time.Millisecond
	err = e.Metadump(context.Background(), func([]byte, int64) error {
		t.Error("a key listed while expanding")
		return nil
	})
	// Asked at 0, 50, 150 and 350 ms, the wait doubling: the budget is
	// spent by the fourth (fewer where the timers run late, never more).
	if !errors.Is(err, ErrBusy) || asked.Load() < 2 || asked.Load() > 4 {
		t.Fatalf("an expansion past the budget: %v after %d stats; want ErrBusy after at most 4", err, asked.Load())
	}
}

// TestMetadumpRefused: a server that refuses "metadump hash" is asked
// "metadump all", and remembered; one that refuses both gives
// ErrNoMetadump, and the connection stays in step.
func TestMetadumpRefused(t *testing.T) {
	var reqs []string
	var mu sync.Mutex
	answer := func(all string) func(int, *bufio.Reader, io.Writer) {
		return func(_ int, r *bufio.Reader, w io.Writer) {
			serveLines(r, w, func(l string) string {
				mu.Lock()
				reqs = append(reqs, strings.TrimSpace(l))
				mu.Unlock()
				switch l {
				case "lru_crawler metadump hash\r\n":
					return "BADCLASS invalid class id\r\n"
				case "lru_crawler metadump all\r\n":
					return all
				}
				return "END\r\n"
			})
		}
	}
	ctx := context.Background()
	c := fakeClient(t, wire.Config{}, answer("key=a%20b exp=-1 la=1 cas=2 fetch=no cls=1 size=60\r\nkey=c exp=1700000000 la=1\r\nEND\r\n"))
	for range 2 {
		var got []string
		err := c.Metadump(ctx, func(key []byte, exp int64) error {
			got = append(got, string(key)+"@"+time.Unix(exp, 0).UTC().Format("2006"))
			return nil
		})
		if err != nil || strings.Join(got, ",") != "a b@1969,c@2023" {
			t.Fatalf("listing: %v, %v", got, err)
		}
	}
	if strings.Join(reqs, ",") != "stats,lru_crawler metadump hash,lru_crawler metadump all,lru_crawler metadump all" {
		t.Errorf("requests %q; want stats and hash once, then all", reqs)
	}
	d := fakeClient(t, wire.Config{}, answer("ERROR\r\n"))
	if err := d.Metadump(ctx, func([]byte, int64) error { return nil }); !errors.Is(err, ErrNoMetadump) {
		t.Fatalf("a server without metadump: %v", err)
	}
	if _, err := d.Get(ctx, "k"); err != ErrCacheMiss || d.Pool().Stats().Dials != 1 {
		t.Errorf("Get after the refusal: %v, %d dials", err, d.Pool().Stats().Dials)
	}
}

// TestValueLimitLearned: the item limit is read once from "stats
// settings", CAS ids counted only when the server has them; a server that
// refuses the command (a proxy) is taken to have memcached's default.
func TestValueLimitLearned(t *testing.T) {
	for _, tc := range []struct {
		name, settings string
		want           int64
	}{
		{"2 MiB without CAS", "STAT item_size_max 2097152\r\nSTAT cas_enabled no\r\nEND\r\n", 2<<20 - 48 - 2 - 2},
		{"no stats settings", "ERROR\r\n", 1<<20 - 48 - 2 - 2 - 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked atomic.Int32
			c := fakeClient(t, wire.Config{}, func(_ int, r *bufio.Reader, w io.Writer) {
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if l == "stats settings\r\n" {
						asked.Add(1)
						io.WriteString(w, tc.settings)
					}
				}
			})
			for range 3 {
				if max, err := c.MaxValue(context.Background(), "k", 0); err != nil || max != tc.want {
					t.Fatalf("MaxValue = %d, %v; want %d", max, err, tc.want)
				}
			}
			if asked.Load() != 1 {
				t.Errorf("stats settings asked %d times, want once", asked.Load())
			}
			if err := c.CheckValue(context.Background(), "k", 0, int(tc.want)+1); !errors.Is(err, ErrValueTooLarge) {
				t.Errorf("one byte more: %v", err)
			}
		})
	}
}
