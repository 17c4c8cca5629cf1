package gomemcache

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// memcacheAPI is the method set of gomemcache's *memcache.Client: what a
// program written for gomemcache calls.
type memcacheAPI interface {
	Get(key string) (*memcache.Item, error)
	GetMulti(keys []string) (map[string]*memcache.Item, error)
	Set(item *memcache.Item) error
	Add(item *memcache.Item) error
	Replace(item *memcache.Item) error
	Append(item *memcache.Item) error
	Prepend(item *memcache.Item) error
	CompareAndSwap(item *memcache.Item) error
	Delete(key string) error
	DeleteAll() error
	FlushAll() error
	Increment(key string, delta uint64) (uint64, error)
	Decrement(key string, delta uint64) (uint64, error)
	Touch(key string, seconds int32) error
	GetAndTouch(key string, expiration int32) (*memcache.Item, error)
	Ping() error
	Close() error
}

var (
	_ memcacheAPI = (*memcache.Client)(nil)
	_ memcacheAPI = (*Client)(nil)
)

// TestMethodSet checks that every exported method and knob of
// *memcache.Client exists on *Client with the same type, so a program
// written for gomemcache compiles unchanged but for its constructor.
func TestMethodSet(t *testing.T) {
	theirs, ours := reflect.TypeOf(&memcache.Client{}), reflect.TypeOf(&Client{})
	if theirs.NumMethod() < 17 {
		t.Fatalf("gomemcache's Client has %d methods: the reflection is wrong", theirs.NumMethod())
	}
	for i := range theirs.NumMethod() {
		m := theirs.Method(i)
		o, ok := ours.MethodByName(m.Name)
		if !ok {
			t.Errorf("method %s missing", m.Name)
			continue
		}
		// Method types include the receiver, which differs: compare the rest.
		if !sameSignature(m.Type, o.Type) {
			t.Errorf("%s: ours is %v, gomemcache's %v", m.Name, o.Type, m.Type)
		}
	}
	for _, knob := range []string{"Timeout", "MaxIdleConns"} {
		f, _ := theirs.Elem().FieldByName(knob)
		g, ok := ours.Elem().FieldByName(knob)
		if !ok || g.Type != f.Type {
			t.Errorf("field %s: ours %v, gomemcache's %v", knob, g.Type, f.Type)
		}
	}
}

func sameSignature(a, b reflect.Type) bool {
	if a.NumIn() != b.NumIn() || a.NumOut() != b.NumOut() {
		return false
	}
	for i := 1; i < a.NumIn(); i++ {
		if a.In(i) != b.In(i) {
			return false
		}
	}
	for i := range a.NumOut() {
		if a.Out(i) != b.Out(i) {
			return false
		}
	}
	return true
}

// step is one call of the table; it returns what a user would observe.
type step struct {
	name string
	do   func(mc memcacheAPI, key func(string) string) string
}

// show renders a result so that two servers' answers compare equal exactly
// when a user could not tell them apart: CAS ids differ between servers, so
// only whether one is set is shown; an error shows as its text, which
// programs match ("client error"), and a sentinel that is not bare, as
// gomemcache returns them, shows as wrapped.
func show(it *memcache.Item, err error) string {
	if err != nil {
		return showErr(err)
	}
	return fmt.Sprintf("%q flags=%d cas=%v", it.Value, it.Flags, it.CasID != 0)
}

func showErr(err error) string {
	if err == nil {
		return "ok"
	}
	for _, s := range []error{memcache.ErrCacheMiss, memcache.ErrNotStored, memcache.ErrCASConflict, memcache.ErrMalformedKey} {
		if err != s && errors.Is(err, s) {
			return "wrapped " + err.Error()
		}
	}
	return err.Error()
}

func showN(v uint64, err error) string {
	if err != nil {
		return showErr(err)
	}
	return fmt.Sprint(v)
}

func set(mc memcacheAPI, key, value string, flags uint32) string {
	return showErr(mc.Set(&memcache.Item{Key: key, Value: []byte(value), Flags: flags}))
}

