package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/shardcache/shardcache/ring"
)

// nodeDialer opens the connections of one node, for either backend: TCP
// bounded by DialTimeout and the context, then TLS when the node's
// credentials have a TLSConfig, then, for Memcached with a Username, its
// ASCII authentication. go-redis and gomemcache dial through it, and so does
// anything else in the package that needs a raw connection to a node.
//
// A Redis connection is not logged in here: go-redis runs its own handshake
// (HELLO, or AUTH, and SELECT) on each connection it makes, with the
// node's Username, Password and DB.
type nodeDialer struct {
	backend Backend
	node    ring.Node
	timeout time.Duration
	creds   Credentials
	tls     *tls.Config // creds.TLSConfig with ServerName set; nil without TLS
}

// rawConn opens a connection to node n with the client's timeouts,
// credentials and TLS, outside the node's pool: for the commands that
// go-redis and gomemcache do not send (the caller closes it). A Memcached
// connection is logged in; a Redis one is not (send AUTH with the node's
// credentials, as go-redis does).
func (c *Client) rawConn(ctx context.Context, n ring.Node) (net.Conn, error) {
	d, err := c.opts.newNodeDialer(n)
	if err != nil {
		return nil, err
	}
	return d.dial(ctx, "tcp", n.Addr)
}

// newNodeDialer returns the dialer of node n with the client's options.
func (o *Options) newNodeDialer(n ring.Node) (*nodeDialer, error) {
	creds, err := o.credentials(n)
	if err != nil {
		return nil, err
	}
	d := &nodeDialer{backend: o.Backend, node: n, timeout: o.DialTimeout, creds: creds}
	if creds.TLSConfig != nil {
		d.tls = creds.TLSConfig.Clone()
		if d.tls.RootCAs == nil && !d.tls.InsecureSkipVerify {
			// The system's roots, loaded now rather than by the first
			// handshake, which would spend DialTimeout reading them (a
			// fraction of a second, more under -race).
			if roots, err := x509.SystemCertPool(); err == nil {
				d.tls.RootCAs = roots
			}
		}
		if d.tls.ServerName == "" && !d.tls.InsecureSkipVerify {
			host, _, err := net.SplitHostPort(n.Addr)
			if err != nil {
				return nil, fmt.Errorf("%w: node %s: TLS server name: %w", ErrBadOptions, n.Addr, err)
			}
			d.tls.ServerName = host
		}
	}
	return d, nil
}

// dial connects to the node; network and addr are ignored (they are the
// node's), so that it can serve as go-redis's Dialer and gomemcache's
// DialContext. A refused TLS handshake or login is ErrAuth.
func (d *nodeDialer) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", d.node.Addr)
	if err != nil {
		return nil, err
	}
	if d.tls != nil {
		tc := tls.Client(conn, d.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, authErr(fmt.Errorf("TLS handshake: %w", err))
		}
		conn = tc
	}
	if d.backend == Memcached && d.creds.Username != "" {
		if err := d.mcLogin(ctx, conn); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}

// mcLogin runs Memcached's ASCII authentication (memcached -Y): a "set" of
// any key whose value is "user password", answered STORED when accepted.
// A server without authentication stores the item instead: its key is one
// of ours and its expiry is in the past, so that nothing stays behind.
func (d *nodeDialer) mcLogin(ctx context.Context, conn net.Conn) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	token := d.creds.Username + " " + d.creds.Password
	msg := "set shardcache:login 0 -1 " + strconv.Itoa(len(token)) + "\r\n" + token + "\r\n"
	if _, err := conn.Write([]byte(msg)); err != nil {
		return err
	}
	// One line, read a byte at a time so that nothing after it is consumed.
	var line []byte
	b := make([]byte, 1)
	for len(line) < 256 {
		if _, err := conn.Read(b); err != nil {
			return fmt.Errorf("memcached login: %w", err)
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	if reply := string(line); reply != "STORED\r" {
		// The reply is quoted without the password, should a server echo it.
		reply = strings.ReplaceAll(reply, d.creds.Password, redacted)
		return fmt.Errorf("%w: memcached refused user %q: %q", ErrAuth, d.creds.Username, reply)
	}
	return nil
}
