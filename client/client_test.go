package client

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// mustGet fails the test unless key holds want.
func mustGet(t *testing.T, c *Client, key, want string) {
	t.Helper()
	v, err := c.Get(t.Context(), key)
	if err != nil || string(v) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, v, err, want)
	}
}

// mustMiss fails the test unless key is absent.
func mustMiss(t *testing.T, c *Client, key string) {
	t.Helper()
	if v, err := c.Get(t.Context(), key); !errors.Is(err, ErrCacheMiss) {
		t.Fatalf("Get(%q) = %q, %v; want ErrCacheMiss", key, v, err)
	}
}

// keysOn returns n keys, prefixed with prefix, that the client places on the
// node at addr.
func keysOn(c *Client, addr, prefix string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprintf("%s%d", prefix, i); c.Locate(k).Addr == addr {
			keys = append(keys, k)
		}
	}
	return keys
}

// nodeErrors returns the *NodeErrors that err joins, or that it is.
func nodeErrors(err error) []*NodeError {
	var nes []*NodeError
	var walk func(error)
	walk = func(err error) {
		if ne, ok := err.(*NodeError); ok {
			nes = append(nes, ne)
			return
		}
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			for _, err := range e.Unwrap() {
				walk(err)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return nes
}

func TestGetSet(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()

		// A miss is ErrCacheMiss itself, not wrapped, as gomemcache's is.
		if v, err := c.Get(ctx, "user:42"); err != ErrCacheMiss || v != nil {
			t.Fatalf("Get of a missing key = %q, %v; want nil, ErrCacheMiss", v, err)
		}
		if err := c.Set(ctx, "user:42", []byte("Ada"), time.Minute); err != nil {
			t.Fatalf("Set: %v", err)
		}
		mustGet(t, c, "user:42", "Ada")
		if err := c.Set(ctx, "user:42", []byte("Grace"), time.Minute); err != nil {
			t.Fatalf("Set over a value: %v", err)
		}
		mustGet(t, c, "user:42", "Grace")

		// Values are bytes: CR LF and NUL must survive both protocols.
		bin := "a\r\nb\x00c\r\n"
		if err := c.Set(ctx, "bin", []byte(bin), 0); err != nil {
			t.Fatalf("Set binary: %v", err)
		}
		mustGet(t, c, "bin", bin)

		// A nil value stores an empty one: a hit, not a miss.
		if err := c.Set(ctx, "empty", nil, 0); err != nil {
			t.Fatalf("Set nil: %v", err)
		}
		mustGet(t, c, "empty", "")
		if hits, err := c.GetMulti(ctx, []string{"empty"}); err != nil || len(hits) != 1 || len(hits["empty"]) != 0 {
			t.Fatalf("GetMulti(empty) = %q, %v; want one empty hit", hits, err)
		}
		// TestTTL checks that TTL 0 is no expiry.
	})
}

func TestAdd(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()
		if err := c.Add(ctx, "lock", []byte("first"), time.Minute); err != nil {
			t.Fatalf("Add of an absent key: %v", err)
		}
		mustGet(t, c, "lock", "first")
		if err := c.Add(ctx, "lock", []byte("second"), time.Minute); !errors.Is(err, ErrNotStored) {
			t.Fatalf("Add of a present key = %v; want ErrNotStored", err)
		}
		mustGet(t, c, "lock", "first") // not overwritten

		if err := c.Delete(ctx, "lock"); err != nil {
			t.Fatal(err)
		}
		if err := c.Add(ctx, "lock", nil, 0); err != nil {
			t.Fatalf("Add after Delete: %v", err)
		}
		mustGet(t, c, "lock", "")
	})
}

func TestDelete(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()
		if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, "k"); err != nil {
			t.Fatalf("Delete of a present key: %v", err)
		}
		mustMiss(t, c, "k")
		if h := cl.holders(t, "k"); len(h) != 0 {
			t.Fatalf("deleted key still on %v", h)
		}
		if err := c.Delete(ctx, "k"); err != nil {
			t.Fatalf("Delete of a missing key = %v; want nil", err)
		}
	})
}

