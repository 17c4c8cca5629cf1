package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// memcachedGets returns how many keys the memcached server at addr was asked
// for (STAT cmd_get).
func memcachedGets(t *testing.T, addr string) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("stats\r\n")); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(conn)
	n := -1
	for sc.Scan() && sc.Text() != "END" {
		if v, ok := strings.CutPrefix(sc.Text(), "STAT cmd_get "); ok {
			if n, err = strconv.Atoi(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n < 0 {
		t.Fatalf("no cmd_get in the stats of %s (%v)", addr, sc.Err())
	}
	return n
}

// TestNearCacheMemcached: on Memcached a key read twice is answered from
// process memory the second time, and stays so whatever another process
// writes, within MaxAge (Memcached invalidates nothing); a miss is not kept.
func TestNearCacheMemcached(t *testing.T) {
	for _, ap := range []bool{false, true} {
		t.Run(fmt.Sprintf("AutoPipeline=%v", ap), func(t *testing.T) {
			cl := newCluster(t, "memcached", 1)
			addr := cl.addrs[0]
			c := cl.client(t, Options{NearCache: &NearCache{MaxAge: time.Hour}, AutoPipeline: ap})
			other := gomemcacheClient(addr)
			t.Cleanup(func() { other.Close() })
			ctx := context.Background()
			if err := c.Set(ctx, "k", []byte("v1"), 0); err != nil {
				t.Fatal(err)
			}
			if err := expect(ctx, c, "k", []byte("v1")); err != nil {
				t.Fatal(err)
			}
			gets, calls, near := memcachedGets(t, addr), getStats(c, addr).Calls(), nearOf(t, c, addr)
			const reads = 100
			for range reads {
				if err := expect(ctx, c, "k", []byte("v1")); err != nil {
					t.Fatal(err)
				}
			}
			if d := memcachedGets(t, addr) - gets; d != 0 {
				t.Errorf("the server was asked for %d keys for %d near reads", d, reads)
			}
			if d := getStats(c, addr).Calls() - calls; d != 0 {
				t.Errorf("Stats counted %d get calls for %d near reads", d, reads)
			}
			if after := nearOf(t, c, addr); after.Hits-near.Hits != reads || after.Misses != near.Misses || after.Entries != 1 || after.Bytes <= 0 {
				t.Errorf("near cache %+v after %+v and %d reads", after, near, reads)
			}
			// Another process's write is not seen: nothing tells this one.
			if err := other.Set(&memcache.Item{Key: "k", Value: []byte("v2")}); err != nil {
				t.Fatal(err)
			}
			if err := expect(ctx, c, "k", []byte("v1")); err != nil {
				t.Fatalf("a write by another process reached the near copy, within MaxAge: %v", err)
			}
			// A miss goes to the server every time.
			misses := nearOf(t, c, addr).Misses
			for range 3 {
				if err := expect(ctx, c, "absent", nil); err != nil {
					t.Fatal(err)
				}
			}
			if s := nearOf(t, c, addr); s.Misses != misses+3 {
				t.Errorf("3 reads of an absent key: %d near misses, want 3", s.Misses-misses)
			}
			if err := other.Set(&memcache.Item{Key: "absent", Value: []byte("now")}); err != nil {
				t.Fatal(err)
			}
			if err := expect(ctx, c, "absent", []byte("now")); err != nil {
				t.Fatalf("a key another process created after a miss: %v", err)
			}
		})
	}
}

// TestNearCacheMemcachedMaxAge: a write by another process reaches a near
// copy once it is MaxAge old, and not before.
func TestNearCacheMemcachedMaxAge(t *testing.T) {
	const maxAge = 50 * time.Millisecond
	cl := newCluster(t, "memcached", 1)
	c := cl.client(t, Options{NearCache: &NearCache{MaxAge: maxAge}})
	other := gomemcacheClient(cl.addrs[0])
	t.Cleanup(func() { other.Close() })
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("v1"), 0); err != nil {
		t.Fatal(err)
	}
	filled := time.Now()
	if err := expect(ctx, c, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := other.Set(&memcache.Item{Key: "k", Value: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "another process's write after MaxAge", func() error {
		v, err := c.Get(ctx, "k")
		if err != nil {
			return err
		}
		if string(v) == "v1" {
			return errors.New("still the near copy")
		}
		if string(v) != "v2" {
			t.Fatalf("Get = %q", v)
		}
		return nil
	})
	if d := time.Since(filled); d < maxAge {
		t.Errorf("the near copy went after %v, before MaxAge %v", d, maxAge)
	}
}

// TestNearCacheMemcachedOwnWrites: every write through the façade is read
// back at once, with no retry: it drops the key's near copy once it has run.
// Each round first makes sure the old value is a near copy. The item reads
// (GetItems) never come from the near cache, which has no flags nor CAS ids.
func TestNearCacheMemcachedOwnWrites(t *testing.T) {
	cl := newCluster(t, "memcached", 2)
	c := cl.client(t, Options{NearCache: &NearCache{MaxAge: time.Hour}})
	ctx := context.Background()
	near := func(key string) {
		t.Helper()
		addr := c.Locate(key).Addr
		hits := nearOf(t, c, addr).Hits
		for range 2 {
			if _, err := c.Get(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		if nearOf(t, c, addr).Hits == hits {
			t.Fatalf("%s: not answered from the near cache", key)
		}
	}
	check := func(key string, want []byte) {
		t.Helper()
		if err := expect(ctx, c, key, want); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		k := fmt.Sprint("own:", i)
		v := func(s string) []byte { return []byte(fmt.Sprint(s, i)) }
		must(c.Set(ctx, k, v("first"), 0))
		near(k)
		must(c.Set(ctx, k, v("set"), 0))
		check(k, v("set"))
		near(k)
		must(c.SetMulti(ctx, map[string][]byte{k: v("multi")}, 0))
		check(k, v("multi"))
		near(k)
		must(c.Store(ctx, StoreReplace, Item{Key: k, Value: v("replace")}))
		check(k, v("replace"))
		near(k)
		must(c.Store(ctx, StoreAppend, Item{Key: k, Value: []byte("+")}))
		check(k, append(v("replace"), '+'))
		near(k)
		it, err := c.GetItem(ctx, k)
		must(err)
		must(c.Store(ctx, StoreCAS, Item{Key: k, Value: v("cas"), CasID: it.CasID, Flags: 7}))
		check(k, v("cas"))
		near(k)
		items, err := c.GetItems(ctx, []string{k})
		must(err)
		if got := items[k]; got == nil || got.Flags != 7 || got.CasID == 0 || string(got.Value) != string(v("cas")) {
			t.Fatalf("GetItems of a key held near: %+v, want its flags and CAS id", got)
		}
		must(c.Delete(ctx, k))
		check(k, nil)
		must(c.Add(ctx, k, []byte("5"), time.Hour))
		check(k, []byte("5"))
		near(k)
		n, err := c.Increment(ctx, k, 2)
		must(err)
		check(k, []byte(strconv.FormatUint(n, 10)))
		near(k)
		_, err = c.Incr(ctx, k, 3)
		must(err)
		check(k, []byte("10"))
		near(k)
		must(c.DeleteMulti(ctx, []string{k}))
		check(k, nil)
		must(c.Set(ctx, k, v("again"), 0))
		near(k)
		found, err := c.DeleteFound(ctx, k)
		if err != nil || !found {
			t.Fatalf("DeleteFound: %v, %v", found, err)
		}
		check(k, nil)
	}
	must(c.Set(ctx, "f", []byte("v"), 0))
	near("f")
	must(c.Flush(ctx))
	check("f", nil)
}

// TestNearCacheMemcachedGetMulti: GetMulti answers the keys held near and
// asks the server for the others alone.
func TestNearCacheMemcachedGetMulti(t *testing.T) {
	cl := newCluster(t, "memcached", 1)
	addr := cl.addrs[0]
	c := cl.client(t, Options{NearCache: &NearCache{}})
	ctx := context.Background()
	if err := c.SetMulti(ctx, map[string][]byte{"a": []byte("1"), "b": []byte("2"), "c": []byte("3")}, 0); err != nil {
		t.Fatal(err)
	}
	if err := expect(ctx, c, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	gets, hits := memcachedGets(t, addr), nearOf(t, c, addr).Hits
	getMultiIs(t, c, []string{"a", "b", "c", "absent"}, map[string]string{"a": "1", "b": "2", "c": "3"})
	if d := memcachedGets(t, addr) - gets; d != 3 {
		t.Errorf("the server was asked for %d keys, want 3 (a held near)", d)
	}
	if d := nearOf(t, c, addr).Hits - hits; d != 1 {
		t.Errorf("%d near hits, want 1", d)
	}
}

// TestNearCacheMemcachedDeleteInMigration: a Delete during a migration
// buries each moved key on its new owner (a tombstone), and the tombstone
// drops the key's near copy too. Set 40 keys, reshard 3→4 (or start with
// MigrateFrom), read each twice (the fallback, then a read on the new
// owner that keeps a near copy), delete each: no Get returns a value. The
// near cache's wrapper once missed the tombstone's write, and 11 of 40
// keys, every moved one, read back.
func TestNearCacheMemcachedDeleteInMigration(t *testing.T) {
	for _, how := range []string{"Reshard", "MigrateFrom"} {
		t.Run(how, func(t *testing.T) {
			cl := newCluster(t, "memcached", 4)
			ctx := t.Context()
			from, to := cl.nodes(0, 1, 2), cl.nodes()
			writer := cl.client(t, Options{Nodes: from})
			keys := numberedKeys("near-del", 40)
			for _, k := range keys {
				if err := writer.Set(ctx, k, []byte("v:"+k), time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			opts := Options{Nodes: from, NearCache: &NearCache{MaxAge: time.Hour}}
			if how == "MigrateFrom" {
				opts.Nodes = to
				opts.MigrateFrom = &MigrateFrom{Nodes: from, Start: time.Now().Add(-time.Second), Window: time.Hour}
			}
			c := cl.client(t, opts)
			if how == "Reshard" {
				if err := c.Reshard(to, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			moved := countMoved(t, keys, from, to)
			for range 2 {
				for _, k := range keys {
					mustGet(t, c, k, "v:"+k)
				}
			}
			var hits int64
			for _, s := range c.NearCacheStats() {
				hits += s.Hits
			}
			if hits == 0 || moved == 0 {
				t.Fatalf("%d near hits, %d keys moved: the test shows nothing", hits, moved)
			}
			for _, k := range keys {
				if err := c.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			back := 0
			for _, k := range keys {
				if v, err := c.Get(ctx, k); err != ErrCacheMiss {
					back++
					t.Errorf("Get(%q) after its Delete = %q, %v; want a miss", k, v, err)
				}
			}
			if back > 0 {
				t.Logf("%d of %d keys read back after their Delete (%d moved)", back, len(keys), moved)
			}
		})
	}
}