// steps is the table: every method, its edge cases, and a read after each
// write. Keys are named through key, which a test maps to keys that move in
// a resharding. The first prepared steps only write.
func steps() (prepared int, table []step) {
	get := func(k string) step {
		return step{"get " + k, func(mc memcacheAPI, key func(string) string) string { return show(mc.Get(key(k))) }}
	}
	table = []step{
		{"set a", func(mc memcacheAPI, key func(string) string) string { return set(mc, key("a"), "va", 7) }},
		{"set b", func(mc memcacheAPI, key func(string) string) string { return set(mc, key("b"), "vb", 0) }},
		{"set c", func(mc memcacheAPI, key func(string) string) string { return set(mc, key("c"), "vc", 3) }},
		{"set d", func(mc memcacheAPI, key func(string) string) string { return set(mc, key("d"), "vd", 4) }},
		{"set n", func(mc memcacheAPI, key func(string) string) string { return set(mc, key("n"), "10", 0) }},
		{"set m", func(mc memcacheAPI, key func(string) string) string { return set(mc, key("m"), "1", 0) }},
		{"set x", func(mc memcacheAPI, key func(string) string) string { return set(mc, key("x"), "abc", 0) }},
		{"set e", func(mc memcacheAPI, key func(string) string) string { return set(mc, key("e"), "ve", 5) }},
		{"set t", func(mc memcacheAPI, key func(string) string) string { return set(mc, key("t"), "vt", 6) }},
		{"set g", func(mc memcacheAPI, key func(string) string) string { return set(mc, key("g"), "vg", 9) }},
	}
	prepared = len(table)
	table = append(table,
		get("a"), get("missing"),
		step{"add a", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.Add(&memcache.Item{Key: key("a"), Value: []byte("no")}))
		}},
		step{"add new", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.Add(&memcache.Item{Key: key("new"), Value: []byte("vnew"), Flags: 1}))
		}},
		get("new"),
		step{"replace missing", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.Replace(&memcache.Item{Key: key("missing"), Value: []byte("no")}))
		}},
		step{"replace b", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.Replace(&memcache.Item{Key: key("b"), Value: []byte("vb2"), Flags: 8}))
		}},
		get("b"),
		step{"append c", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.Append(&memcache.Item{Key: key("c"), Value: []byte("+"), Flags: 99}))
		}},
		step{"prepend c", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.Prepend(&memcache.Item{Key: key("c"), Value: []byte("-")}))
		}},
		get("c"),
		step{"append missing", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.Append(&memcache.Item{Key: key("missing"), Value: []byte("+")}))
		}},
		step{"prepend missing", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.Prepend(&memcache.Item{Key: key("missing"), Value: []byte("-")}))
		}},
		step{"cas d: fresh, then stale, then gone", func(mc memcacheAPI, key func(string) string) string {
			it, err := mc.Get(key("d"))
			if err != nil {
				return showErr(err)
			}
			it.Value = []byte("vd2")
			first := showErr(mc.CompareAndSwap(it))
			it.Value = []byte("vd3")
			second := showErr(mc.CompareAndSwap(it))
			mc.Delete(key("d"))
			third := showErr(mc.CompareAndSwap(it))
			return first + " / " + second + " / " + third
		}},
		step{"cas after a concurrent set", func(mc memcacheAPI, key func(string) string) string {
			it, err := mc.Get(key("e"))
			if err != nil {
				return showErr(err)
			}
			set(mc, key("e"), "other", 0)
			it.Value = []byte("mine")
			return showErr(mc.CompareAndSwap(it)) + " " + show(mc.Get(key("e")))
		}},
		step{"incr missing", func(mc memcacheAPI, key func(string) string) string { return showN(mc.Increment(key("missing"), 1)) }},
		step{"decr missing", func(mc memcacheAPI, key func(string) string) string { return showN(mc.Decrement(key("missing"), 1)) }},
		step{"incr n 5", func(mc memcacheAPI, key func(string) string) string { return showN(mc.Increment(key("n"), 5)) }},
		step{"decr n 20", func(mc memcacheAPI, key func(string) string) string { return showN(mc.Decrement(key("n"), 20)) }},
		step{"incr m wraps", func(mc memcacheAPI, key func(string) string) string {
			return showN(mc.Increment(key("m"), math.MaxUint64))
		}},
		step{"incr non-number", func(mc memcacheAPI, key func(string) string) string { return showN(mc.Increment(key("x"), 1)) }},
		// memcached's protocol.txt: a decrement that shortens the number
		// "MAY be space-padded at the end, but this is purely an
		// implementation optimization": memcached pads in place unless
		// another connection still holds the item, so one server answers
		// "0 " or "0" by timing. The counter's value is what is compared.
		step{"get n", func(mc memcacheAPI, key func(string) string) string {
			it, err := mc.Get(key("n"))
			if err == nil {
				it.Value = bytes.TrimRight(it.Value, " ")
			}
			return show(it, err)
		}},
		get("m"),
		step{"delete missing", func(mc memcacheAPI, key func(string) string) string { return showErr(mc.Delete(key("missing"))) }},
		step{"delete b", func(mc memcacheAPI, key func(string) string) string { return showErr(mc.Delete(key("b"))) }},
		get("b"),
		step{"delete b again", func(mc memcacheAPI, key func(string) string) string { return showErr(mc.Delete(key("b"))) }},
		step{"touch missing", func(mc memcacheAPI, key func(string) string) string { return showErr(mc.Touch(key("missing"), 100)) }},
		step{"touch t", func(mc memcacheAPI, key func(string) string) string { return showErr(mc.Touch(key("t"), 100)) }},
		step{"gat missing", func(mc memcacheAPI, key func(string) string) string { return show(mc.GetAndTouch(key("missing"), 100)) }},
		step{"gat g", func(mc memcacheAPI, key func(string) string) string { return show(mc.GetAndTouch(key("g"), 100)) }},
		step{"set with expirations", func(mc memcacheAPI, key func(string) string) string {
			abs := int32(time.Now().Add(time.Hour).Unix())
			return showErr(mc.Set(&memcache.Item{Key: key("rel"), Value: []byte("r"), Expiration: 60})) +
				showErr(mc.Set(&memcache.Item{Key: key("abs"), Value: []byte("a"), Expiration: abs})) +
				" " + show(mc.Get(key("rel"))) + " " + show(mc.Get(key("abs")))
		}},
		step{"get multi", func(mc memcacheAPI, key func(string) string) string {
			ks := []string{key("a"), key("missing"), key("c"), key("new"), key("g"), key("t")}
			for i := range 30 {
				name := fmt.Sprintf("multi%d", i)
				k := key(name)
				set(mc, k, name, uint32(i))
				ks = append(ks, k)
			}
			m, err := mc.GetMulti(ks)
			var out []string
			for _, k := range ks {
				if it, ok := m[k]; ok {
					out = append(out, show(it, nil))
				} else {
					out = append(out, "absent")
				}
			}
			return showErr(err) + " " + strings.Join(out, ", ")
		}},
		step{"malformed keys", func(mc memcacheAPI, key func(string) string) string {
			long := strings.Repeat("k", 251)
			_, err1 := mc.Get("has space")
			err2 := mc.Set(&memcache.Item{Key: long, Value: []byte("v")})
			m, err3 := mc.GetMulti([]string{key("a"), "ctl\x01"})
			_, err4 := mc.Increment("has\nnewline", 1)
			return fmt.Sprint(showErr(err1), showErr(err2), m == nil, showErr(err3), showErr(err4))
		}},
		step{"too large a value", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.Set(&memcache.Item{Key: key("big"), Value: make([]byte, 2<<20)}))
		}},
		step{"ping", func(mc memcacheAPI, key func(string) string) string { return showErr(mc.Ping()) }},
		step{"close, then use", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.Close()) + " " + show(mc.Get(key("a")))
		}},
		step{"flush all", func(mc memcacheAPI, key func(string) string) string {
			return showErr(mc.FlushAll()) + " " + show(mc.Get(key("a"))) + " " + show(mc.Get(key("g")))
		}},
		step{"delete all", func(mc memcacheAPI, key func(string) string) string {
			set(mc, key("a"), "va", 0)
			return showErr(mc.DeleteAll()) + " " + show(mc.Get(key("a")))
		}},
	)
	return prepared, table
}

