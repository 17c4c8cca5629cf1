package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrTLS marks a TLS handshake that failed on what the certificates say:
// no retry can fix it.
var ErrTLS = errors.New("shardcache/wire: TLS handshake refused")

// Dialer opens the connections of one node: TCP bounded by Timeout and the
// context, then TLS when TLS is set, then the protocol's Login when set.
// It is the one place where a node is connected to: the pools dial
// through it, and so does go-redis (its Dialer).
type Dialer struct {
	Addr    string
	Timeout time.Duration // default DefaultTimeout
	// TLS, when set, makes every connection TLS; its ServerName should be
	// set (NewTLSConfig does).
	TLS *tls.Config
	// Login runs on each new connection, after TLS: a protocol's
	// authentication. An error closes the connection.
	Login func(ctx context.Context, conn net.Conn) error
}

// Dial connects to the node; network and addr are ignored (they are the
// node's), so that it can serve as go-redis's Dialer too. A refused TLS
// handshake wraps ErrTLS.
func (d *Dialer) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", d.Addr)
	if err != nil {
		return nil, err
	}
	if d.TLS != nil {
		tc := tls.Client(conn, d.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			if TLSFailure(err) {
				return nil, fmt.Errorf("%w: %w", ErrTLS, err)
			}
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		conn = &tlsConn{Conn: tc}
	}
	if d.Login != nil {
		if err := d.Login(ctx, conn); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}

// NewTLSConfig returns a copy of cfg ready to dial addr: the system's
// roots loaded now (rather than by the first handshake, which would spend
// its dial timeout reading them), and ServerName the host of addr when
// empty.
func NewTLSConfig(cfg *tls.Config, addr string) (*tls.Config, error) {
	if cfg == nil {
		return nil, nil
	}
	c := cfg.Clone()
	if c.RootCAs == nil && !c.InsecureSkipVerify {
		if roots, err := x509.SystemCertPool(); err == nil {
			c.RootCAs = roots
		}
	}
	if c.ServerName == "" && !c.InsecureSkipVerify {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("TLS server name of %q: %w", addr, err)
		}
		c.ServerName = host
	}
	return c, nil
}

// TLSFailure reports whether err is a TLS failure that no retry can fix:
// certificate verification, an alert from the peer (such as a refused
// client certificate), or a peer that does not speak TLS. A timeout or a
// reset during the handshake is a connection failure instead.
func TLSFailure(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
		op       *net.OpError
	)
	if errors.Is(err, ErrTLS) {
		return true
	}
	if errors.As(err, &op) && op.Op == "remote error" { // crypto/tls's wrapping of a peer's alert
		return true
	}
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &header)
}
