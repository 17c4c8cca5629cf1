package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// The edges of the multi-gets on raw connections (redis_raw.go,
// mcgets.go), where they could differ from go-redis's: timeouts, logins,
// connection counts, answers no server should send.

// silentNodes returns n nodes that accept connections and never answer.
func silentNodes(t *testing.T, n int) []ring.Node {
	t.Helper()
	var nodes []ring.Node
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var conns []net.Conn
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			l.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
		nodes = append(nodes, ring.Node{Name: "silent" + strconv.Itoa(i), Addr: l.Addr().String()})
	}
	return nodes
}

// TestRawSilentNodes: a GetMulti over four nodes that never answer fails
// with a timeout on each after about one ReadTimeout in all, as when every
// node is read at once, not one ReadTimeout per node in turn, and not the
// longer DialTimeout or WriteTimeout. (The bound, 3 of the 4 timeouts, is
// there to tell the two apart, not to measure speed.)
func TestRawSilentNodes(t *testing.T) {
	for _, backend := range []Backend{Redis, Memcached} {
		t.Run(backend.String(), func(t *testing.T) {
			nodes := silentNodes(t, 4)
			o := Options{Backend: backend, Nodes: nodes, ReadTimeout: time.Second, FailureThreshold: -1}
			if backend == Redis {
				o.DialTimeout, o.WriteTimeout = 10*time.Second, 10*time.Second
			} else { // Memcached has one timeout, the largest
				o.DialTimeout, o.WriteTimeout = time.Second, time.Second
			}
			c, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			_, err = c.GetMulti(context.Background(), numberedKeys("silent", 200))
			took := time.Since(start)
			if ne := nodeErrors(err); len(ne) != len(nodes) {
				t.Fatalf("GetMulti: %v; want a NodeError for each of the %d nodes", err, len(nodes))
			}
			var nerr net.Error
			if !errors.As(err, &nerr) || !nerr.Timeout() {
				t.Errorf("GetMulti: %v; want timeouts", err)
			}
			if took > 3*time.Second {
				t.Errorf("GetMulti over 4 silent nodes took %v: the reads waited in turn", took)
			}
		})
	}
}

// TestRawLoginLikeGoRedis: the raw connections log in where go-redis's do
// and refuse where they refuse, with the same kinds of error: a password
// for a server that has none (as while requirepass is rolled out: clients
// first), an ACL user who may not SELECT, a server that answers the login
// with an error that is not a refusal.
func TestRawLoginLikeGoRedis(t *testing.T) {
	ctx := context.Background()
	open := testserver.Redis(t, 1)
	c := secureClient(t, Options{Nodes: secureNodes(open), Password: testPassword})
	if err := c.Set(ctx, "open:1", []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if hits, err := c.GetMulti(ctx, []string{"open:1", "open:2"}); err != nil || len(hits) != 1 {
		t.Fatalf("GetMulti with a password, on a server without one = %q, %v; want a hit, as Get", hits, err)
	}

	adm := redis.NewClient(&redis.Options{Addr: open[0].Addr})
	defer adm.Close()
	if err := adm.Do(ctx, "ACL", "SETUSER", "nosel", "on", ">"+testACLSecret, "~*", "+@all", "-select").Err(); err != nil {
		t.Fatal(err)
	}
	nosel := secureClient(t, Options{Nodes: secureNodes(open), Username: "nosel", Password: testACLSecret, DB: 1})
	_, getErr := nosel.Get(ctx, "k")
	_, multiErr := nosel.GetMulti(ctx, []string{"k"})
	for op, err := range map[string]error{"Get": getErr, "GetMulti": multiErr} {
		if !errors.Is(err, ErrNoPerm) || errors.Is(err, ErrAuth) {
			t.Errorf("%s as a user who may not SELECT: %v; want ErrNoPerm", op, err)
		}
	}

	// A server full up: an error reply to the login, then the connection closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("-ERR max number of clients reached\r\n"))
			conn.Close()
		}
	}()
	full := secureClient(t, Options{Nodes: []ring.Node{{Addr: l.Addr().String()}}, Password: testPassword})
	if _, err := full.GetMulti(ctx, []string{"k"}); err == nil || errors.Is(err, ErrAuth) {
		t.Errorf("GetMulti on a server full up: %v; want an error that is not ErrAuth", err)
	}
}

// TestRawRefusedCertificateWithLogin: a refused client certificate is
// ErrAuth also when the first write on a connection is the login's, and
// never marks the node down.
func TestRawRefusedCertificateWithLogin(t *testing.T) {
	ca := testserver.NewCA(t, "mtlslogin")
	sec := testserver.Security{TLS: ca.Issue("server"), ClientCA: ca, Password: testPassword}
	nodes := secureNodes(testserver.SecureRedis(t, 1, sec))
	c := secureClient(t, Options{Nodes: nodes, TLSConfig: ca.ClientConfig(), Password: testPassword, DB: 3, FailureThreshold: 3})
	for i := range 20 {
		if _, err := c.GetMulti(context.Background(), []string{"a"}); !errors.Is(err, ErrAuth) {
			t.Fatalf("GetMulti %d without a client certificate: %v; want ErrAuth", i, logErr(t, "GetMulti", err))
		}
	}
	if h := c.Health()[0]; h.Down || h.Downs != 0 {
		t.Errorf("health after refused certificates: %+v; want never down", h)
	}
}

