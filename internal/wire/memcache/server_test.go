package memcache

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/internal/wire"
)

// realClient is a client of a new real memcached.
func realClient(t *testing.T, cfg Config) (*Client, *testserver.Server) {
	t.Helper()
	s := testserver.Memcached(t, 1)[0]
	cfg.Addr = s.Addr
	if cfg.ReadTimeout == 0 { // a busy machine's scheduling is not under test
		cfg.DialTimeout, cfg.ReadTimeout, cfg.WriteTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	}
	c := New(cfg)
	t.Cleanup(func() { c.Close() })
	return c, s
}

// rawConn is a plain connection to addr, for what the client refuses to
// send.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

// do sends req and returns the first line of the answer.
func (r *rawConn) do(req string) string {
	r.t.Helper()
	if _, err := r.c.Write([]byte(req)); err != nil {
		r.t.Fatal(err)
	}
	l, err := r.r.ReadString('\n')
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.TrimRight(l, "\r\n")
}

func TestCommands(t *testing.T) {
	c, _ := realClient(t, Config{})
	ctx := t.Context()
	if _, err := c.Get(ctx, "k"); err != ErrCacheMiss {
		t.Fatalf("Get of an absent key: %v, want ErrCacheMiss itself", err)
	}
	if err := c.Store(ctx, Set, Item{Key: "k", Value: []byte("v1"), Flags: 7}); err != nil {
		t.Fatal(err)
	}
	it, err := c.Get(ctx, "k")
	if err != nil || string(it.Value) != "v1" || it.Flags != 7 || it.CAS == 0 || it.Key != "k" {
		t.Fatalf("Get = %+v, %v", it, err)
	}
	if err := c.Store(ctx, Add, Item{Key: "k", Value: []byte("x")}); err != ErrNotStored {
		t.Errorf("Add of a present key: %v", err)
	}
	if err := c.Store(ctx, Replace, Item{Key: "absent", Value: []byte("x")}); err != ErrNotStored {
		t.Errorf("Replace of an absent key: %v", err)
	}
	if err := c.Store(ctx, Append, Item{Key: "k", Value: []byte("+a")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Store(ctx, Prepend, Item{Key: "k", Value: []byte("p+")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Store(ctx, CAS, Item{Key: "k", Value: []byte("stale"), CAS: it.CAS}); err != ErrCASConflict {
		t.Errorf("CAS with an old id: %v, want ErrCASConflict", err)
	}
	it, err = c.Get(ctx, "k")
	if err != nil || string(it.Value) != "p+v1+a" {
		t.Fatalf("after append and prepend: %q, %v", it.Value, err)
	}
	if err := c.Store(ctx, CAS, Item{Key: "k", Value: []byte("swapped"), CAS: it.CAS}); err != nil {
		t.Fatalf("CAS with the current id: %v", err)
	}
	if err := c.Store(ctx, CAS, Item{Key: "gone", Value: []byte("x"), CAS: 1}); err != ErrCacheMiss {
		t.Errorf("CAS of an absent key: %v, want ErrCacheMiss", err)
	}
	it, err = c.GetAndTouch(ctx, "k", 100)
	if err != nil || string(it.Value) != "swapped" || it.CAS == 0 {
		t.Fatalf("GetAndTouch = %+v, %v", it, err)
	}
	if _, err := c.GetAndTouch(ctx, "absent", 100); err != ErrCacheMiss {
		t.Errorf("GetAndTouch of an absent key: %v", err)
	}
	if err := c.Touch(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Touch(ctx, "absent", 0); err != ErrCacheMiss {
		t.Errorf("Touch of an absent key: %v", err)
	}
	if _, err := c.IncrDecr(ctx, "n", 1, false); err != ErrCacheMiss {
		t.Errorf("incr of an absent key: %v", err)
	}
	c.Store(ctx, Set, Item{Key: "n", Value: []byte("10")})
	if n, err := c.IncrDecr(ctx, "n", 5, false); err != nil || n != 15 {
		t.Errorf("incr = %d, %v", n, err)
	}
	if n, err := c.IncrDecr(ctx, "n", 20, true); err != nil || n != 0 {
		t.Errorf("decr past 0 = %d, %v", n, err)
	}
	var se *ServerError
	if _, err := c.IncrDecr(ctx, "k", 1, false); !errors.As(err, &se) || se.Kind != "CLIENT_ERROR" {
		t.Errorf("incr of a string: %v, want the server's CLIENT_ERROR", err)
	}
	if found, err := c.Delete(ctx, "k"); !found || err != nil {
		t.Errorf("Delete = %v, %v", found, err)
	}
	if found, err := c.Delete(ctx, "k"); found || err != nil {
		t.Errorf("second Delete = %v, %v", found, err)
	}
	if v, err := c.Version(ctx); err != nil || !strings.HasPrefix(v, "1.") {
		t.Errorf("Version = %q, %v", v, err)
	}
	if err := c.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "n"); err != ErrCacheMiss {
		t.Errorf("Get after flush_all: %v", err)
	}
	if st := c.Pool().Stats(); st.Open != 1 || st.Dials != 1 {
		t.Errorf("pool %+v: every answer above kept the one connection in step", st)
	}
}

func TestMulti(t *testing.T) {
	c, _ := realClient(t, Config{})
	ctx := t.Context()
	items := []Item{
		{Key: "a", Value: []byte("1"), Flags: 1},
		{Key: "b", Value: []byte("2"), Exptime: 100},
		{Key: "bad key", Value: []byte("3")},
		{Key: "c", Value: bytes.Repeat([]byte("x"), 2<<20)},
		{Key: "d", Value: []byte{}},
	}
	results := make([]error, len(items))
	if err := c.StoreMulti(ctx, Add, items, results); err != nil {
		t.Fatal(err)
	}
	if results[0] != nil || results[1] != nil || results[4] != nil ||
		!errors.Is(results[2], ErrMalformedKey) || !errors.Is(results[3], ErrValueTooLarge) {
		t.Fatalf("StoreMulti results %v", results)
	}
	if err := c.StoreMulti(ctx, Add, items[:2], results[:2]); err != nil || results[0] != ErrNotStored || results[1] != ErrNotStored {
		t.Fatalf("second add: %v, %v", results[:2], err)
	}
	keys := []string{"a", "x", "b", "d", "a"}
	out := make([]wire.Answer, len(keys))
	found, err := c.GetMulti(ctx, keys, out)
	if err != nil || found != 4 {
		t.Fatalf("GetMulti: %d found, %v", found, err)
	}
	if string(out[0].Value) != "1" || out[0].Flags != 1 || out[1].Found || string(out[2].Value) != "2" ||
		!out[3].Found || len(out[3].Value) != 0 || string(out[4].Value) != "1" {
		t.Errorf("GetMulti answers %+v", out)
	}
	ttl := make([]TTLAnswer, 3)
	found, err = c.GetTTL(ctx, []string{"a", "b", "x"}, ttl)
	if err != nil || found != 2 {
		t.Fatalf("GetTTL: %d, %v", found, err)
	}
	if string(ttl[0].Value) != "1" || ttl[0].Flags != 1 || ttl[0].TTL != -1 || ttl[0].CAS == 0 ||
		ttl[1].TTL < 98 || ttl[1].TTL > 100 || ttl[2].Found {
		t.Errorf("GetTTL answers %+v", ttl)
	}
	del := make([]bool, 3)
	if err := c.DeleteMulti(ctx, []string{"a", "x", "b"}, del); err != nil || !del[0] || del[1] || !del[2] {
		t.Fatalf("DeleteMulti = %v, %v", del, err)
	}
	if found, err := c.GetMulti(ctx, []string{"a", "b"}, out[:2]); err != nil || found != 0 {
		t.Errorf("after DeleteMulti: %d found, %v", found, err)
	}
}

// TestValueLimit: the largest value the client lets through for a key is
// exactly the largest the server stores, learned from its item_size_max;
// one byte more is refused before any I/O, and the server itself refuses
// it too.
func TestValueLimit(t *testing.T) {
	c, s := realClient(t, Config{})
	ctx := t.Context()
	raw := dialRaw(t, s.Addr)
	for _, key := range []string{"k", strings.Repeat("K", 250)} {
		max, err := c.MaxValue(ctx, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(1<<20 - 48 - len(key) - 1 - 2 - 8); max != want {
			t.Errorf("MaxValue(%d-byte key) = %d, want %d", len(key), max, want)
		}
		if err := c.Store(ctx, Set, Item{Key: key, Value: make([]byte, max)}); err != nil {
			t.Fatalf("Store of the largest value, %d bytes: %v", max, err)
		}
		if it, err := c.Get(ctx, key); err != nil || int64(len(it.Value)) != max {
			t.Fatalf("Get of the largest value: %d bytes, %v", len(it.Value), err)
		}
		dials := c.Pool().Stats().Dials
		err = c.Store(ctx, Set, Item{Key: key, Value: make([]byte, max+1)})
		if !errors.Is(err, ErrValueTooLarge) {
			t.Fatalf("Store of one byte more: %v, want ErrValueTooLarge", err)
		}
		if c.Pool().Stats().Dials != dials {
			t.Error("the refused value dialed")
		}
		// The server agrees, at the byte.
		for n, want := range map[int64]string{max: "STORED", max + 1: "SERVER_ERROR object too large for cache"} {
			if got := raw.do(fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", key, n, make([]byte, n))); got != want {
				t.Errorf("%d-byte key, a raw set of %d bytes: %q, want %q", len(key), n, got, want)
			}
		}
	}
	// Flags take room too: 4 bytes on this server, 8 counted (large
	// client flags): never more than the server stores.
	max, _ := c.MaxValue(ctx, "f", 1)
	if want := int64(1<<20 - 48 - 2 - 2 - 8 - 8); max != want {
		t.Errorf("MaxValue with flags = %d, want %d", max, want)
	}
	for n, want := range map[int64]string{max + 4: "STORED", max + 5: "SERVER_ERROR object too large for cache"} {
		if got := raw.do(fmt.Sprintf("set f 1 0 %d\r\n%s\r\n", n, make([]byte, n))); got != want {
			t.Errorf("a raw set with flags of %d bytes: %q, want %q", n, got, want)
		}
	}
	// Every storage path checks.
	big := Item{Key: "k", Value: make([]byte, 1<<20)}
	if err := c.StoreMulti(ctx, Set, []Item{big}, make([]error, 1)); err != nil {
		t.Fatal(err)
	}
	var out [1]MetaResult
	if err := c.Meta(ctx, []Meta{{Cmd: MetaSet, Key: "k", Value: big.Value}}, out[:]); err != nil || !errors.Is(out[0].Err, ErrValueTooLarge) {
		t.Errorf("ms of 1 MiB: %v, %v", out[0].Err, err)
	}
	// An override replaces the server's limit, for a proxy.
	o := New(Config{Config: wire.Config{Addr: s.Addr}, MaxValueSize: 10})
	defer o.Close()
	if err := o.Store(ctx, Set, Item{Key: "k", Value: make([]byte, 11)}); !errors.Is(err, ErrValueTooLarge) {
		t.Errorf("over MaxValueSize: %v", err)
	}
}

func TestStatsAndUsage(t *testing.T) {
	c, _ := realClient(t, Config{})
	ctx := t.Context()
	for i := range 5 {
		c.Store(ctx, Set, Item{Key: "k" + strconv.Itoa(i), Value: []byte("v")})
	}
	c.Get(ctx, "k0")
	c.Get(ctx, "absent")
	m, err := c.Stats(ctx, "")
	if err != nil || m["curr_items"] != "5" || m["version"] == "" {
		t.Fatalf("stats: curr_items %q, version %q, %v", m["curr_items"], m["version"], err)
	}
	u, err := c.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u.CurrItems != 5 || u.Bytes <= 0 || u.LimitMaxBytes != 64<<20 || u.GetHits != 1 || u.GetMisses != 1 || u.ItemSizeMax != 1<<20 {
		t.Errorf("Usage = %+v", u)
	}
	if n, err := c.CurrItems(ctx); err != nil || n != 5 {
		t.Errorf("CurrItems = %d, %v", n, err)
	}
	if _, err := c.Stats(ctx, "nonsense"); err == nil {
		t.Error("stats nonsense: no error")
	}
}

func TestMetaCommands(t *testing.T) {
	c, _ := realClient(t, Config{})
	ctx := t.Context()
	if ok, err := c.HasMeta(ctx); !ok || err != nil {
		t.Fatalf("HasMeta = %v, %v", ok, err)
	}
	// ms then mg of the value with its flags, TTL, CAS.
	r, err := c.MetaOne(ctx, Meta{Cmd: MetaSet, Key: "m", Value: []byte("val"), Flags: FlagsOf("FTc"), ClientFlags: 9, TTL: 60})
	if err != nil || r.Status != HD || !r.Flags.Has('c') || r.CAS == 0 {
		t.Fatalf("ms = %+v, %v", r, err)
	}
	g, err := c.MetaOne(ctx, Meta{Cmd: MetaGet, Key: "m", Flags: FlagsOf("vftcsk"), Opaque: "op1"})
	if err != nil || g.Status != VA || string(g.Value) != "val" || g.ClientFlags != 9 || g.TTL < 59 || g.CAS != r.CAS ||
		g.Size != 3 || g.Key != "m" || g.Opaque != "op1" {
		t.Fatalf("mg = %+v, %v", g, err)
	}
	// A lease: N vivifies a miss, one caller wins.
	first, _ := c.MetaOne(ctx, Meta{Cmd: MetaGet, Key: "lease", Flags: FlagsOf("vcN"), Vivify: 30})
	second, _ := c.MetaOne(ctx, Meta{Cmd: MetaGet, Key: "lease", Flags: FlagsOf("vcN"), Vivify: 30})
	if !first.Won() || second.Won() || !second.WinnerSent() || len(first.Value) != 0 {
		t.Errorf("vivify: first %+v, second %+v; want W then Z", first, second)
	}
	// ms with a CAS that no longer matches: EX.
	if r, _ := c.MetaOne(ctx, Meta{Cmd: MetaSet, Key: "m", Value: []byte("x"), Flags: FlagsOf("C"), CompareCAS: g.CAS + 1}); r.Status != EX {
		t.Errorf("ms with a wrong CAS: %v", r.Status)
	}
	// md I marks stale; the next mg wins with X.
	if r, err := c.MetaOne(ctx, Meta{Cmd: MetaDelete, Key: "m", Flags: FlagsOf("IT"), TTL: 30}); err != nil || r.Status != HD {
		t.Fatalf("md I = %+v, %v", r, err)
	}
	if g, _ := c.MetaOne(ctx, Meta{Cmd: MetaGet, Key: "m", Flags: FlagsOf("vc")}); !g.Stale() || !g.Won() || string(g.Value) != "val" {
		t.Errorf("mg of a stale item: %+v", g)
	}
	// ma with autovivify, then incr and decr.
	if a, err := c.MetaOne(ctx, Meta{Cmd: MetaArith, Key: "n", Flags: FlagsOf("NJv"), Vivify: 0, Initial: 5}); err != nil || string(a.Value) != "5" {
		t.Fatalf("ma N J = %+v, %v", a, err)
	}
	if a, _ := c.MetaOne(ctx, Meta{Cmd: MetaArith, Key: "n", Flags: FlagsOf("DMv"), Delta: 7, Mode: 'D'}); string(a.Value) != "0" {
		t.Errorf("ma decr past 0: %q", a.Value)
	}
	// A quiet pipeline: misses and HDs are not sent, the rest are matched.
	reqs := []Meta{
		{Cmd: MetaSet, Key: "q1", Value: []byte("1"), Flags: FlagsOf("q")},
		{Cmd: MetaGet, Key: "absent", Flags: FlagsOf("vq")},
		{Cmd: MetaGet, Key: "q1", Flags: FlagsOf("vq")},
		{Cmd: MetaNoop},
		{Cmd: MetaDelete, Key: "absent", Flags: FlagsOf("q")},
		{Cmd: MetaSet, Key: "q1", Value: []byte("2"), Flags: FlagsOf("qM"), Mode: 'E'},
	}
	out := make([]MetaResult, len(reqs))
	if err := c.Meta(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Status != HD || out[1].Status != EN || out[2].Status != VA || string(out[2].Value) != "1" ||
		out[3].Status != MN || out[4].Status != NF || out[5].Status != NS {
		t.Errorf("quiet pipeline: %v %v %v(%q) %v %v %v", out[0].Status, out[1].Status, out[2].Status, out[2].Value, out[3].Status, out[4].Status, out[5].Status)
	}
	reqs[1].Opaque = "mine"
	if err := c.Meta(ctx, reqs, out); !errors.Is(err, ErrOpaque) {
		t.Errorf("an opaque in a quiet pipeline: %v", err)
	}
	if st := c.Pool().Stats(); st.Open != 1 {
		t.Errorf("pool %+v: the meta answers left one connection in step", st)
	}
}

func TestMetadump(t *testing.T) {
	c, _ := realClient(t, Config{})
	ctx := t.Context()
	want := map[string]int64{}
	items := []Item{}
	for i := range 300 {
		k := fmt.Sprintf("md:%d", i)
		exp := int32(0)
		if i%2 == 0 {
			exp = 1000
		}
		items = append(items, Item{Key: k, Value: []byte("v"), Exptime: exp})
		want[k] = int64(exp)
	}
	if err := c.StoreMulti(ctx, Set, items, make([]error, len(items))); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	got := map[string]int64{}
	err := c.Metadump(ctx, func(key []byte, exp int64) error {
		got[string(key)] = exp
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d keys, want %d", len(got), len(want))
	}
	for k, w := range want {
		e, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s not listed", k)
		case w == 0 && e != -1:
			t.Errorf("%s: exp %d, want -1", k, e)
		case w > 0 && (e < now+w-2 || e > now+w+2):
			t.Errorf("%s: exp %d, want about %d", k, e, now+w)
		}
	}
	// fn's error ends the listing, and the connection, mid-stream, is not
	// reused.
	stop := errors.New("stop")
	n := 0
	if err := c.Metadump(ctx, func([]byte, int64) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("stopped listing: %v after %d keys", err, n)
	}
	if _, err := c.Get(ctx, "md:1"); err != nil {
		t.Errorf("Get after a stopped listing: %v", err)
	}
}

// TestMetadumpBusy: a listing that finds the crawler busy with another
// retries, bounded by its context, and succeeds once the other ends.
func TestMetadumpBusy(t *testing.T) {
	c, s := realClient(t, Config{})
	ctx := t.Context()
	// A listing larger than the socket buffers can hold, so that the
	// crawler waits for a reader that does not read.
	items := make([]Item, 60000)
	for i := range items {
		items[i] = Item{Key: fmt.Sprintf("%0200d", i), Value: []byte("v")}
	}
	for i := 0; i < len(items); i += 1000 {
		if err := c.StoreMulti(ctx, Set, items[i:i+1000], make([]error, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	raw := dialRaw(t, s.Addr)
	if l := raw.do("lru_crawler metadump hash\r\n"); !strings.HasPrefix(l, "key=") {
		t.Fatalf("the other listing: %q", l)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err := c.Metadump(short, func([]byte, int64) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a listing while another holds the crawler: %v, want the context's deadline", err)
	}
	drained := make(chan error, 1)
	go func() {
		for {
			l, err := raw.r.ReadString('\n')
			if err != nil || l == "END\r\n" {
				drained <- err
				return
			}
		}
	}()
	n := 0
	if err := c.Metadump(ctx, func([]byte, int64) error { n++; return nil }); err != nil || n != len(items) {
		t.Fatalf("a listing once the other ends: %d keys, %v", n, err)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
}

// TestGetAllocations: a Get's one allocation is its value, with a context
// that cannot be cancelled; a multi-get's values come from one arena.
func TestGetAllocations(t *testing.T) {
	c, _ := realClient(t, Config{})
	ctx := context.Background()
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = "alloc:" + strconv.Itoa(i)
		if err := c.Store(ctx, Set, Item{Key: keys[i], Value: []byte("a value of some bytes")}); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { c.Get(ctx, keys[0]) }); n != 1 {
		t.Errorf("Get: %v allocations, want 1 (the value)", n)
	}
	out := make([]wire.Answer, len(keys))
	if n := testing.AllocsPerRun(100, func() { c.GetMulti(ctx, keys, out) }); n > 2 {
		t.Errorf("GetMulti of %d keys: %v allocations, want at most 2 (the Pending, one arena)", len(keys), n)
	}
}
