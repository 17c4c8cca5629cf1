package client

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// The interop tests write keys with a foreign system (twemproxy, gomemcache's
// ServerList, go-redis's Ring) on real servers, check that the matching
// placement of package ring names the server that holds every key, then move
// the keys to our ring with a dual-ring migration and check that none is
// lost.

// interopKeys is how many keys each foreign system writes.
const interopKeys = 5000

// foreignKeys returns the keys a foreign system writes: plain ones and,
// when tags is set, some with hash tags, several keys to a tag.
func foreignKeys(prefix string, tags bool) []string {
	keys := make([]string, interopKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", prefix, i)
		if tags && i%5 == 0 {
			keys[i] = fmt.Sprintf("%s:{user%d}:%d", prefix, i/50, i)
		}
	}
	return keys
}

func foreignValue(key string) string { return "foreign:" + key }

// holdersOf reads every server directly and returns, for each key, the
// servers that hold it with the value the foreign system wrote.
func holdersOf(t *testing.T, backend Backend, addrs, keys []string) map[string][]string {
	t.Helper()
	ctx := context.Background()
	held := map[string][]string{}
	for _, addr := range addrs {
		for chunk := range slices.Chunk(keys, 500) {
			var found map[string]string
			if backend == Memcached {
				mc := gomemcacheClient(addr)
				items, err := mc.GetMulti(chunk)
				mc.Close()
				if err != nil {
					t.Fatalf("memcached %s: %v", addr, err)
				}
				found = map[string]string{}
				for k, it := range items {
					found[k] = string(it.Value)
				}
			} else {
				rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 5 * time.Second})
				vals, err := rdb.MGet(ctx, chunk...).Result()
				rdb.Close()
				if err != nil {
					t.Fatalf("redis %s: %v", addr, err)
				}
				found = map[string]string{}
				for i, v := range vals {
					if s, ok := v.(string); ok {
						found[chunk[i]] = s
					}
				}
			}
			for k, v := range found {
				if v != foreignValue(k) && v != "" {
					t.Fatalf("%s holds %q = %q, not what was written", addr, k, v)
				}
				held[k] = append(held[k], addr)
			}
		}
	}
	return held
}