func same(k string) string { return k }

// run runs the table on mc, calling between after the prepared steps.
func run(mc memcacheAPI, key func(string) string, between func()) []string {
	prepared, table := steps()
	out := make([]string, len(table))
	for i, s := range table {
		if i == prepared && between != nil {
			between()
		}
		out[i] = s.name + ": " + s.do(mc, key)
	}
	return out
}

func nodesOf(servers []*testserver.Server) []ring.Node {
	var nodes []ring.Node
	for i, a := range testserver.Addrs(servers) {
		nodes = append(nodes, ring.Node{Name: fmt.Sprintf("n%d", i), Addr: a})
	}
	return nodes
}

func compare(t *testing.T, want, got []string) {
	t.Helper()
	for i := range want {
		if want[i] != got[i] {
			t.Errorf("step %d:\n  gomemcache on one server: %s\n  drop-in:                  %s", i, want[i], got[i])
		}
	}
}

// TestSameAsGomemcache runs the table against gomemcache on one memcached
// and against the drop-in over four: every answer is the same. Then again
// with the drop-in over eight resharded to six after the writes, with every
// key of the table one that moves: still the same.
func TestSameAsGomemcache(t *testing.T) {
	servers := testserver.Memcached(t, 9)
	want := run(plain(servers[0].Addr), same, nil)
	t.Logf("the table has %d steps:\n%s", len(want), strings.Join(want, "\n"))

	t.Run("4 nodes", func(t *testing.T) {
		mc, err := New(nodesOf(servers[1:5]))
		if err != nil {
			t.Fatal(err)
		}
		mc.Timeout = testserver.ClientTimeout
		spread := map[string]bool{}
		key := func(k string) string {
			spread[mc.Shardcache().Locate(k).Addr] = true
			return k
		}
		compare(t, want, run(mc, key, nil))
		if len(spread) != 4 {
			t.Errorf("the table's keys reached %d of the 4 nodes", len(spread))
		}
	})

	t.Run("8 to 6", func(t *testing.T) {
		from := nodesOf(servers[1:9])
		to := from[:6]
		mc, err := New(from)
		if err != nil {
			t.Fatal(err)
		}
		mc.Timeout = testserver.ClientTimeout
		oldRing, newRing := mustRing(t, from), mustRing(t, to)
		key := func(k string) string { // the first variant of k that moves
			for i := 0; ; i++ {
				if m := fmt.Sprintf("%s.%d", k, i); oldRing.Locate(m).Addr != newRing.Locate(m).Addr {
					return m
				}
			}
		}
		got := run(mc, key, func() {
			if err := mc.Reshard(to, time.Hour); err != nil {
				t.Fatal(err)
			}
		})
		compare(t, want, got)
		st := mc.Migration()
		if !st.Active || st.FallbackHits == 0 || st.Backfills == 0 || st.DualWrites == 0 || st.DualDeletes == 0 {
			t.Errorf("the table did not run through the migration: %+v", st)
		}
	})
}