func TestIncr(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()
		incr := func(key string, delta, want int64) {
			t.Helper()
			if v, err := c.Incr(ctx, key, delta); err != nil || v != want {
				t.Fatalf("Incr(%q, %d) = %d, %v; want %d", key, delta, v, err, want)
			}
		}

		incr("hits", 5, 5) // a missing key is created with delta
		incr("hits", 3, 8)
		incr("hits", 0, 8)
		mustGet(t, c, "hits", "8") // stored as decimal text, readable by Get

		incr("zero", 0, 0)

		// Set and Incr agree on the representation.
		if err := c.Set(ctx, "set-then-incr", []byte("41"), 0); err != nil {
			t.Fatal(err)
		}
		incr("set-then-incr", 1, 42)

		// Counters below zero: Redis is signed, Memcached unsigned and
		// saturates at 0, also for a missing key decremented.
		if cl.backend == Redis {
			incr("hits", -10, -2)
			incr("fresh", -4, -4)
			incr("fresh", 1, -3)
		} else {
			incr("hits", -10, 0)
			incr("hits", 2, 2)
			incr("fresh", -4, 0)
			incr("fresh", 1, 1)
		}

		// A counter created by Incr has no expiry.
		if rdb := c.Redis("hits"); rdb != nil {
			if ttl, err := rdb.PTTL(ctx, "hits").Result(); err != nil || ttl != -1 {
				t.Fatalf("PTTL of a counter created by Incr = %v, %v; want -1 (no expiry)", ttl, err)
			}
		}

		// A value that is not a number is an error, not a miss.
		if err := c.Set(ctx, "name", []byte("Ada"), 0); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Incr(ctx, "name", 1); err == nil || errors.Is(err, ErrCacheMiss) {
			t.Fatalf("Incr of a non-number = %d, %v; want a server error", v, err)
		}
		mustGet(t, c, "name", "Ada")
	})
}

func TestTouch(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()
		for _, ttl := range []time.Duration{time.Hour, 0} {
			if err := c.Touch(ctx, "missing", ttl); !errors.Is(err, ErrCacheMiss) {
				t.Fatalf("Touch(missing, %v) = %v; want ErrCacheMiss", ttl, err)
			}
		}
		if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		// Both on a key without expiry (Redis PERSIST answers 0 there, as
		// for a missing key) and on one with.
		for _, ttl := range []time.Duration{0, time.Hour, 0} {
			if err := c.Touch(ctx, "k", ttl); err != nil {
				t.Fatalf("Touch(k, %v) = %v", ttl, err)
			}
		}
		mustGet(t, c, "k", "v")
		// TestTTL checks that the new TTL is the one that counts.
	})
}

// TestTTL checks that TTLs expire keys, that 0 never does, and that Touch
// replaces a TTL. Memcached counts whole seconds on a clock that ticks once a
// second: an expiration of n seconds ends at its n-th tick, between n-1 and n
// seconds after the write. Its short TTL is therefore 2s, so that it surely
// outlives the writes and touches below.
func TestTTL(t *testing.T) {
	t.Parallel()
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		t.Parallel()
		c := cl.client(t, Options{})
		ctx := t.Context()
		var short, wait, tiny time.Duration
		switch cl.kind {
		case "miniredis": // FastForward moves its clock
			short, wait, tiny = time.Second, 2*time.Second, time.Microsecond
		case "redis-server":
			// Long enough that a loaded machine still reads every key back
			// before it expires.
			short, wait, tiny = time.Second, 2200*time.Millisecond, time.Microsecond
		case "memcached", "memcached-classic": // see above
			short, wait, tiny = 2*time.Second, 3100*time.Millisecond, time.Millisecond
		}

		set := func(key string, ttl time.Duration) {
			t.Helper()
			if err := c.Set(ctx, key, []byte(key), ttl); err != nil {
				t.Fatalf("Set(%q, ttl %v): %v", key, ttl, err)
			}
		}
		touch := func(key string, ttl time.Duration) {
			t.Helper()
			if err := c.Touch(ctx, key, ttl); err != nil {
				t.Fatalf("Touch(%q, %v): %v", key, ttl, err)
			}
		}
		set("forever", 0)
		set("short", short)
		if err := c.Add(ctx, "added", []byte("added"), short); err != nil {
			t.Fatal(err)
		}
		if err := c.SetMulti(ctx, map[string][]byte{"multi-a": nil, "multi-b": nil, "{tag}multi-c": nil}, short); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Incr(ctx, "counter", 1); err != nil {
			t.Fatal(err)
		}
		set("shortened", 0)
		touch("shortened", short)
		set("persisted", short)
		touch("persisted", 0)
		set("extended", short)
		touch("extended", time.Hour)
		// Past 30 days Memcached reads an expiration as a Unix time.
		month := 31 * 24 * time.Hour
		set("month", month)
		set("touched-month", short)
		touch("touched-month", month)
		for _, k := range []string{"forever", "short", "added", "multi-a", "multi-b", "{tag}multi-c", "shortened", "persisted", "extended", "month", "touched-month"} {
			if _, err := c.Get(ctx, k); err != nil {
				t.Fatalf("Get(%q) right after the write: %v", k, err)
			}
		}

		// A TTL under the backend's resolution expires too, rather than
		// becoming 0, "never". On Memcached it is rounded up to 1s, which
		// lasts until the server's next clock tick: read it back at once,
		// and write again in the rare case the tick came in between.
		present := false
		for range 3 {
			set("tiny", tiny)
			if _, err := c.Get(ctx, "tiny"); err == nil {
				present = true
				break
			}
		}
		if !present && cl.kind != "redis-server" { // there a 1ms TTL may well be over already
			t.Fatalf("a key with TTL %v is missing right after Set: expired at once", tiny)
		}

		cl.advance(wait)
		for _, k := range []string{"short", "added", "multi-a", "multi-b", "{tag}multi-c", "shortened", "tiny"} {
			mustMiss(t, c, k)
		}
		for _, k := range []string{"forever", "counter", "persisted", "extended", "month", "touched-month"} {
			if _, err := c.Get(ctx, k); err != nil {
				t.Errorf("Get(%q) after %v: %v; want a hit", k, wait, err)
			}
		}
	})
}

