package mcnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/wire/memcache"
)

// fakeNode is a node whose connections are pipes to a fake server: serve
// runs on the server's end of each, n counting from 1.
func fakeNode(t *testing.T, cfg Config, serve func(n int, r *bufio.Reader, w io.Writer)) *Node {
	t.Helper()
	var conns atomic.Int32
	var wg sync.WaitGroup
	var mu sync.Mutex
	var servers []net.Conn
	cfg.Addr = "fake:11211"
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout, cfg.WriteTimeout = 5*time.Second, 5*time.Second
	}
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
	nd := New(cfg)
	t.Cleanup(func() {
		nd.Close()
		mu.Lock()
		for _, s := range servers {
			s.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return nd
}

// classic is a fake memcached 1.4: the classic commands only, ERROR to
// meta commands, and a metadump "all" (not "hash") of what it holds.
func classic(items map[string]string, lines *atomic.Int32) func(int, *bufio.Reader, io.Writer) {
	return func(_ int, r *bufio.Reader, w io.Writer) {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines.Add(1)
			f := strings.Fields(l)
			switch {
			case len(f) > 1 && f[0] == "gets":
				var b strings.Builder
				for _, k := range f[1:] {
					if v, ok := items[k]; ok {
						b.WriteString("VALUE " + k + " 3 " + strconv.Itoa(len(v)) + " 1\r\n" + v + "\r\n")
					}
				}
				io.WriteString(w, b.String()+"END\r\n")
			case l == "lru_crawler metadump all\r\n":
				for k := range items {
					io.WriteString(w, "key="+k+" exp=-1 la=1 cas=1 fetch=no cls=1 size=60\r\n")
				}
				io.WriteString(w, "END\r\n")
			case l == "lru_crawler metadump hash\r\n":
				io.WriteString(w, "BADCLASS invalid class id\r\n")
			default:
				io.WriteString(w, "ERROR\r\n")
			}
		}
	}
}

// TestNoMeta: on a server without the meta commands, a multi-get with
// TTLs falls back to gets (no TTLKnown) after one ERROR, remembered; a
// sweep lists with "metadump all", and its dumps take the listing's TTL.
func TestNoMeta(t *testing.T) {
	var lines atomic.Int32
	n := fakeNode(t, Config{}, classic(map[string]string{"a": "va", "b": "vb"}, &lines))
	ctx := t.Context()
	for round := range 3 {
		items, err := n.GetMulti(ctx, []string{"a", "x"}, true)
		if err != nil {
			t.Fatal(err)
		}
		if !items[0].Found || string(items[0].Value) != "va" || items[0].Flags != 3 || items[0].TTLKnown || items[1].Found {
			t.Fatalf("round %d: %+v", round, items)
		}
	}
	// The server counts a line when it reads it: the second mg, whose answer
	// the client did not wait for, may be read after the last gets.
	for i := 0; i < 100 && lines.Load() < 5; i++ {
		time.Sleep(time.Millisecond)
	}
	if got := lines.Load(); got != 5 { // the first's two mg, pipelined, then three gets
		t.Errorf("%d lines sent for three multi-gets; want one pipeline of mg, then gets only", got)
	}
	var listed []node.Item
	err := n.Scan(ctx, node.ScanOptions{Page: 10}, func(page []node.Item) error {
		listed = append(listed, page...)
		return nil
	})
	if err != nil || len(listed) != 2 || !listed[0].TTLKnown {
		t.Fatalf("Scan = %+v, %v", listed, err)
	}
	listed[0].TTL = time.Hour
	dumped, err := n.Dump(ctx, listed[:1])
	if err != nil || !dumped[0].Found || !dumped[0].TTLKnown || dumped[0].TTL != time.Hour {
		t.Fatalf("Dump = %+v, %v; want the listing's TTL", dumped, err)
	}
}

// TestScanPartial: a listing cut off partway still pages the keys it
// listed to fn, then returns the node's error; a spool directory that
// cannot be written fails the Scan before anything is listed.
func TestScanPartial(t *testing.T) {
	var listings atomic.Int32
	n := fakeNode(t, Config{}, func(_ int, r *bufio.Reader, w io.Writer) {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch l {
			case "stats\r\n":
				io.WriteString(w, "STAT hash_is_expanding 0\r\nEND\r\n")
			case "lru_crawler metadump hash\r\n":
				listings.Add(1)
				for i := range 25 {
					io.WriteString(w, "key=k"+strconv.Itoa(i)+" exp=-1 la=1 cas=1 fetch=no cls=1 size=60\r\n")
				}
				return // the connection closes mid-listing
			default:
				io.WriteString(w, "ERROR\r\n")
			}
		}
	})
	var pages, keys int
	err := n.Scan(t.Context(), node.ScanOptions{Page: 10}, func(page []node.Item) error {
		pages++
		keys += len(page)
		return nil
	})
	if err == nil || !node.Unreachable(err) || pages != 3 || keys != 25 {
		t.Fatalf("Scan of a listing cut off after 25 keys: %d pages, %d keys, %v; want 3 pages, 25 keys and a connection error", pages, keys, err)
	}

	missing := t.TempDir() + "/missing"
	err = n.Scan(t.Context(), node.ScanOptions{SpoolDir: missing}, func([]node.Item) error {
		t.Error("fn called without a spool")
		return nil
	})
	if !errors.Is(err, node.ErrSpool) || !strings.Contains(err.Error(), missing) || listings.Load() != 1 {
		t.Fatalf("Scan with an unwritable spool directory: %v, after %d listings; want ErrSpool naming it, before any listing", err, listings.Load())
	}
}

// TestNodeErrSweep: the wire's listing errors reach the client as the
// node's sentinels, the server's text kept.
func TestNodeErrSweep(t *testing.T) {
	for _, tc := range []struct {
		err, want error
	}{
		{fmt.Errorf("%w: hash table expanding", memcache.ErrBusy), node.ErrSweepBusy},
		{memcache.ErrBusy, node.ErrSweepBusy},
		{fmt.Errorf("%w: lru_crawler metadump hash: %q", memcache.ErrNoMetadump, "ERROR"), node.ErrSweepUnsupported},
	} {
		if got := nodeErr(tc.err); !errors.Is(got, tc.want) || got.Error() != tc.err.Error() {
			t.Errorf("nodeErr(%v) = %v; want errors.Is %v, the same text", tc.err, got, tc.want)
		}
	}
}
