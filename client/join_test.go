package client

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
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
			lkey := slow.leaseKey("k")
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
			if err := direct.Set(ctx, "k", old, time.Minute); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the load to read the value", valueRead(t, kind, servers[0].Addr, len(old)))
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
// begun to answer a read with a value of size bytes, counted from now:
// Redis's GET and MGET calls (one thread: a call counted after now ran
// after it, and only "k" can be read), memcached's bytes written. Not
// memcached's cmd_get or get_hits: a lease poll's add that fails reads the
// lease key to see whether it is a tombstone (a hit), and memcached counts a
// read once it has looked the key up, on a thread of its own, so a poll that
// missed before the Set may be counted after it. The value, 512 KiB, fills
// the socket's buffers towards the proxy at once: a poll's answers are a
// hundred bytes.
func valueRead(t *testing.T, kind, addr string, size int) func() bool {
	t.Helper()
	if kind == "redis-server" {
		before := redisReads(t, addr)
		return func() bool { return redisReads(t, addr) > before }
	}
	before := memcachedStat(t, addr, "bytes_written")
	return func() bool { return memcachedStat(t, addr, "bytes_written") > before+size/8 }
}

// redisReads is how many GET and MGET calls the Redis server at addr has
// answered.
func redisReads(t *testing.T, addr string) int {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_get:", "cmdstat_mget:"} {
			if rest, ok := strings.CutPrefix(line, cmd+"calls="); ok {
				calls, _, _ := strings.Cut(rest, ",")
				c, _ := strconv.Atoi(calls)
				n += c
			}
		}
	}
	return n
}

// memcachedStat is the statistic name of the memcached server at addr.
func memcachedStat(t *testing.T, addr, name string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "stats\r\n")
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "STAT "+name+" "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(rest))
			return n
		}
		if sc.Text() == "END" {
			break
		}
	}
	t.Fatalf("memcached at %s: no %s in stats (%v)", addr, name, sc.Err())
	return 0
}