// TestLocateAndNodes checks that Locate and Nodes describe the ring of the
// configured nodes, and that hash tags keep keys together.
func TestLocateAndNodes(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		want := cl.nodes()
		for i := range want {
			want[i].Weight = 1 // the ring's default
		}
		if got := c.Nodes(); !slices.Equal(got, want) {
			t.Fatalf("Nodes() = %v; want %v", got, want)
		}
		r, err := ring.New(cl.nodes())
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1000 {
			k := fmt.Sprintf("key:%d", i)
			if got, want := c.Locate(k), r.Locate(k); got != want {
				t.Fatalf("Locate(%q) = %v; the ring says %v", k, got, want)
			}
		}

		ctx := t.Context()
		tagged := []string{"{user:42}:cart", "{user:42}:profile", "{user:42}:orders"}
		owner := c.Locate("user:42")
		for _, k := range tagged {
			if got := c.Locate(k); got != owner {
				t.Fatalf("Locate(%q) = %v; want %v, the owner of its hash tag", k, got, owner)
			}
			if err := c.Set(ctx, k, []byte(k), 0); err != nil {
				t.Fatal(err)
			}
			if h := cl.holders(t, k); !slices.Equal(h, []string{owner.Addr}) {
				t.Fatalf("%q is on %v; want only %s", k, h, owner.Addr)
			}
		}
	})
}

// TestKeysLandOnLocatedNode writes through the façade and reads every server
// directly: each key is on the node Locate names, and only there.
func TestKeysLandOnLocatedNode(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()
		perNode := map[string]int{}
		for i := range 500 {
			k := fmt.Sprintf("object:%d", i)
			if err := c.Set(ctx, k, []byte(k), 0); err != nil {
				t.Fatal(err)
			}
			want := c.Locate(k).Addr
			if h := cl.holders(t, k); !slices.Equal(h, []string{want}) {
				t.Fatalf("%q is on %v; Locate says %s", k, h, want)
			}
			perNode[want]++
		}
		if len(perNode) != len(cl.addrs) {
			t.Fatalf("keys per node %v: some of the %d nodes got none", perNode, len(cl.addrs))
		}
	})
}

// TestNodeClients checks that Redis and Memcache hand out the client of the
// node that owns the key, and nil for the other backend.
func TestNodeClients(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()
		for _, n := range c.Nodes() {
			k := keysOn(c, n.Addr, "direct:", 1)[0]
			if err := c.Set(ctx, k, []byte("via façade"), 0); err != nil {
				t.Fatal(err)
			}
			switch cl.backend {
			case Redis:
				rdb := c.Redis(k)
				if rdb == nil {
					t.Fatal("Redis() = nil")
				}
				if addr := rdb.Options().Addr; addr != n.Addr {
					t.Fatalf("Redis(%q) talks to %s; the key is on %s", k, addr, n.Addr)
				}
				if v, err := rdb.Get(ctx, k).Result(); err != nil || v != "via façade" {
					t.Fatalf("Redis(%q).Get = %q, %v", k, v, err)
				}
				// And the other way round: a command the façade does not wrap.
				if err := rdb.Append(ctx, k, "+direct").Err(); err != nil {
					t.Fatal(err)
				}
			case Memcached:
				if c.Redis(k) != nil {
					t.Fatal("Redis() on a Memcached client is not nil")
				}
				mc := gomemcacheClient(n.Addr) // gomemcache reads what the façade wrote
				it, err := mc.Get(k)
				if err != nil || string(it.Value) != "via façade" {
					t.Fatalf("Memcache(%q).Get = %v, %v", k, it, err)
				}
				if err := mc.Append(&memcache.Item{Key: k, Value: []byte("+direct")}); err != nil {
					t.Fatal(err)
				}
			}
			mustGet(t, c, k, "via façade+direct")
		}
	})
}