// checkPlacement checks that p names, for every key, the one server that
// holds it.
func checkPlacement(t *testing.T, p ring.Locator, backend Backend, addrs, keys []string) {
	t.Helper()
	held := holdersOf(t, backend, addrs, keys)
	wrong, on := 0, map[string]int{}
	for _, k := range keys {
		h := held[k]
		if len(h) != 1 {
			t.Fatalf("%q is held by %v, want exactly one server", k, h)
		}
		on[h[0]]++
		if got := p.Locate(k).Addr; got != h[0] {
			if wrong++; wrong <= 5 {
				t.Errorf("%q: placement names %s, the foreign system wrote it to %s", k, got, h[0])
			}
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of %d keys are not where the placement says", wrong, len(keys))
	}
	if len(on) != len(addrs) {
		t.Fatalf("keys landed on %d of %d servers: %v", len(on), len(addrs), on)
	}
}

// migration says how a test moves from the foreign placement to our ring.
type migrationKind int

const (
	viaMigrateFrom migrationKind = iota // a new client resumes a migration from it
	viaReshardTo                        // a client built on it reshards to the ring
)

// moveToRing runs a dual-ring migration from the foreign placement to our
// default ring over the same servers and checks that every key the foreign
// system wrote is read right after switching, is backfilled onto its new
// owner, and is served by the new owner after the window.
func moveToRing(t *testing.T, backend Backend, foreign ring.Locator, addrs, keys []string, how migrationKind) {
	t.Helper()
	ctx := context.Background()
	clock := newFakeClock()
	nodes := make([]ring.Node, len(addrs))
	for i, a := range addrs {
		nodes[i] = ring.Node{Name: fmt.Sprintf("n%d", i), Addr: a}
	}
	next := mustRing(t, nodes)
	opts := Options{Backend: backend, Now: clock.Now, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	const window = time.Hour
	if how == viaMigrateFrom {
		opts.Nodes = nodes
		opts.MigrateFrom = &MigrateFrom{Placement: foreign, Start: clock.Now(), Window: window}
	} else {
		opts.Placement = foreign
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if how == viaReshardTo {
		if err := c.ReshardTo(next, window); err != nil {
			t.Fatal(err)
		}
	}

	moved := 0
	for _, k := range keys {
		if foreign.Locate(k).Addr != next.Locate(k).Addr {
			moved++
		}
	}
	if moved == 0 || moved == len(keys) {
		t.Fatalf("%d of %d keys change server: the test shows nothing", moved, len(keys))
	}
	// Right after the switch: every key is read, the moved ones from their
	// old owner, and copied to the new one.
	for chunk := range slices.Chunk(keys, 1000) {
		hits, err := c.GetMulti(ctx, chunk)
		if err != nil {
			t.Fatalf("GetMulti right after the switch: %v", err)
		}
		for _, k := range chunk {
			if string(hits[k]) != foreignValue(k) {
				t.Fatalf("right after the switch %q reads %q, want the foreign system's value (%d of %d hits)", k, hits[k], len(hits), len(chunk))
			}
		}
	}
	st := c.Migration()
	if !st.Active || st.FallbackHits != int64(moved) || st.Backfills != int64(moved) || st.FallbackMisses != 0 {
		t.Fatalf("after reading every key once: %d fallback hits, %d backfills, %d misses on both; want %d, %d, 0",
			st.FallbackHits, st.Backfills, st.FallbackMisses, moved, moved)
	}
	// The status knows the share that moves, except from a Rendezvous,
	// which only a sample could tell. The keys are a sample: within 4
	// standard deviations of it, keys that share a hash tag moving
	// together (the nodes' names, from their ports, vary between runs).
	if _, sampled := foreign.(*ring.Rendezvous); !sampled {
		groups := map[string]int{}
		for _, k := range keys {
			if open := strings.IndexByte(k, '{'); open >= 0 {
				if end := strings.IndexByte(k[open:], '}'); end > 1 {
					k = k[open+1 : open+end]
				}
			}
			groups[k]++
		}
		var squares float64
		for _, n := range groups {
			squares += float64(n * n)
		}
		tol := 4 * math.Sqrt(st.Moved*(1-st.Moved)*squares) / float64(len(keys))
		if frac := float64(moved) / float64(len(keys)); math.IsNaN(st.Moved) || math.Abs(st.Moved-frac) > tol {
			t.Errorf("Migration().Moved = %v; %.3f of the keys moved (±%.3f)", st.Moved, frac, tol)
		}
	} else if !math.IsNaN(st.Moved) {
		t.Errorf("Migration().Moved = %v from a Rendezvous, want NaN (unknown)", st.Moved)
	}
	held := holdersOf(t, backend, addrs, keys)
	for _, k := range keys {
		if !slices.Contains(held[k], next.Locate(k).Addr) {
			t.Fatalf("%q was not backfilled onto its new owner %s (held by %v)", k, next.Locate(k).Addr, held[k])
		}
	}

	// After the window the old placement is gone: with the old owners'
	// copies of the moved keys deleted, every key still reads, from its new
	// owner, and nothing asks an old owner.
	clock.Advance(window + time.Second)
	oldCopies := map[string][]string{}
	for _, k := range keys {
		if old := foreign.Locate(k).Addr; old != next.Locate(k).Addr {
			oldCopies[old] = append(oldCopies[old], k)
		}
	}
	deleteDirect(t, backend, oldCopies)
	for chunk := range slices.Chunk(keys, 1000) {
		hits, err := c.GetMulti(ctx, chunk)
		if err != nil || len(hits) != len(chunk) {
			t.Fatalf("after the window: %d of %d hits, %v", len(hits), len(chunk), err)
		}
	}
	for _, k := range keys[:100] {
		if v, err := c.Get(ctx, k); err != nil || string(v) != foreignValue(k) {
			t.Fatalf("Get(%q) after the window: %q, %v", k, v, err)
		}
	}
	if after := c.Migration(); after.Active || after.FallbackHits != st.FallbackHits {
		t.Fatalf("after the window: active %v, fallback hits %d (were %d)", after.Active, after.FallbackHits, st.FallbackHits)
	}
	if got := slices.Sorted(maps.Keys(ownersOf(next, keys))); !slices.Equal(got, slices.Sorted(slices.Values(addrs))) {
		t.Fatalf("new owners %v, want every server", got)
	}
}

func ownersOf(p ring.Locator, keys []string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[p.Locate(k).Addr] = true
	}
	return m
}

// deleteDirect deletes keys from servers directly: keys[addr] from addr.
func deleteDirect(t *testing.T, backend Backend, keys map[string][]string) {
	t.Helper()
	for addr, ks := range keys {
		if backend == Memcached {
			mc := gomemcacheClient(addr)
			for _, k := range ks {
				if err := mc.Delete(k); err != nil {
					t.Fatalf("delete %q on %s: %v", k, addr, err)
				}
			}
			mc.Close()
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 5 * time.Second})
		n, err := rdb.Del(context.Background(), ks...).Result()
		rdb.Close()
		if err != nil || n != int64(len(ks)) {
			t.Fatalf("delete %d keys on %s: %d deleted, %v", len(ks), addr, n, err)
		}
	}
}

// setParallel runs set on every key from a few goroutines, as one client
// shared by an application's handlers would, and fails on the first error.
func setParallel(t *testing.T, keys []string, set func(key string) error) {
	t.Helper()
	const workers = 8
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := w; i < len(keys); i += workers {
				if err := set(keys[i]); err != nil {
					errs <- fmt.Errorf("set %q: %w", keys[i], err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestTwemproxyKetamaMemcached: nutcracker with ketama and md5 in front of 4
// memcached of mixed weights, one of them named.
func TestTwemproxyKetamaMemcached(t *testing.T) {
	ss := testserver.Memcached(t, 4)
	addrs := testserver.Addrs(ss)
	backends := []testserver.Backend{
		{Addr: addrs[0], Weight: 1},
		{Addr: addrs[1], Weight: 3},
		{Addr: addrs[2], Weight: 2, Name: "gamma"},
		{Addr: addrs[3], Weight: 1},
	}
	proxy := testserver.NutcrackerPool(t, testserver.Pool{Backends: backends, Hash: "md5", Distribution: "ketama"})
	keys := foreignKeys("twem-mc", false)
	mc := gomemcacheClient(proxy.Addr)
	defer mc.Close()
	setParallel(t, keys, func(k string) error {
		return mc.Set(&memcache.Item{Key: k, Value: []byte(foreignValue(k))})
	})
	nodes := make([]ring.Node, len(backends))
	for i, b := range backends {
		nodes[i] = ring.Node{Name: b.Name, Addr: b.Addr, Weight: float64(b.Weight)}
	}
	k, err := ring.NewKetama(nodes)
	if err != nil {
		t.Fatal(err)
	}
	checkPlacement(t, k, Memcached, addrs, keys)
	moveToRing(t, Memcached, k, addrs, keys, viaMigrateFrom)
}

// TestTwemproxyKetamaRedis: nutcracker speaking Redis, ketama and md5 with
// hash_tag "{}", in front of 3 redis-servers.
func TestTwemproxyKetamaRedis(t *testing.T) {
	ss := testserver.Redis(t, 3)
	addrs := testserver.Addrs(ss)
	backends := []testserver.Backend{{Addr: addrs[0], Weight: 2, Name: "alpha"}, {Addr: addrs[1]}, {Addr: addrs[2], Weight: 3}}
	proxy := testserver.NutcrackerPool(t, testserver.Pool{Backends: backends, Hash: "md5", Distribution: "ketama", Redis: true, HashTag: "{}"})
	keys := foreignKeys("twem-redis", true)
	// go-redis opens every connection with HELLO, which twemproxy answers by
	// closing it: write RESP by hand, pipelined.
	conn, err := net.DialTimeout("tcp", proxy.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
	for chunk := range slices.Chunk(keys, 250) {
		for _, k := range chunk {
			v := foreignValue(k)
			fmt.Fprintf(w, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(k), k, len(v), v)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, k := range chunk {
			if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
				t.Fatalf("SET %q through nutcracker: %q, %v", k, line, err)
			}
		}
	}
	nodes := make([]ring.Node, len(backends))
	for i, b := range backends {
		nodes[i] = ring.Node{Name: b.Name, Addr: b.Addr, Weight: float64(b.Weight)}
	}
	k, err := ring.NewKetama(nodes, ring.WithKetamaHashTag("{}"))
	if err != nil {
		t.Fatal(err)
	}
	checkPlacement(t, k, Redis, addrs, keys)
	moveToRing(t, Redis, k, addrs, keys, viaReshardTo)
}

// TestGomemcacheServerList: gomemcache's own client over 3 memcached, one
// listed twice (two slots), writes the keys; Modulo places them.
func TestGomemcacheServerList(t *testing.T) {
	ss := testserver.Memcached(t, 3)
	addrs := testserver.Addrs(ss)
	list := []string{addrs[0], addrs[1], addrs[2], addrs[1]}
	mc := gomemcacheClient(list...)
	defer mc.Close()
	keys := foreignKeys("gomemcache", false)
	setParallel(t, keys, func(k string) error {
		return mc.Set(&memcache.Item{Key: k, Value: []byte(foreignValue(k))})
	})
	m, err := ring.NewModulo(list)
	if err != nil {
		t.Fatal(err)
	}
	checkPlacement(t, m, Memcached, addrs, keys)
	// PickServer, the selector itself, agrees too.
	var sl memcache.ServerList
	if err := sl.SetServers(list...); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		a, err := sl.PickServer(k)
		if err != nil || a.String() != m.Locate(k).Addr {
			t.Fatalf("PickServer(%q) = %v, %v; Modulo says %s", k, a, err, m.Locate(k).Addr)
		}
	}
	moveToRing(t, Memcached, m, addrs, keys, viaReshardTo)
}

// TestGoRedisRing: go-redis's own Ring over 3 redis-servers, with its
// default consistent hash, writes the keys (hash tags included);
// Rendezvous places them.
func TestGoRedisRing(t *testing.T) {
	ss := testserver.Redis(t, 3)
	addrs := testserver.Addrs(ss)
	shards := map[string]string{"shard1": addrs[0], "shard2": addrs[1], "shard3": addrs[2]}
	rr := redis.NewRing(&redis.RingOptions{Addrs: shards, ReadTimeout: 5 * time.Second})
	defer rr.Close()
	ctx := context.Background()
	keys := foreignKeys("goredis-ring", true)
	for chunk := range slices.Chunk(keys, 500) {
		_, err := rr.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, k := range chunk {
				pipe.Set(ctx, k, foreignValue(k), 0)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("go-redis Ring pipeline of sets: %v", err)
		}
	}
	var nodes []ring.Node
	for name, addr := range shards {
		nodes = append(nodes, ring.Node{Name: name, Addr: addr})
	}
	r, err := ring.NewRendezvous(nodes)
	if err != nil {
		t.Fatal(err)
	}
	checkPlacement(t, r, Redis, addrs, keys)
	moveToRing(t, Redis, r, addrs, keys, viaMigrateFrom)
}

// TestTwemproxyKetamaRounding: with 25 servers of equal weight, twemproxy's
// float arithmetic gives each 156 points, not 160 (1/25 × 40 × 25 rounds
// below 40 in float32); Ketama must round alike to find every key.
func TestTwemproxyKetamaRounding(t *testing.T) {
	ss := testserver.Memcached(t, 25)
	addrs := testserver.Addrs(ss)
	var backends []testserver.Backend
	var nodes []ring.Node
	for i, a := range addrs {
		name := fmt.Sprintf("mc%02d", i)
		backends = append(backends, testserver.Backend{Addr: a, Name: name})
		nodes = append(nodes, ring.Node{Name: name, Addr: a})
	}
	proxy := testserver.NutcrackerPool(t, testserver.Pool{Backends: backends, Hash: "md5", Distribution: "ketama"})
	k, err := ring.NewKetama(nodes)
	if err != nil {
		t.Fatal(err)
	}
	if p := k.Points(); p[0] != 156 {
		t.Fatalf("%d points a server, want 156: the test no longer exercises the rounding", p[0])
	}
	mc := gomemcacheClient(proxy.Addr)
	defer mc.Close()
	keys := foreignKeys("twem-round", false)
	setParallel(t, keys, func(k string) error {
		return mc.Set(&memcache.Item{Key: k, Value: []byte(foreignValue(k))})
	})
	checkPlacement(t, k, Memcached, addrs, keys)
}

// TestTwemproxyKetamaFNV1a64: twemproxy's default key hash, fnv1a_64 with
// ketama, over 3 memcached; a fifth of the keys hold bytes of 0x80 and
// more, which twemproxy reads as signed chars.
func TestTwemproxyKetamaFNV1a64(t *testing.T) {
	ss := testserver.Memcached(t, 3)
	addrs := testserver.Addrs(ss)
	backends := []testserver.Backend{{Addr: addrs[0], Weight: 2}, {Addr: addrs[1], Name: "beta"}, {Addr: addrs[2]}}
	proxy := testserver.NutcrackerPool(t, testserver.Pool{Backends: backends, Hash: "fnv1a_64", Distribution: "ketama"})
	keys := foreignKeys("twem-fnv", false)
	for i := range keys {
		if i%5 == 0 {
			keys[i] += ":é\xff\x80"
		}
	}
	mc := gomemcacheClient(proxy.Addr)
	defer mc.Close()
	setParallel(t, keys, func(k string) error {
		return mc.Set(&memcache.Item{Key: k, Value: []byte(foreignValue(k))})
	})
	nodes := make([]ring.Node, len(backends))
	for i, b := range backends {
		nodes[i] = ring.Node{Name: b.Name, Addr: b.Addr, Weight: float64(b.Weight)}
	}
	k, err := ring.NewKetama(nodes, ring.WithKetamaKeyHash(ring.KetamaFNV1a64))
	if err != nil {
		t.Fatal(err)
	}
	checkPlacement(t, k, Memcached, addrs, keys)
}