// TestRawPoolSize: 64 callers of GetMulti on a client with PoolSize 2
// open no more than 2 connections, go-redis's and the multi-gets' own
// together.
func TestRawPoolSize(t *testing.T) {
	s := testserver.Redis(t, 1)
	ctx := context.Background()
	adm := redis.NewClient(&redis.Options{Addr: s[0].Addr})
	defer adm.Close()
	opened := func() int {
		for _, l := range strings.Split(adm.Info(ctx, "stats").Val(), "\r\n") {
			if v, ok := strings.CutPrefix(l, "total_connections_received:"); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		t.Fatal("no total_connections_received in INFO")
		return 0
	}
	c, err := New(Options{Nodes: []ring.Node{{Name: "a", Addr: s[0].Addr}}, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := numberedKeys("ps", 50)
	before := opened()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 20 {
				if _, err := c.GetMulti(ctx, keys); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := opened() - before; n > 2 {
		t.Errorf("64 callers with PoolSize 2 opened %d connections; want at most 2\n%s", n, adm.ClientList(ctx).Val())
	}
}

// TestRawBinaryValues: values of every size around the buffers' edges,
// with CR LF and NUL inside, and keys with spaces, CR LF and NUL, asked
// for twice, come back whole.
func TestRawBinaryValues(t *testing.T) {
	s := testserver.Redis(t, 2)
	c := secureClient(t, Options{Nodes: secureNodes(s)})
	ctx := context.Background()
	want := map[string][]byte{}
	keys := []string{"missing"}
	for i, size := range []int{0, 1, 4094, 4095, 4096, 4097, 65534, 65536, 70000, 5 << 20} {
		v := make([]byte, size)
		for j := range v {
			v[j] = "\r\n\x00abc"[(j+i)%6]
		}
		k := fmt.Sprintf("bin %d \r\n\x00key", size)
		want[k] = v
		keys = append(keys, k, k)
		if err := c.Set(ctx, k, v, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	hits, err := c.GetMulti(ctx, keys)
	if err != nil || len(hits) != len(want) {
		t.Fatalf("GetMulti: %d hits, %v; want %d", len(hits), err, len(want))
	}
	for k, v := range want {
		if string(hits[k]) != string(v) {
			t.Errorf("%q: %d bytes back, want %d, or different", k, len(hits[k]), len(v))
		}
	}
}

// TestRawDialsAtOnce: a GetMulti that must dial its nodes dials them at
// once: four nodes whose dials hang (a TLS handshake to listeners that
// never answer it) cost about one DialTimeout, not four. (As in
// TestRawSilentNodes, the bound tells the two apart.)
func TestRawDialsAtOnce(t *testing.T) {
	for _, backend := range []Backend{Redis, Memcached} {
		t.Run(backend.String(), func(t *testing.T) {
			var nodes []ring.Node
			for i := range 4 {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() }) // accepted by the kernel, never answered
				nodes = append(nodes, ring.Node{Name: fmt.Sprintf("n%d", i), Addr: ln.Addr().String()})
			}
			c, err := New(Options{Backend: backend, Nodes: nodes, FailureThreshold: -1,
				DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
				TLSConfig: &tls.Config{InsecureSkipVerify: true}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			_, err = c.GetMulti(t.Context(), numberedKeys("hang", 100))
			took := time.Since(start)
			if ne := nodeErrors(err); len(ne) != len(nodes) {
				t.Fatalf("GetMulti: %v; want a NodeError for each of the %d nodes", err, len(nodes))
			}
			if took > 3*time.Second {
				t.Errorf("GetMulti over 4 nodes whose dials hang took %v: the dials ran in turn", took)
			}
		})
	}
}

// TestRawLargeAnswerBehindStall: a node whose answer does not fit the
// sockets' buffers, read after a stalled node's, is not failed nor blamed:
// its server, held back by flow control while the client waited, sends the
// rest once the client reads, and each read that brings bytes gives the
// answer more time.
func TestRawLargeAnswerBehindStall(t *testing.T) {
	for _, kind := range []string{"memcached", "redis-server"} {
		t.Run(kind, func(t *testing.T) {
			fc := newFaultCluster(t, kind, 2, Options{FailureThreshold: 100, MaxValueSize: 1 << 20})
			c := fc.c
			stalled, healthy := fc.servers[0].Addr, fc.servers[1].Addr
			keys := keysOn(c, stalled, "stall-first:", 1) // read first
			big := keysOn(c, healthy, "big:", 48)
			keys = append(keys, big...)
			items := map[string][]byte{}
			v := bytes.Repeat([]byte("x"), 512<<10) // 24 MiB from the healthy node
			for _, k := range big {
				items[k] = v
			}
			if err := c.SetMulti(t.Context(), items, 0); err != nil {
				t.Fatal(err)
			}
			resume := paused(t, fc.servers[0])
			defer resume()
			got, err := c.GetMulti(t.Context(), keys)
			for _, ne := range nodeErrors(err) {
				if ne.Node.Addr == healthy {
					t.Errorf("the healthy node failed: %v", ne)
				}
			}
			if len(got) != len(big) {
				t.Errorf("%d hits; want the healthy node's %d", len(got), len(big))
			}
			if h := healthOf(t, c, healthy); h.Failures != 0 {
				t.Errorf("healthy node %s counted %d failures: %+v", healthy, h.Failures, h)
			}
		})
	}
}
