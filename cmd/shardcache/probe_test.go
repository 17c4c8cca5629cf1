package main

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
)

// TestSpeaks probes real servers, plain, behind a login and over TLS, and
// things that are no cache server: each server is told by its protocol,
// and nothing else is taken for one.
func TestSpeaks(t *testing.T) {
	ca := testserver.NewCA(t, "probe")
	redis := testserver.Redis(t, 1)[0]
	memcached := testserver.Memcached(t, 1)[0]
	redisAuth := testserver.SecureRedis(t, 1, testserver.Security{Password: cliAdminSecret})[0]
	redisTLS := testserver.SecureRedis(t, 1, testserver.Security{TLS: ca.Issue("server")})[0]
	memcachedAuth := testserver.SecureMemcached(t, 1, testserver.Security{Users: map[string]string{"cache": cliUserSecret}})[0]

	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, then says nothing sensible
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	for _, tc := range []struct {
		name string
		addr string
		tls  *tls.Config
		want client.Backend
		ok   bool
	}{
		{"redis", redis.Addr, nil, client.Redis, true},
		{"memcached", memcached.Addr, nil, client.Memcached, true},
		{"redis with a password", redisAuth.Addr, nil, client.Redis, true},
		{"redis over TLS", redisTLS.Addr, ca.ClientConfig(), client.Redis, true},
		{"memcached with users", memcachedAuth.Addr, nil, client.Memcached, true},
		{"redis over TLS, probed without", redisTLS.Addr, nil, 0, false},
		{"an HTTP server", silent.Addr().String(), nil, 0, false},
		{"nothing listening", closedAddr, nil, 0, false},
	} {
		got, ok := speaks(t.Context(), tc.addr, tc.tls)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: speaks %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestBackendMismatch points each command at servers of the other
// protocol: it refuses, naming the mismatch and what to give instead, and
// says nothing of Memcached versions.
func TestBackendMismatch(t *testing.T) {
	redis := testserver.Addrs(testserver.Redis(t, 2))
	memcached := testserver.Addrs(testserver.Memcached(t, 2))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sweep", "--quiet", "--backend", "memcached", "--from", "a=" + redis[0], "--to", "a=" + redis[0] + ",b=" + redis[1]},
			"shardcache sweep: --backend memcached: node a (" + redis[0] + "), node b (" + redis[1] + "): these servers speak Redis, not Memcached: give --backend redis\n"},
		{[]string{"sweep", "--quiet", "--from", memcached[0], "--to", memcached[0] + "," + redis[1]},
			"shardcache sweep: --backend redis: " + memcached[0] + ": this server speaks Memcached, not Redis: give --backend memcached\n"},
		{append(realSimArgs("--memcached", redis), "--from", "a=h:1,b=h:2", "--to", "a=h:1"),
			"shardcache simulate: --memcached " + redis[0] + ", " + redis[1] + ": these servers speak Redis, not Memcached: give the servers as --redis\n"},
		{append(realSimArgs("--redis", memcached[:1]), "--from", "a=h:1", "--to", "a=h:1"),
			"shardcache simulate: --redis " + memcached[0] + ": this server speaks Memcached, not Redis: give the servers as --memcached\n"},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, tc.want) || strings.Contains(errOut, "1.4.31") {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and:\n%s", tc.args, code, out, errOut, tc.want)
		}
	}
	// The right backend passes the probe.
	if code, _, errOut := runCmd(t, "sweep", "--quiet", "--backend", "memcached", "--from", memcached[0], "--to", strings.Join(memcached, ",")); code != exitOK {
		t.Errorf("sweep of memcached servers: exit %d: %s", code, errOut)
	}
}

// realSimArgs is a tiny simulate run on real servers, without its lists.
func realSimArgs(flag string, servers []string) []string {
	return []string{"simulate", "--quiet", flag, strings.Join(servers, ","), "--keys", "10", "--requests", "5",
		"--steps", "2", "--reshard-at", "1", "--real-step", "50ms", "--modes", "ring"}
}