func TestGetMultiAcrossNodes(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()

		if hits, err := c.GetMulti(ctx, nil); err != nil || hits == nil || len(hits) != 0 {
			t.Fatalf("GetMulti(nil) = %v, %v; want an empty map", hits, err)
		}
		if err := c.SetMulti(ctx, nil, 0); err != nil {
			t.Fatalf("SetMulti(nil) = %v", err)
		}
		if err := c.DeleteMulti(ctx, nil); err != nil {
			t.Fatalf("DeleteMulti(nil) = %v", err)
		}

		items := map[string][]byte{}
		for i := range 1000 {
			items[fmt.Sprintf("item:%d", i)] = []byte(fmt.Sprintf("value %d", i))
		}
		for _, k := range []string{"{cart:7}:a", "{cart:7}:b", "{cart:7}:c"} {
			items[k] = []byte("tagged " + k)
		}
		if err := c.SetMulti(ctx, items, time.Hour); err != nil {
			t.Fatalf("SetMulti: %v", err)
		}
		perNode := map[string]int{}
		for k := range items {
			perNode[c.Locate(k).Addr]++
		}
		if len(perNode) != len(cl.addrs) {
			t.Fatalf("keys per node %v: the test must span every node", perNode)
		}
		for _, k := range []string{"item:0", "{cart:7}:b"} {
			if h := cl.holders(t, k); !slices.Equal(h, []string{c.Locate(k).Addr}) {
				t.Fatalf("SetMulti put %q on %v; Locate says %s", k, h, c.Locate(k).Addr)
			}
		}

		keys := slices.Sorted(maps.Keys(items))
		for i := range 500 {
			keys = append(keys, fmt.Sprintf("absent:%d", i))
		}
		keys = append(keys, keys[:100]...) // duplicates, present and absent
		keys = append(keys, "absent:1", "absent:1")
		hits, err := c.GetMulti(ctx, keys)
		if err != nil {
			t.Fatalf("GetMulti: %v", err)
		}
		if !maps.EqualFunc(hits, items, bytes.Equal) {
			t.Fatalf("GetMulti returned %d hits; want exactly the %d stored items", len(hits), len(items))
		}

		// DeleteMulti, with absent keys among them.
		var del []string
		for i := range 500 {
			del = append(del, fmt.Sprintf("item:%d", i), fmt.Sprintf("absent:%d", i))
		}
		if err := c.DeleteMulti(ctx, del); err != nil {
			t.Fatalf("DeleteMulti: %v", err)
		}
		for _, k := range del {
			delete(items, k)
		}
		hits, err = c.GetMulti(ctx, keys)
		if err != nil {
			t.Fatalf("GetMulti after DeleteMulti: %v", err)
		}
		if !maps.EqualFunc(hits, items, bytes.Equal) {
			t.Fatalf("GetMulti after DeleteMulti returned %d hits; want the %d items left", len(hits), len(items))
		}
	})
}

