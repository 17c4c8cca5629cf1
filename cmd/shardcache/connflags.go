package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/shardcache/shardcache/client"
)

// passwordEnv is the environment variable that holds the servers' password.
// There is no password flag: a command line shows in ps.
const passwordEnv = "SHARDCACHE_REDIS_PASSWORD"

// connFlags are the flags that say how to log in to real servers and
// protect the connections, shared by every command that connects.
type connFlags struct {
	username     string
	passwordFile string
	tls          bool
	ca           string
	cert, key    string
	insecure     bool
}

// addConnFlags defines the connection flags on fs.
func addConnFlags(fs *flag.FlagSet) *connFlags {
	f := &connFlags{}
	fs.StringVar(&f.username, "username", "", "log in to the servers as this Redis ACL `user`, or Memcached user (memcached -Y); the password comes from $"+passwordEnv+" or --password-file")
	fs.StringVar(&f.passwordFile, "password-file", "", "read the servers' password from `file` (its first line); without it, from $"+passwordEnv+" when set. There is no password flag: command lines show in ps")
	fs.BoolVar(&f.tls, "tls", false, "connect to the servers with TLS, verifying their certificates against the system's roots (or --tls-ca)")
	fs.StringVar(&f.ca, "tls-ca", "", "verify the servers' certificates against the CA certificates in PEM `file` (implies --tls)")
	fs.StringVar(&f.cert, "tls-cert", "", "present the client certificate in PEM `file`, with --tls-key (implies --tls)")
	fs.StringVar(&f.key, "tls-key", "", "the private key of --tls-cert, in PEM `file`")
	fs.BoolVar(&f.insecure, "insecure-skip-verify", false, "TLS without verifying the servers' certificates: for tests only, anyone on the path can read the traffic and the password (implies --tls)")
	return f
}

// given reports whether any connection flag is on the command line (the
// password variable may be set for other commands: it does not count).
func (f *connFlags) given() bool {
	return f.username != "" || f.passwordFile != "" || f.tlsWanted()
}

func (f *connFlags) tlsWanted() bool {
	return f.tls || f.ca != "" || f.cert != "" || f.key != "" || f.insecure
}

// connection is the connection flags resolved: files read, password found.
type connection struct {
	username, password string
	tls                *tls.Config
}

// apply sets the connection's credentials and TLS on opts.
func (c *connection) apply(opts *client.Options) {
	opts.Username, opts.Password, opts.TLSConfig = c.username, c.password, c.tls
}

// resolve reads the password (from --password-file, else from the
// environment through getenv) and the TLS files. It warns on stderr about
// --insecure-skip-verify. Its errors never quote the password.
func (f *connFlags) resolve(getenv func(string) string, stderr io.Writer) (*connection, error) {
	c := &connection{username: f.username, password: getenv(passwordEnv)}
	if f.passwordFile != "" {
		b, err := os.ReadFile(f.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--password-file: %w", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if c.password = strings.TrimSuffix(line, "\r"); c.password == "" {
			return nil, fmt.Errorf("--password-file %s: empty first line", f.passwordFile)
		}
	}
	if !f.tlsWanted() {
		return c, nil
	}
	c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		c.tls.RootCAs = x509.NewCertPool()
		if !c.tls.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", f.ca)
		}
	}
	if (f.cert == "") != (f.key == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if f.cert != "" {
		cert, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
		}
		c.tls.Certificates = []tls.Certificate{cert}
	}
	if f.insecure {
		c.tls.InsecureSkipVerify = true
		fmt.Fprintln(stderr, "shardcache: WARNING: --insecure-skip-verify: the servers' certificates are not verified; anyone on the path can impersonate them and read the traffic, password included")
	}
	return c, nil
}
