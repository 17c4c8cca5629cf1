package client

import (
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
)

// Errors of logging in and of access control. Neither means that the node is
// down: the node answered, and refused. A node health policy (breaker) must
// not count them as connection failures, since retrying elsewhere or later
// cannot fix a configuration; they are returned to the caller, wrapped in a
// *NodeError like any other failure.
var (
	// ErrAuth means a node refused the client's credentials (a wrong
	// password or user, or none where one is required), or a TLS handshake
	// failed on what the certificates say (a server certificate that does
	// not verify, a client certificate refused, a server that does not speak
	// TLS). The wrapped cause says which.
	ErrAuth = node.ErrAuth
	// ErrNoPerm means a Redis ACL user may not run that command or touch that
	// key (Redis's NOPERM).
	ErrNoPerm = node.ErrNoPerm
)

// Credentials are how the client logs in to one node and protects its
// connections. Options holds those of every node; Options.NodeCredentials
// may change them per node.
type Credentials struct {
	// Username is the Redis ACL user (empty: Redis's "default"), or the
	// Memcached user of its ASCII authentication (memcached -Y).
	Username string
	// Password is the Redis password (ACL or requirepass), or the Memcached
	// user's. Empty: no login.
	Password string
	// DB is the Redis database to SELECT; Memcached has only 0.
	DB int
	// TLSConfig, when set, makes every connection TLS. An empty ServerName
	// becomes the host of the node's address.
	TLSConfig *tls.Config
}

// redacted stands for a secret in printed options.
const redacted = "[redacted]"

// plainCredentials is Credentials without its Format method.
type plainCredentials Credentials

// Format prints c with its password redacted, whatever the verb, so that a
// logged configuration shows no secret. The TLS configuration, which may
// hold private keys, prints as whether it is set.
func (c Credentials) Format(f fmt.State, verb rune) {
	if c.Password != "" {
		c.Password = redacted
	}
	tlsSet := c.TLSConfig != nil
	c.TLSConfig = nil
	fmt.Fprintf(f, fmt.FormatString(f, verb), plainCredentials(c))
	if tlsSet {
		fmt.Fprint(f, " (TLS)")
	}
}

// plainOptions is Options without its Format method.
type plainOptions Options

// Format prints o with its password redacted, whatever the verb (see
// Credentials.Format).
func (o Options) Format(f fmt.State, verb rune) {
	if o.Password != "" {
		o.Password = redacted
	}
	tlsSet := o.TLSConfig != nil
	o.TLSConfig = nil
	fmt.Fprintf(f, fmt.FormatString(f, verb), plainOptions(o))
	if tlsSet {
		fmt.Fprint(f, " (TLS)")
	}
}

// credentials returns node n's credentials: the options', changed by
// NodeCredentials when set, and checked for the backend.
func (o *Options) credentials(n ring.Node) (Credentials, error) {
	c := Credentials{Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig}
	if o.NodeCredentials != nil {
		c = o.NodeCredentials(n, c)
	}
	switch {
	case c.DB < 0:
		return c, fmt.Errorf("%w: node %s: DB %d", ErrBadOptions, n.Addr, c.DB)
	case o.Backend == Memcached && c.DB != 0:
		return c, fmt.Errorf("%w: node %s: DB %d: Memcached has no databases", ErrBadOptions, n.Addr, c.DB)
	case o.Backend == Memcached && (c.Username == "") != (c.Password == ""):
		return c, fmt.Errorf("%w: node %s: Memcached authentication needs both a Username and a Password", ErrBadOptions, n.Addr)
	case o.Backend == Memcached && strings.ContainsAny(c.Username, " \r\n"):
		return c, fmt.Errorf("%w: node %s: Memcached user name with a space or line break", ErrBadOptions, n.Addr)
	case o.Backend == Memcached && strings.ContainsAny(c.Password, "\r\n"):
		return c, fmt.Errorf("%w: node %s: Memcached password with a line break", ErrBadOptions, n.Addr)
	}
	return c, nil
}