// TestMalformedKeys checks that bad keys and TTLs are rejected before any
// I/O: the last part runs with every server stopped, where anything that
// reached the network would fail with a network error instead.
func TestMalformedKeys(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()

		bad := []string{""}
		var good []string // at the limits, and accepted
		if cl.backend == Memcached {
			bad = append(bad, strings.Repeat("k", 251), "a b", "a\nb", "a\r\nb", "a\tb", "a\x00b", "a\x7fb")
			good = append(good, strings.Repeat("k", 250), "ключ", "a{b}c:d")
		} else {
			bad = append(bad, strings.Repeat("k", 64<<10+1))
			good = append(good, strings.Repeat("k", 64<<10), "a b", "a\r\nb\x00\x7f", "ключ")
		}
		for _, k := range good {
			if err := c.Set(ctx, k, []byte("v"), 0); err != nil {
				t.Fatalf("Set of the valid key %.20q...: %v", k, err)
			}
			mustGet(t, c, k, "v")
		}

		// A multi-key write with one bad key writes nothing.
		if err := c.SetMulti(ctx, map[string][]byte{"good": nil, bad[len(bad)-1]: nil}, 0); !errors.Is(err, ErrMalformedKey) {
			t.Fatalf("SetMulti with a bad key = %v; want ErrMalformedKey", err)
		}
		mustMiss(t, c, "good")

		// MaxKeyLength lowers the limit.
		short := cl.client(t, Options{MaxKeyLength: 8})
		if err := short.Set(ctx, "123456789", nil, 0); !errors.Is(err, ErrMalformedKey) {
			t.Fatalf("Set of a 9-byte key with MaxKeyLength 8 = %v; want ErrMalformedKey", err)
		}

		for i := range cl.addrs {
			cl.stop(i)
		}
		if _, err := c.Get(ctx, "valid"); err == nil || errors.Is(err, ErrMalformedKey) || errors.Is(err, ErrCacheMiss) {
			t.Fatalf("Get with every server stopped = %v; want a network error", err)
		}
		ops := map[string]func(key string) error{
			"Get":    func(k string) error { _, err := c.Get(ctx, k); return err },
			"Set":    func(k string) error { return c.Set(ctx, k, []byte("v"), 0) },
			"Add":    func(k string) error { return c.Add(ctx, k, []byte("v"), 0) },
			"Delete": func(k string) error { return c.Delete(ctx, k) },
			"Incr":   func(k string) error { _, err := c.Incr(ctx, k, 1); return err },
			"Touch":  func(k string) error { return c.Touch(ctx, k, time.Minute) },
			"GetMulti": func(k string) error {
				hits, err := c.GetMulti(ctx, []string{"valid:1", k, "valid:2"})
				if hits != nil {
					t.Errorf("GetMulti with a bad key returned hits %v", hits)
				}
				return err
			},
			"SetMulti": func(k string) error {
				return c.SetMulti(ctx, map[string][]byte{"valid:1": nil, k: nil, "valid:2": nil}, 0)
			},
			"DeleteMulti": func(k string) error { return c.DeleteMulti(ctx, []string{"valid:1", k, "valid:2"}) },
		}
		for name, op := range ops {
			for _, k := range bad {
				if err := op(k); !errors.Is(err, ErrMalformedKey) {
					t.Errorf("%s(%.20q) = %v; want ErrMalformedKey", name, k, err)
				}
			}
		}

		ttlOps := map[string]func() error{
			"Set":      func() error { return c.Set(ctx, "valid", nil, -time.Second) },
			"Add":      func() error { return c.Add(ctx, "valid", nil, -time.Second) },
			"Touch":    func() error { return c.Touch(ctx, "valid", -time.Nanosecond) },
			"SetMulti": func() error { return c.SetMulti(ctx, map[string][]byte{"valid": nil}, -time.Hour) },
		}
		for name, op := range ttlOps {
			if err := op(); !errors.Is(err, ErrBadTTL) {
				t.Errorf("%s with a negative TTL = %v; want ErrBadTTL", name, err)
			}
		}
	})
}

