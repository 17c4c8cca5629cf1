package gomemcache

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// answering serves the memcached text protocol's framing on a loopback
// port and answers every command with line: the data block of a storage
// command is read first, as a server does.
func answering(t *testing.T, line string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					cmd, err := r.ReadString('\n')
					if err != nil {
						return
					}
					f := strings.Fields(cmd)
					switch f[0] {
					case "set", "add", "replace", "append", "prepend", "cas":
						n, _ := strconv.Atoi(f[4])
						if _, err := io.CopyN(io.Discard, r, int64(n)+2); err != nil {
							return
						}
					}
					if _, err := io.WriteString(conn, line+"\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// calls are every method of memcacheAPI, each returning its error.
var calls = []struct {
	name string
	do   func(mc memcacheAPI) error
}{
	{"Get", func(mc memcacheAPI) error { _, err := mc.Get("k"); return err }},
	{"GetMulti", func(mc memcacheAPI) error { _, err := mc.GetMulti([]string{"k"}); return err }},
	{"Set", func(mc memcacheAPI) error { return mc.Set(&memcache.Item{Key: "k", Value: []byte("v")}) }},
	{"Add", func(mc memcacheAPI) error { return mc.Add(&memcache.Item{Key: "k", Value: []byte("v")}) }},
	{"Replace", func(mc memcacheAPI) error { return mc.Replace(&memcache.Item{Key: "k", Value: []byte("v")}) }},
	{"Append", func(mc memcacheAPI) error { return mc.Append(&memcache.Item{Key: "k", Value: []byte("v")}) }},
	{"Prepend", func(mc memcacheAPI) error { return mc.Prepend(&memcache.Item{Key: "k", Value: []byte("v")}) }},
	{"CompareAndSwap", func(mc memcacheAPI) error {
		return mc.CompareAndSwap(&memcache.Item{Key: "k", Value: []byte("v"), CasID: 7})
	}},
	{"Delete", func(mc memcacheAPI) error { return mc.Delete("k") }},
	{"DeleteAll", func(mc memcacheAPI) error { return mc.DeleteAll() }},
	{"FlushAll", func(mc memcacheAPI) error { return mc.FlushAll() }},
	{"Increment", func(mc memcacheAPI) error { _, err := mc.Increment("k", 1); return err }},
	{"Decrement", func(mc memcacheAPI) error { _, err := mc.Decrement("k", 1); return err }},
	{"Touch", func(mc memcacheAPI) error { return mc.Touch("k", 10) }},
	{"GetAndTouch", func(mc memcacheAPI) error { _, err := mc.GetAndTouch("k", 10); return err }},
	{"Ping", func(mc memcacheAPI) error { return mc.Ping() }},
}

// TestErrorsAsGomemcache sends every method to a server that answers each
// command with an error line, through gomemcache and through the drop-in:
// each error reads the same, a SERVER_ERROR is also
// memcache.ErrServerError, and every one is still the client's
// *client.NodeError naming the node, for errors.As.
func TestErrorsAsGomemcache(t *testing.T) {
	for _, line := range []string{
		"SERVER_ERROR out of memory storing object",
		"CLIENT_ERROR cannot increment or decrement non-numeric value",
		"ERROR",
	} {
		t.Run(line, func(t *testing.T) {
			addr := answering(t, line)
			theirs := plain(addr)
			ours, err := New([]ring.Node{{Name: "a", Addr: addr}})
			if err != nil {
				t.Fatal(err)
			}
			ours.Timeout = testserver.ClientTimeout
			defer ours.Shardcache().Close()
			for _, c := range calls {
				want, got := c.do(theirs), c.do(ours)
				if want == nil || got == nil || got.Error() != want.Error() {
					t.Errorf("%s: gomemcache: %v\n\tdrop-in: %v", c.name, want, got)
					continue
				}
				var ne *client.NodeError
				if !errors.As(got, &ne) || ne.Node.Name != "a" {
					t.Errorf("%s: %v is not a *client.NodeError naming the node", c.name, got)
				}
				if isServer := errors.Is(got, memcache.ErrServerError); isServer != strings.HasPrefix(line, "SERVER_ERROR") {
					t.Errorf("%s: errors.Is(%v, memcache.ErrServerError) = %v", c.name, got, isServer)
				}
			}
		})
	}
}

// TestErrorSentinels checks the errors that are gomemcache's sentinels or
// types but come from no server's line: no nodes, a value over the
// server's limit (refused before it is sent, with the text of the
// server's refusal), a connection that timed out.
func TestErrorSentinels(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, memcache.ErrNoServers) || !errors.Is(err, ring.ErrNoNodes) {
		t.Errorf("New(nil) = %v; want memcache.ErrNoServers and ring.ErrNoNodes", err)
	}
	servers := testserver.Memcached(t, 1)
	mc, err := New([]ring.Node{{Addr: servers[0].Addr}})
	if err != nil {
		t.Fatal(err)
	}
	mc.Timeout = testserver.ClientTimeout
	if err := mc.Reshard(nil, 0); !errors.Is(err, memcache.ErrNoServers) {
		t.Errorf("Reshard(nil) = %v; want memcache.ErrNoServers", err)
	}
	err = mc.Set(&memcache.Item{Key: "big", Value: make([]byte, 2<<20)})
	const want = `memcache: unexpected response line from "set": "SERVER_ERROR object too large for cache\r\n"`
	if err == nil || err.Error() != want || !errors.Is(err, memcache.ErrServerError) || !errors.Is(err, client.ErrValueTooLarge) {
		t.Errorf("Set of 2 MiB = %v; want %s, memcache.ErrServerError and client.ErrValueTooLarge", err, want)
	}

	// A dial that timed out, as the client reports it: gomemcache's type.
	addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 11211}
	dial := &client.NodeError{Op: "get", Node: ring.Node{Addr: addr.String()}, Keys: []string{"k"},
		Err: fmt.Errorf("%w: %w", os.ErrDeadlineExceeded, &net.OpError{Op: "dial", Net: "tcp", Addr: addr, Err: os.ErrDeadlineExceeded})}
	err = mcErr(vGet, dial)
	var cte *memcache.ConnectTimeoutError
	var ne *client.NodeError
	if !errors.As(err, &cte) || err.Error() != "memcache: connect timeout to 192.0.2.1:11211" || !errors.As(err, &ne) {
		t.Errorf("a dial timeout = %v; want a *memcache.ConnectTimeoutError and the *client.NodeError", err)
	}
}