func mustRing(t *testing.T, nodes []ring.Node) *ring.Ring {
	t.Helper()
	r, err := ring.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReshardKeepsEveryKey writes keys through the drop-in over 8 nodes,
// reshards to 6, and reads every key back, flags included, in one GetMulti
// and one by one; the moved keys are backfilled to their new owners.
func TestReshardKeepsEveryKey(t *testing.T) {
	servers := testserver.Memcached(t, 8)
	from := nodesOf(servers)
	to := from[:6]
	mc, err := New(from)
	if err != nil {
		t.Fatal(err)
	}
	mc.Timeout = testserver.ClientTimeout
	keys := make([]string, 600)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
		if err := mc.Set(&memcache.Item{Key: keys[i], Value: []byte(keys[i]), Flags: uint32(i), Expiration: 3600}); err != nil {
			t.Fatal(err)
		}
	}
	if err := mc.Reshard(to, time.Hour); err != nil {
		t.Fatal(err)
	}
	oldRing, newRing := mustRing(t, from), mustRing(t, to)
	moved := 0
	for _, k := range keys {
		if oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			moved++
		}
	}
	half := keys[:300]
	m, err := mc.GetMulti(half)
	if err != nil || len(m) != len(half) {
		t.Fatalf("GetMulti after the reshard: %d of %d, %v", len(m), len(half), err)
	}
	for _, k := range keys[300:] {
		it, err := mc.Get(k)
		if err != nil || string(it.Value) != k {
			t.Fatalf("Get(%q) after the reshard = %v, %v", k, it, err)
		}
	}
	for i, k := range keys {
		direct := plain(newRing.Locate(k).Addr)
		it, err := direct.Get(k)
		if err != nil || it.Flags != uint32(i) {
			t.Fatalf("%q on its new owner: %+v, %v", k, it, err)
		}
	}
	st := mc.Migration()
	if st.FallbackHits != int64(moved) || st.Backfills != int64(moved) {
		t.Fatalf("%d keys moved; status %+v", moved, st)
	}
	t.Logf("%d of %d keys moved, all read back and backfilled", moved, len(keys))
}