func TestNewBadOptions(t *testing.T) {
	a := ring.Node{Name: "a", Addr: "127.0.0.1:1"}
	b := ring.Node{Name: "b", Addr: "127.0.0.1:2"}
	r, err := ring.New([]ring.Node{a})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts Options
		want error
	}{
		{"unknown backend", Options{Backend: Backend(7), Nodes: []ring.Node{a}}, ErrBadOptions},
		{"Nodes and Placement", Options{Nodes: []ring.Node{a}, Placement: r}, ErrBadOptions},
		{"negative Vnodes", Options{Nodes: []ring.Node{a}, Vnodes: -1}, ErrBadOptions},
		{"no nodes", Options{}, ring.ErrNoNodes},
		{"no nodes, Memcached", Options{Backend: Memcached, Nodes: []ring.Node{}}, ring.ErrNoNodes},
		{"duplicate name", Options{Nodes: []ring.Node{a, {Name: "a", Addr: b.Addr}}}, ring.ErrDuplicateName},
		{"duplicate address", Options{Nodes: []ring.Node{a, {Name: "b", Addr: a.Addr}}}, ring.ErrDuplicateAddr},
		{"empty address", Options{Nodes: []ring.Node{a, {Name: "b"}}}, ring.ErrEmptyAddr},
		{"negative weight", Options{Nodes: []ring.Node{a, {Name: "b", Addr: b.Addr, Weight: -1}}}, ring.ErrBadWeight},
		{"too many vnodes", Options{Nodes: []ring.Node{a}, Vnodes: ring.MaxVnodes + 1}, ring.ErrBadVnodes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.opts)
			if !errors.Is(err, tc.want) || c != nil {
				t.Fatalf("New = %v, %v; want nil, %v", c, err, tc.want)
			}
		})
	}

	c, err := New(Options{Nodes: []ring.Node{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Reshard(nil, 0); !errors.Is(err, ring.ErrNoNodes) {
		t.Fatalf("Reshard(nil) = %v; want ring.ErrNoNodes", err)
	}
	if err := c.Reshard([]ring.Node{a, {Name: "a", Addr: b.Addr}}, 0); !errors.Is(err, ring.ErrDuplicateName) {
		t.Fatalf("Reshard with a duplicate name = %v; want ring.ErrDuplicateName", err)
	}
	if got := c.Nodes(); len(got) != 2 {
		t.Fatalf("a failed Reshard changed the nodes to %v", got)
	}
}

// callStats returns the counts of the calls c made to the node at addr,
// by kind of call, the health probes' ("ping", which run on their own)
// left out.
func callStats(c *Client, addr string) []OpStats {
	var out []OpStats
	for _, ns := range c.Stats().Nodes {
		if ns.Node.Addr == addr {
			out = append(out, slices.DeleteFunc(ns.Ops, func(op OpStats) bool { return op.Op == "ping" })...)
		}
	}
	return out
}

// failures returns the failed calls c made to the node at addr, by kind
// of error (callStats' Errors added up).
func failures(c *Client, addr string) Errors {
	var e Errors
	for _, op := range callStats(c, addr) {
		e.Timeout += op.Errors.Timeout
		e.Refused += op.Errors.Refused
		e.Down += op.Errors.Down
		e.Other += op.Errors.Other
	}
	return e
}

// failedOnce checks that a call to a stopped node failed once (a refused
// connection, or the end of one the server closed), not retried, and
// waited out no timeout: "promptly", counted rather than timed.
func failedOnce(t *testing.T, what string, before, after Errors) {
	t.Helper()
	if n := after.Total() - before.Total(); n != 1 || after.Timeout != before.Timeout {
		t.Errorf("%s on a stopped node counted %d failed calls (%d timeouts); want 1 and none", what, n, after.Timeout-before.Timeout)
	}
}

// TestStoppedNode checks that a node down fails its own keys, promptly (one
// failed call, no retry, no timeout) and with an error that names it, and
// no others.
func TestStoppedNode(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()
		down := cl.nodes(1)[0]
		keys := map[string][]string{} // by address
		items := map[string][]byte{}
		for _, n := range c.Nodes() {
			keys[n.Addr] = keysOn(c, n.Addr, "k:", 20)
			for _, k := range keys[n.Addr] {
				items[k] = []byte("old " + k)
			}
		}
		if err := c.SetMulti(ctx, items, 0); err != nil {
			t.Fatal(err)
		}
		cl.stop(1)

		checkNodeErr := func(op string, err error, wantKeys []string) {
			t.Helper()
			nes := nodeErrors(err)
			if len(nes) != 1 {
				t.Fatalf("%s: error %v holds %d *NodeError; want 1", op, err, len(nes))
			}
			ne := nes[0]
			if ne.Node.Name != down.Name || ne.Node.Addr != down.Addr || ne.Op != op {
				t.Fatalf("%s: %v names op %q, node %v; want %q, %v", op, err, ne.Op, ne.Node, op, down)
			}
			if got, want := slices.Sorted(slices.Values(ne.Keys)), slices.Sorted(slices.Values(wantKeys)); !slices.Equal(got, want) {
				t.Fatalf("%s: NodeError.Keys = %v; want %v", op, got, want)
			}
			if errors.Is(err, ErrCacheMiss) {
				t.Fatalf("%s: a node down reads as a miss: %v", op, err)
			}
		}

		for addr, ks := range keys {
			k := ks[0]
			before := failures(c, down.Addr)
			v, err := c.Get(ctx, k)
			if addr != down.Addr {
				if err != nil || string(v) != "old "+k {
					t.Fatalf("Get(%q) on a live node = %q, %v", k, v, err)
				}
				if err := c.Set(ctx, k, []byte("new "+k), 0); err != nil {
					t.Fatalf("Set(%q) on a live node: %v", k, err)
				}
				continue
			}
			var ne *NodeError
			if !errors.As(err, &ne) || ne.Node.Addr != down.Addr {
				t.Fatalf("Get(%q) on the stopped node = %q, %v; want a *NodeError for %s", k, v, err, down.Addr)
			}
			failedOnce(t, "Get("+k+")", before, failures(c, down.Addr))
			checkNodeErr("get", err, []string{k})
			checkNodeErr("set", c.Set(ctx, k, nil, 0), []string{k})
		}

		all := slices.Sorted(maps.Keys(items))
		before := failures(c, down.Addr)
		hits, err := c.GetMulti(ctx, all)
		failedOnce(t, "GetMulti", before, failures(c, down.Addr))
		checkNodeErr("get_multi", err, keys[down.Addr])
		want := map[string][]byte{}
		for addr, ks := range keys {
			if addr != down.Addr {
				for _, k := range ks {
					want[k] = items[k]
					if k == ks[0] {
						want[k] = []byte("new " + k)
					}
				}
			}
		}
		if !maps.EqualFunc(hits, want, bytes.Equal) {
			t.Fatalf("GetMulti with a node down returned %d hits; want the %d of the live nodes", len(hits), len(want))
		}

		newer := map[string][]byte{}
		for k := range items {
			newer[k] = []byte("newer")
		}
		checkNodeErr("set_multi", c.SetMulti(ctx, newer, 0), keys[down.Addr])
		hits, _ = c.GetMulti(ctx, all)
		if len(hits) != len(want) {
			t.Fatalf("after SetMulti with a node down, %d hits; want %d", len(hits), len(want))
		}
		for k, v := range hits {
			if string(v) != "newer" {
				t.Fatalf("SetMulti with a node down did not store %q on its live node: %q", k, v)
			}
		}
		checkNodeErr("delete_multi", c.DeleteMulti(ctx, all), keys[down.Addr])
		if hits, _ := c.GetMulti(ctx, all); len(hits) != 0 {
			t.Fatalf("DeleteMulti with a node down left %d keys on the live nodes", len(hits))
		}
	})
}

