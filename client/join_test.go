package client

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/internal/testserver/faultproxy"
	"github.com/shardcache/shardcache/ring"
)

// TestGetOrLoadJoinAfterDelete: a GetOrLoad that joins a load already under
// way never takes that load's read of the cache when the read began before
// the call did. Here the load waits on another process's lease; that
// process stores a large value, the load's read finds it (the proxy sends
// it back slowly), another client deletes the key, and a second caller,
// whose call begins after the delete was acknowledged, misses and joins the
// load while its answer is still on its way: the second caller must not be
// answered with the deleted value.
func TestGetOrLoadJoinAfterDelete(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			var servers []*testserver.Server
			backend := Redis
			if kind == "redis-server" {
				servers = testserver.Redis(t, 1)
			} else {
				servers, backend = testserver.Memcached(t, 1), Memcached
			}
			proxy := faultproxy.New(t, servers[0].Addr)
			opts := Options{Backend: backend, Lease: time.Minute, ReadTimeout: time.Minute}
			opts.Nodes = []ring.Node{{Name: "n", Addr: proxy.Addr}}
			slow, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer slow.Close()
			opts.Nodes = []ring.Node{{Name: "n", Addr: servers[0].Addr}}
			direct, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			ctx := t.Context()
			lkey := slow.leases.Key("k")
			if err := direct.Set(ctx, lkey, []byte("another process"), time.Minute); err != nil {
				t.Fatal(err)
			}
			l := openLoader("loaded", nil)
			first := make(chan []byte, 1)
			go func() {
				v, err := slow.GetOrLoad(ctx, "k", time.Minute, l.load)
				if err != nil {
					t.Error(err)
				}
				first <- v
			}()
			waitFor(t, "the first caller to wait on the lease", func() bool { return slow.LoadStats().LeaseWaits == 1 })

			proxy.Bandwidth(128) // 512 KiB takes 4 s to come back
			old := bytes.Repeat([]byte("o"), 512<<10)
			read := valueRead(t, kind, servers[0].Addr, "k", len(old))
			if err := direct.Set(ctx, "k", old, time.Minute); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the load to read the value", read)
			for _, k := range []string{"k", lkey} {
				if err := direct.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			v, err := slow.GetOrLoad(ctx, "k", time.Minute, l.load)
			if err != nil {
				t.Fatal(err)
			}
			if string(v) != "loaded" {
				t.Fatalf("a GetOrLoad begun after the delete = %.10q (%d bytes); want the loader's value", v, len(v))
			}
			// The first caller's load read the value before the delete: it
			// is a right answer for it.
			if v := <-first; !bytes.Equal(v, old) {
				t.Fatalf("the first caller = %.10q (%d bytes); want the value its load read", v, len(v))
			}
			if n := l.calls.Load(); n != 1 {
				t.Fatalf("loader ran %d times; want once, for the second caller", n)
			}
		})
	}
}

// valueRead returns a condition that holds once the server at addr has
// found key with a value of at least size bytes for a read, counted from
// now (call it before the value is written): Redis's keyspace_hits (one
// thread; a lease poll's SET NX counts no hit, and key does not exist
// before), memcached's log of its fetches ("watch fetchers"), which names
// the key, whether it was found and its size. Not memcached's get_hits: a
// lease poll's add that fails reads the lease key to see whether it is a
// tombstone (a hit), and memcached counts a read once it has looked the key
// up, on a thread of its own; nor bytes written, which the statistics'
// own answers grow.
func valueRead(t *testing.T, kind, addr, key string, size int) func() bool {
	t.Helper()
	if kind == "redis-server" {
		before := redisStat(t, addr, "keyspace_hits")
		return func() bool { return redisStat(t, addr, "keyspace_hits") > before }
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprint(conn, "watch fetchers\r\n")
	sc := bufio.NewScanner(conn)
	if !sc.Scan() || sc.Text() != "OK" {
		t.Fatalf("memcached watch fetchers: %q, %v", sc.Text(), sc.Err())
	}
	var found atomic.Bool
	go func() {
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if slices.Contains(f, "key="+key) && slices.Contains(f, "status=found") {
				for _, w := range f {
					if n, ok := strings.CutPrefix(w, "size="); ok {
						if v, _ := strconv.Atoi(n); v >= size {
							found.Store(true)
						}
					}
				}
			}
		}
	}()
	return found.Load
}

// redisStat is the field name of the Redis server at addr's INFO.
func redisStat(t *testing.T, addr, name string) int {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("redis at %s: no %s in INFO stats", addr, name)
	return 0
}
