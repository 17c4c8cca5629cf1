package mcnode

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/testserver"
)

// TestUsage reads a real memcached's usage through the node and checks it
// against the server's own "stats", read on a connection of its own: the
// items, bytes, limit, evictions, hits and misses a client made.
func TestUsage(t *testing.T) {
	s := testserver.MemcachedArgs(t, 1, "-m", "8")[0]
	n, rec := newNode(t, s, Config{})
	ctx := context.Background()
	value := []byte(strings.Repeat("v", 10_000))
	const keys = 2000 // 20 MB: more than the 8 MB the server has
	for i := range keys {
		if err := n.Set(ctx, "k:"+strconv.Itoa(i), value, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"k:" + strconv.Itoa(keys-1), "absent:1", "absent:2"} {
		_, _ = n.Get(ctx, k)
	}
	rec.take()

	got, err := n.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls := rec.take(); len(calls) != 1 || calls[0].op != node.OpOther || calls[0].err != nil {
		t.Errorf("Usage observed as %+v, want one OpOther call", calls)
	}
	stats := rawStats(t, s.Addr)
	want := node.Usage{
		Items: stats["curr_items"], Bytes: stats["bytes"], Limit: stats["limit_maxbytes"],
		Evictions: stats["evictions"], Hits: stats["get_hits"], Misses: stats["get_misses"],
	}
	if got != want {
		t.Errorf("Usage = %+v, the server's stats say %+v", got, want)
	}
	if got.Limit != 8<<20 || got.Evictions == 0 || got.Items == 0 || got.Items >= keys || got.Hits != 1 || got.Misses != 2 {
		t.Errorf("Usage = %+v: want the 8 MiB limit, evictions, some of the %d keys, 1 hit and 2 misses", got, keys)
	}
}

// TestUsageDown: a server that does not answer is an error the breaker
// reads as unreachable, observed.
func TestUsageDown(t *testing.T) {
	s := testserver.Memcached(t, 1)[0]
	n, rec := newNode(t, s, Config{})
	s.Stop()
	_, err := n.Usage(context.Background())
	if !node.Unreachable(err) {
		t.Fatalf("Usage of a stopped server: %v, want a connection failure", err)
	}
	if calls := rec.take(); len(calls) != 1 || calls[0].op != node.OpOther || calls[0].err == nil {
		t.Errorf("observed %+v, want the failed OpOther call", calls)
	}
}

// rawStats reads "stats" from the server at addr on a connection of its
// own, its numeric fields by name.
func rawStats(t *testing.T, addr string) map[string]int64 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("stats\r\n")); err != nil {
		t.Fatal(err)
	}
	stats := map[string]int64{}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		line = strings.TrimSpace(line)
		if line == "END" {
			return stats
		}
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "STAT" {
			if v, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				stats[f[1]] = v
			}
		}
	}
}
