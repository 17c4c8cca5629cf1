package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

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
	ErrAuth = errors.New("shardcache: authentication failed")
	// ErrNoPerm means a Redis ACL user may not run that command or touch that
	// key (Redis's NOPERM).
	ErrNoPerm = errors.New("shardcache: no permission")
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

// authErr marks err with ErrAuth or ErrNoPerm when it is a refusal of the
// client's credentials or a TLS failure; other errors come back as they are.
// It is called on failures only.
func authErr(err error) error {
	switch {
	case errors.Is(err, ErrAuth) || errors.Is(err, ErrNoPerm):
		return err
	case strings.Contains(err.Error(), "CLIENT_ERROR unauthenticated"):
		// Memcached -Y, to a client that did not log in.
		return fmt.Errorf("%w: Memcached requires authentication: %w", ErrAuth, err)
	case redis.IsAuthError(err):
		return fmt.Errorf("%w: %w", ErrAuth, err)
	case redis.IsPermissionError(err):
		return fmt.Errorf("%w: %w", ErrNoPerm, err)
	case errors.As(err, new(*redactedError)):
		// Only the login (HELLO, AUTH) carries the password: a reply that
		// quotes it refused the login.
		return fmt.Errorf("%w: login refused: %w", ErrAuth, err)
	case tlsFailure(err):
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	return err
}

// tlsFailure reports whether err is a TLS failure that no retry can fix:
// certificate verification, an alert from the peer (such as a refused
// client certificate), or a peer that does not speak TLS. A timeout or a
// reset during the handshake is a connection failure instead.
func tlsFailure(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
		op       *net.OpError
	)
	if errors.As(err, &op) && op.Op == "remote error" { // crypto/tls's wrapping of a peer's alert
		return true
	}
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &header)
}

// redactedError is an error whose text had a secret in it, with the secret
// replaced. errors.Is sees through it to the original; nothing else does
// (no Unwrap, no As), so that no error reachable from it prints the secret.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string        { return e.msg }
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }

// redact returns err with every occurrence of secret in its text replaced,
// or err itself when its text has none.
func redact(err error, secret string) error {
	if err == nil || secret == "" {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, secret) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(msg, secret, redacted), err: err}
}

// redactHook is a go-redis hook that takes a node's password out of the
// errors of its commands. Redis never echoes a password, but a server or
// proxy that does not know HELLO or AUTH answers "unknown command ..., with
// args beginning with:" and the arguments, the password among them; go-redis
// returns that reply as the error of the command that made the connection.
type redactHook struct{ secret string }

func (redactHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redactHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && err != redis.Nil {
			if r := redact(err, h.secret); r != err {
				cmd.SetErr(r)
				return r
			}
		}
		return err
	}
}

func (h redactHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil {
			return nil
		}
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil && e != redis.Nil {
				cmd.SetErr(redact(e, h.secret))
			}
		}
		return redact(err, h.secret)
	}
}