// TestKnobs checks that Timeout and MaxIdleConns set after New, before the
// first call, reach every node's connections: idle connections beyond
// MaxIdleConns are closed once a burst of callers is done, and a call to a
// node that stopped answering waits Timeout (here longer than the 500ms
// default), those of nodes a Reshard adds included.
func TestKnobs(t *testing.T) {
	servers := testserver.Memcached(t, 3)
	nodes := nodesOf(servers)
	mc, err := New(nodes[:2])
	if err != nil {
		t.Fatal(err)
	}
	mc.Timeout, mc.MaxIdleConns = 2*time.Second, 3
	if err := mc.Reshard(nodes, 0); err != nil {
		t.Fatal(err)
	}
	// A burst of 16 callers on the keys of one node.
	target := servers[2]
	var keys []string
	for i := 0; len(keys) < 16; i++ {
		if k := fmt.Sprintf("knob:%d", i); mc.Shardcache().Locate(k).Addr == target.Addr {
			keys = append(keys, k)
		}
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			for range 20 {
				if _, err := mc.Get(k); err != memcache.ErrCacheMiss {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The server sees the idle ones the client kept (and the probe's own).
	var open int
	for range 100 {
		if open = currConnections(t, target.Addr) - 1; open <= 3 {
			break
		}
		time.Sleep(10 * time.Millisecond) // the closes reach the server a moment later
	}
	if open > 3 {
		t.Errorf("%d connections kept idle with MaxIdleConns 3", open)
	}
	target.Pause()
	defer target.Resume()
	for !target.Paused() {
		time.Sleep(time.Millisecond) // SIGSTOP takes effect a moment after it is sent
	}
	start := time.Now()
	_, err = mc.Get(keys[0])
	if err == nil {
		t.Fatal("Get from a stopped node succeeded")
	}
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Errorf("Get from a stopped node gave up after %v (%v); want Timeout (2s)", took, err)
	}
}

// currConnections is the memcached at addr's curr_connections, its own
// included.
func currConnections(t *testing.T, addr string) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "stats\r\n")
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "STAT curr_connections "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
		if sc.Text() == "END" {
			break
		}
	}
	t.Fatal("no curr_connections in stats")
	return 0
}

// TestBadInput checks the errors for bad nodes and bad expirations.
func TestBadInput(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	servers := testserver.Memcached(t, 1)
	mc, err := New(nodesOf(servers))
	if err != nil {
		t.Fatal(err)
	}
	mc.Timeout = testserver.ClientTimeout
	for _, exp := range []int32{-1, int32(time.Now().Add(-time.Hour).Unix())} {
		if err := mc.Set(&memcache.Item{Key: "k", Value: []byte("v"), Expiration: exp}); !errors.Is(err, client.ErrBadTTL) {
			t.Errorf("Set with Expiration %d = %v, want ErrBadTTL", exp, err)
		}
		if err := mc.Touch("k", exp); !errors.Is(err, client.ErrBadTTL) {
			t.Errorf("Touch(%d) = %v, want ErrBadTTL", exp, err)
		}
	}
	if _, err := mc.Get(""); err != memcache.ErrMalformedKey {
		t.Errorf("Get(\"\") = %v, want memcache.ErrMalformedKey", err)
	}
	// A padded address is refused at New, not at every call.
	if _, err := New([]ring.Node{{Addr: " " + servers[0].Addr}}); !errors.Is(err, ring.ErrBadAddr) {
		t.Errorf("New with a padded address = %v, want ring.ErrBadAddr", err)
	}
	// A value over the server's item limit fails before it is sent, on
	// every path, with a typed error; the key keeps its value. (The limit
	// is memcached's 1 MiB less the item's header: exactly 1 MiB is over.)
	if err := mc.Set(&memcache.Item{Key: "big", Value: []byte("small")}); err != nil {
		t.Fatal(err)
	}
	sentBefore := servers[0].MemcachedStat(t, "bytes_read")
	for _, size := range []int{1 << 20, 2 << 20} {
		it := &memcache.Item{Key: "big", Value: make([]byte, size)}
		for name, call := range map[string]func(*memcache.Item) error{
			"Set": mc.Set, "Add": mc.Add, "Replace": mc.Replace, "Append": mc.Append, "Prepend": mc.Prepend,
			"CompareAndSwap": mc.CompareAndSwap,
		} {
			if err := call(it); !errors.Is(err, client.ErrValueTooLarge) {
				t.Errorf("%s of %d bytes = %v, want client.ErrValueTooLarge", name, size, err)
			}
		}
	}
	if sent := servers[0].MemcachedStat(t, "bytes_read") - sentBefore; sent > 1<<16 {
		t.Errorf("the server read %d bytes during the refused writes: a value was sent", sent)
	}
	if it, err := mc.Get("big"); err != nil || string(it.Value) != "small" {
		t.Errorf("after the refused writes: %v, %v; want the value kept", it, err)
	}
}