func TestClose(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()
		if err := c.Set(ctx, "k", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		rdb := c.Redis("k")
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		ops := map[string]func() error{
			"Get":         func() error { _, err := c.Get(ctx, "k"); return err },
			"Set":         func() error { return c.Set(ctx, "k", nil, 0) },
			"Add":         func() error { return c.Add(ctx, "k2", nil, 0) },
			"Delete":      func() error { return c.Delete(ctx, "k") },
			"Incr":        func() error { _, err := c.Incr(ctx, "n", 1); return err },
			"Touch":       func() error { return c.Touch(ctx, "k", 0) },
			"GetMulti":    func() error { _, err := c.GetMulti(ctx, []string{"k"}); return err },
			"GetMulti()":  func() error { _, err := c.GetMulti(ctx, nil); return err },
			"SetMulti":    func() error { return c.SetMulti(ctx, map[string][]byte{"k": nil}, 0) },
			"DeleteMulti": func() error { return c.DeleteMulti(ctx, []string{"k"}) },
			"Reshard":     func() error { return c.Reshard(cl.nodes(), 0) },
		}
		for name, op := range ops {
			if err := op(); !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close = %v; want ErrClosed", name, err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		if n := c.Locate("k"); n != (ring.Node{}) {
			t.Errorf("Locate after Close = %v", n)
		}
		if ns := c.Nodes(); ns != nil {
			t.Errorf("Nodes after Close = %v", ns)
		}
		if c.Redis("k") != nil {
			t.Error("Redis after Close is not nil")
		}
		// The node clients handed out before are closed with the façade.
		if rdb != nil {
			if err := rdb.Ping(ctx).Err(); !errors.Is(err, redis.ErrClosed) {
				t.Errorf("a node's go-redis client after Close: Ping = %v; want redis.ErrClosed", err)
			}
		}
		// The data stays on the servers.
		if h := cl.holders(t, "k"); len(h) != 1 {
			t.Errorf("after Close, k is on %v", h)
		}
	})
}

