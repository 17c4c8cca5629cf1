package client

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// serverReader reads a server's own counts on a connection of its own,
// opened before the test fills the server (a connection opened on a full
// Redis makes it evict): Redis INFO, Memcached stats, under NodeUsage's
// names.
func serverReader(t *testing.T, b Backend, addr string) func() map[string]int64 {
	t.Helper()
	ctx := context.Background()
	if b == Redis {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
		t.Cleanup(func() { rdb.Close() })
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		return func() map[string]int64 {
			out := map[string]string{}
			for _, section := range []string{"memory", "stats", "keyspace"} {
				reply, err := rdb.Info(ctx, section).Result()
				if err != nil {
					t.Fatal(err)
				}
				for line := range strings.SplitSeq(reply, "\r\n") {
					if name, value, ok := strings.Cut(line, ":"); ok {
						out[name] = value
					}
				}
			}
			out["keys"], _, _ = strings.Cut(strings.TrimPrefix(out["db0"], "keys="), ",")
			return numbers(t, out, map[string]string{"items": "keys", "bytes": "used_memory", "limit": "maxmemory",
				"evictions": "evicted_keys", "hits": "keyspace_hits", "misses": "keyspace_misses"})
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	return func() map[string]int64 {
		out := map[string]string{}
		c.Write([]byte("stats\r\n"))
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if line = strings.TrimSpace(line); line == "END" {
				break
			}
			if f := strings.Fields(line); len(f) == 3 {
				out[f[1]] = f[2]
			}
		}
		return numbers(t, out, map[string]string{"items": "curr_items", "bytes": "bytes", "limit": "limit_maxbytes",
			"evictions": "evictions", "hits": "get_hits", "misses": "get_misses"})
	}
}

// numbers returns the fields of a server's answer that names maps to, as
// numbers.
func numbers(t *testing.T, fields map[string]string, names map[string]string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for ours, theirs := range names {
		v, err := strconv.ParseInt(fields[theirs], 10, 64)
		if err != nil {
			t.Fatalf("the server's %s %q", theirs, fields[theirs])
		}
		out[ours] = v
	}
	return out
}

// TestNodeStats reads real redis-server and memcached processes through
// NodeStats and checks each node against what the server itself reports,
// read on a connection of its own: items, memory, limit, evictions, hits
// and misses (Redis's memory within what one more connection takes). During
// a migration the old placement's nodes are listed too; a node held down
// is an ErrNodeDown of its own, nothing sent, beside the others' readings.
func TestNodeStats(t *testing.T) {
	for _, backend := range []Backend{Redis, Memcached} {
		t.Run(backend.String(), func(t *testing.T) {
			var ss []*testserver.Server
			if backend == Redis {
				ss = testserver.RedisArgs(t, 4, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
			} else {
				ss = testserver.MemcachedArgs(t, 4, "-m", "2")
			}
			addrs := testserver.Addrs(ss)
			direct := make([]func() map[string]int64, len(addrs))
			for i, a := range addrs {
				direct[i] = serverReader(t, backend, a)
			}
			nodes := make([]ring.Node, 4)
			for i, a := range addrs {
				nodes[i] = ring.Node{Name: "n" + strconv.Itoa(i), Addr: a}
			}
			c, err := New(Options{Backend: backend, Nodes: nodes[:3], FailureThreshold: 1, ProbeInterval: time.Hour,
				ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			value := []byte(strings.Repeat("v", 4000))
			for i := range 3000 { // 12 MB over 6 MB: every node evicts
				if err := c.Set(ctx, "k:"+strconv.Itoa(i), value, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 30 {
				c.Get(ctx, "k:"+strconv.Itoa(2999-i))
				c.Get(ctx, "absent:"+strconv.Itoa(i))
			}

			// Counters between the server's own readings before and after.
			before := make([]map[string]int64, 3)
			for i := range before {
				before[i] = direct[i]()
			}
			got, err := c.NodeStats(ctx)
			if err != nil || len(got) != 3 {
				t.Fatalf("NodeStats = %+v, %v; want 3 nodes", got, err)
			}
			for i, u := range got {
				after := direct[i]()
				if u.Node.Name != nodes[i].Name || u.Node.Addr != addrs[i] || !u.Current || u.Old || u.Err != nil {
					t.Errorf("%d: %+v; want %v, current", i, u, nodes[i])
				}
				for _, f := range []struct {
					name string
					got  int64
				}{{"items", u.Items}, {"limit", u.MemoryLimit}, {"evictions", u.Evictions}, {"hits", u.Hits}, {"misses", u.Misses}} {
					lo, hi := min(before[i][f.name], after[f.name]), max(before[i][f.name], after[f.name])
					if f.got < lo || f.got > hi {
						t.Errorf("%s: %s %d; the server says %d, then %d", u.Node.Name, f.name, f.got, before[i][f.name], after[f.name])
					}
				}
				if bytes := after["bytes"]; u.Bytes < bytes-bytes/20 || u.Bytes > bytes+bytes/20 {
					t.Errorf("%s: %d bytes; the server says %d", u.Node.Name, u.Bytes, bytes)
				}
				policy := map[Backend]string{Redis: "allkeys-lru", Memcached: ""}[backend]
				if u.EvictionPolicy != policy || u.MemoryLimit != 2<<20 || u.Evictions == 0 || u.Hits == 0 || u.Misses == 0 {
					t.Errorf("%s: %+v: want the 2 MiB limit, policy %q, evictions, hits and misses", u.Node.Name, u, policy)
				}
				if f := u.Fill(); !(f > 0.5 && f <= 1.01) {
					t.Errorf("%s: fill %v of a server that evicts", u.Node.Name, f)
				}
			}

			// A migration to four nodes: both placements listed; then n1
			// held down.
			if err := c.Reshard(nodes, time.Hour); err != nil {
				t.Fatal(err)
			}
			ss[1].Stop()
			if _, err := c.Get(ctx, keysOn(c, addrs[1], "down:", 1)[0]); err == nil {
				t.Fatal("Get on a stopped node succeeded")
			}
			got, err = c.NodeStats(ctx)
			if len(got) != 4 || !errors.Is(err, ErrNodeDown) {
				t.Fatalf("NodeStats = %+v, %v; want 4 nodes and n1 down", got, err)
			}
			for i, u := range got {
				wantOld := i < 3
				if !u.Current || u.Old != wantOld {
					t.Errorf("%s: current %v, old %v; want current, old %v", u.Node.Name, u.Current, u.Old, wantOld)
				}
				var ne *NodeError
				switch {
				case i == 1 && (!errors.Is(u.Err, ErrNodeDown) || !errors.As(u.Err, &ne) || ne.Node.Name != "n1" || u.Bytes != 0):
					t.Errorf("n1, held down: %+v; want a NodeError of ErrNodeDown, no reading", u)
				case i != 1 && (u.Err != nil || u.MemoryLimit != 2<<20):
					t.Errorf("%s: %+v; want a reading", u.Node.Name, u)
				}
			}
			if f := got[1].Fill(); f == f {
				t.Errorf("fill of a node not read: %v, want NaN", f)
			}

			c.Close()
			if _, err := c.NodeStats(ctx); err != ErrClosed {
				t.Errorf("NodeStats after Close: %v, want ErrClosed", err)
			}
			if _, err := c.NodeStats(nil); err != ErrNilContext {
				t.Errorf("NodeStats(nil): %v, want ErrNilContext", err)
			}
		})
	}
}

// TestNodeStatsTimeout: a server that stops answering (SIGSTOP) fails its
// own reading with a timeout, within NodeStats's bound rather than the
// node's read timeout, beside the others' readings.
func TestNodeStatsTimeout(t *testing.T) {
	ss := testserver.Memcached(t, 2)
	addrs := testserver.Addrs(ss)
	c, err := New(Options{Backend: Memcached, Nodes: []ring.Node{{Name: "a", Addr: addrs[0]}, {Name: "b", Addr: addrs[1]}},
		ReadTimeout: time.Hour, WriteTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.NodeStats(ctx); err != nil { // connections open
		t.Fatal(err)
	}
	paused(t, ss[1])
	got, err := c.NodeStats(ctx)
	if len(got) != 2 || got[0].Err != nil || !errors.Is(got[1].Err, context.DeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("NodeStats = %+v, %v; want a reading of a, a timeout of b", got, err)
	}
}