// TestSelector checks that gomemcache's own client over a Selector places
// every key on the node the ring locates.
func TestSelector(t *testing.T) {
	servers := testserver.Memcached(t, 3)
	r := mustRing(t, nodesOf(servers))
	sel, err := NewSelector(r)
	if err != nil {
		t.Fatal(err)
	}
	mc := memcache.NewFromSelector(sel)
	mc.Timeout = testserver.ClientTimeout
	for i := range 60 {
		k := fmt.Sprintf("sel:%d", i)
		if err := mc.Set(&memcache.Item{Key: k, Value: []byte(k)}); err != nil {
			t.Fatal(err)
		}
		if _, err := plain(r.Locate(k).Addr).Get(k); err != nil {
			t.Fatalf("%q not on the node the ring locates: %v", k, err)
		}
	}
	var each []string
	sel.Each(func(a net.Addr) error { each = append(each, a.String()); return nil })
	if !slices.Equal(each, testserver.Addrs(servers)) {
		t.Fatalf("Each visited %v", each)
	}
	if _, err := NewSelector(emptyLocator{}); err != memcache.ErrNoServers {
		t.Fatalf("NewSelector over no nodes = %v", err)
	}
}

type emptyLocator struct{}

func (emptyLocator) Locate(string) ring.Node { return ring.Node{} }
func (emptyLocator) Nodes() []ring.Node      { return nil }

// TestMigrateFromServerList moves a fleet off gomemcache's own placement
// without a cold cache: keys written by memcache.New(addrs...) (crc32 % N)
// read back through the drop-in started with that placement as
// MigrateFrom, flags included, and are copied to their owners on the ring.
func TestMigrateFromServerList(t *testing.T) {
	servers := testserver.Memcached(t, 4)
	addrs := testserver.Addrs(servers)
	old := plain(addrs...)
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("legacy:%d", i)
		if err := old.Set(&memcache.Item{Key: keys[i], Value: []byte(keys[i]), Flags: 3}); err != nil {
			t.Fatal(err)
		}
	}
	modulo, err := ring.NewModulo(addrs)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := NewWithOptions(nodesOf(servers), Options{MigrateFrom: &client.MigrateFrom{
		Placement: modulo, Start: time.Now(), Window: time.Hour,
	}})
	if err != nil {
		t.Fatal(err)
	}
	mc.Timeout = testserver.ClientTimeout
	m, err := mc.GetMulti(keys)
	if err != nil || len(m) != len(keys) {
		t.Fatalf("GetMulti of the legacy keys: %d of %d, %v", len(m), len(keys), err)
	}
	for _, k := range keys {
		if it := m[k]; string(it.Value) != k || it.Flags != 3 {
			t.Fatalf("%q = %+v", k, it)
		}
	}
	st := mc.Migration()
	if st.FallbackHits == 0 || st.Backfills != st.FallbackHits {
		t.Fatalf("the keys did not come through the old placement: %+v", st)
	}
	t.Logf("%d of %d keys were on another server under crc32 %% 4; all read back", st.FallbackHits, len(keys))
}

// plain returns a gomemcache client of addrs with testserver.ClientTimeout
// (TestKnobs sets its own: it tests the timeout).
func plain(addrs ...string) *memcache.Client {
	c := memcache.New(addrs...)
	c.Timeout = testserver.ClientTimeout
	return c
}