// TestClientHooks checks that NewRedisClient makes the go-redis client of
// every node, including nodes a Reshard adds, that it receives the options
// the client would use (its timeouts, one dial attempt, no command
// retries, pipelines on the main pool), and that the façade uses what it
// returns.
func TestClientHooks(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		if cl.backend != Redis {
			t.Skip("NewRedisClient is Redis's")
		}
		var mu sync.Mutex
		var dialed []string
		made := map[string]any{} // by address
		record := func(n ring.Node, c any) {
			mu.Lock()
			defer mu.Unlock()
			dialed = append(dialed, n.Name)
			made[n.Addr] = c
		}
		opts := Options{Nodes: cl.nodes(0, 1), DialTimeout: 700 * time.Millisecond, ReadTimeout: 800 * time.Millisecond,
			WriteTimeout: 900 * time.Millisecond, PoolSize: 7}
		opts.NewRedisClient = func(n ring.Node, opt *redis.Options) *redis.Client {
			if opt.Addr != n.Addr || opt.DialTimeout != opts.DialTimeout || opt.ReadTimeout != opts.ReadTimeout ||
				opt.WriteTimeout != opts.WriteTimeout || opt.PoolSize != 7 || opt.MaxRetries != -1 || opt.DialerRetries != 1 ||
				!opt.ContextTimeoutEnabled || opt.PipelinePoolSize >= 0 {
				t.Errorf("NewRedisClient(%s) got options %+v; want the client's", n.Name, opt)
			}
			rdb := redis.NewClient(opt)
			record(n, rdb)
			return rdb
		}
		c := cl.client(t, opts)
		calls := func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Sorted(slices.Values(dialed))
		}
		if got := calls(); !slices.Equal(got, []string{"n0", "n1"}) {
			t.Fatalf("hook called for %v; want n0 and n1", got)
		}
		if err := c.Reshard(cl.nodes(), 0); err != nil {
			t.Fatal(err)
		}
		if got := calls(); !slices.Equal(got, []string{"n0", "n1", "n2"}) {
			t.Fatalf("after adding n2, hook called for %v; want n0, n1, n2 once each", got)
		}

		ctx := t.Context()
		for _, n := range c.Nodes() {
			k := keysOn(c, n.Addr, "hooked:", 1)[0]
			var got any = c.Redis(k)
			mu.Lock()
			want := made[n.Addr]
			mu.Unlock()
			if got != want {
				t.Fatalf("the client of %s is not the one the hook made", n.Name)
			}
			if err := c.Set(ctx, k, []byte("v"), 0); err != nil {
				t.Fatal(err)
			}
			mustGet(t, c, k, "v")
		}
	})
}

// liar lists one node but locates every key on another.
type liar struct{ listed, located ring.Node }

func (l liar) Locate(string) ring.Node { return l.located }
func (l liar) Nodes() []ring.Node      { return []ring.Node{l.listed} }

// TestPlacementLocatesUnlistedNode checks that a placement that locates a key
// on a node it does not list gets a typed error, not a panic.
func TestPlacementLocatesUnlistedNode(t *testing.T) {
	cl := newCluster(t, "miniredis", 1)
	ghost := ring.Node{Name: "ghost", Addr: "127.0.0.1:1"}
	c := cl.client(t, Options{Placement: liar{listed: cl.nodes(0)[0], located: ghost}})
	ctx := t.Context()
	for name, err := range map[string]error{
		"Get":      func() error { _, err := c.Get(ctx, "k"); return err }(),
		"Set":      c.Set(ctx, "k", nil, 0),
		"Delete":   c.Delete(ctx, "k"),
		"GetMulti": func() error { _, err := c.GetMulti(ctx, []string{"a", "b"}); return err }(),
		"SetMulti": c.SetMulti(ctx, map[string][]byte{"a": nil}, 0),
	} {
		var ne *NodeError
		if !errors.Is(err, ErrUnknownNode) || !errors.As(err, &ne) || ne.Node != ghost {
			t.Errorf("%s via a placement that locates an unlisted node: %v; want ErrUnknownNode naming it", name, err)
		}
	}
}

// TestReleaseRedisClient: a go-redis client NewRedisClient made is handed
// to ReleaseRedisClient, open, once the client is done with it, rather than
// closed; without ReleaseRedisClient Close closes it.
func TestReleaseRedisClient(t *testing.T) {
	servers := testserver.Redis(t, 1)
	for _, shared := range []bool{true, false} {
		var made, released *redis.Client
		opts := Options{Nodes: []ring.Node{{Addr: servers[0].Addr}},
			NewRedisClient: func(_ ring.Node, opt *redis.Options) *redis.Client {
				made = redis.NewClient(opt)
				return made
			}}
		if shared {
			opts.ReleaseRedisClient = func(_ ring.Node, c *redis.Client) { released = c }
		}
		c, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Set(t.Context(), "k", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		c.Close()
		err = made.Ping(t.Context()).Err()
		if shared && (released != made || err != nil) {
			t.Errorf("ReleaseRedisClient: released %p of %p, the client after Close: %v; want it released open", released, made, err)
		}
		if !shared && !errors.Is(err, redis.ErrClosed) {
			t.Errorf("without ReleaseRedisClient: the client after Close: %v; want redis.ErrClosed", err)
		}
		made.Close()
	}
}
