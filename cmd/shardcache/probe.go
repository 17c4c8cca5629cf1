package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/client"
)

// probeTimeout bounds the exchange with one server.
const probeTimeout = 2 * time.Second

// speaks tells which protocol the server at addr answers in: it sends
// "version\r\n", which Memcached answers "VERSION 1.6.21" (or, before a
// login, CLIENT_ERROR) and Redis with an error reply, "-ERR unknown
// command" (or "-NOAUTH"). ok is false when the answer says neither, or
// there is none: a server down, a TLS handshake that fails, a proxy that
// closes the connection. The command's own run then reports what is wrong.
func speaks(ctx context.Context, addr string, tlsConf *tls.Config) (b client.Backend, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(deadline)
	}
	if tlsConf != nil {
		conf := tlsConf.Clone()
		if conf.ServerName == "" {
			conf.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(c, conf)
		if tc.HandshakeContext(ctx) != nil {
			return 0, false
		}
		c = tc
	}
	if _, err := c.Write([]byte("version\r\n")); err != nil {
		return 0, false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0, false
	}
	switch {
	case strings.HasPrefix(line, "VERSION "), strings.HasPrefix(line, "CLIENT_ERROR"),
		strings.HasPrefix(line, "SERVER_ERROR"), line == "ERROR\r\n":
		return client.Memcached, true
	case strings.HasPrefix(line, "-"):
		return client.Redis, true
	}
	return 0, false
}

// server is an address to probe and how the command line names it.
type server struct {
	addr, name string
}

// checkBackend probes every server, at once, and refuses a command line
// whose servers speak another protocol than want: a Redis server given as
// Memcached fails later with an error about the protocol (an unparsable
// reply, a missing lru_crawler) that does not say what to change. fix says
// what to give instead, such as "--backend redis".
func checkBackend(ctx context.Context, want client.Backend, servers []server, tlsConf *tls.Config, fix func(client.Backend) string) error {
	other := make([]client.Backend, len(servers))
	found := make([]bool, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { other[i], found[i] = speaks(ctx, s.addr, tlsConf) })
	}
	wg.Wait()
	var wrong []string
	var got client.Backend
	for i, s := range servers {
		if found[i] && other[i] != want {
			wrong, got = append(wrong, s.name), other[i]
		}
	}
	switch len(wrong) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: this server speaks %s, not %s: give %s", wrong[0], protocolName(got), protocolName(want), fix(got))
	}
	return fmt.Errorf("%s: these servers speak %s, not %s: give %s",
		strings.Join(wrong, ", "), protocolName(got), protocolName(want), fix(got))
}

// protocolName is a backend's name as its project spells it.
func protocolName(b client.Backend) string {
	if b == client.Memcached {
		return "Memcached"
	}
	return "Redis"
}
