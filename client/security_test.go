package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// The secrets of the security tests. TestSecretsNeverLeak greps everything
// the TestSecure tests print for them.
const (
	testPassword  = "Pw-9f3a1c-requirepass"
	testACLSecret = "Pw-77d2e0-acl-user"
	testMCSecret  = "Pw-41bb8e-memcached"
)

var testSecrets = []string{testPassword, testACLSecret, testMCSecret}

// logErr logs err in every form a program might print it, so that
// TestSecretsNeverLeak sees them all, and returns it.
func logErr(t testing.TB, what string, err error) error {
	t.Helper()
	t.Logf("%s: %v", what, err)
	t.Logf("%s (%%+v): %+v", what, err)
	t.Logf("%s (%%#v): %#v", what, err)
	for _, ne := range nodeErrors(err) {
		t.Logf("%s: node error %v on %v, cause %v", what, ne, ne.Node, ne.Err)
	}
	return err
}

// secureNodes names the servers n0, n1, ...
func secureNodes(servers []*testserver.Server) []ring.Node {
	nodes := make([]ring.Node, len(servers))
	for i, s := range servers {
		nodes[i] = ring.Node{Name: fmt.Sprintf("n%d", i), Addr: s.Addr}
	}
	return nodes
}

// secureClient opens a client, failing the test if New does.
func secureClient(t testing.TB, opts Options) *Client {
	t.Helper()
	opts.ReadTimeout, opts.WriteTimeout = 5*time.Second, 5*time.Second
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 5 * time.Second // a TLS handshake under -race on a loaded machine
	}
	c, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", logErr(t, "New", err))
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip checks Set, Get and GetMulti of keys with prefix through c.
func roundTrip(t *testing.T, c *Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	keys := numberedKeys(prefix, 50)
	for _, k := range keys {
		if err := c.Set(ctx, k, []byte("v:"+k), time.Hour); err != nil {
			t.Fatalf("Set(%q): %v", k, logErr(t, "Set", err))
		}
	}
	v, err := c.Get(ctx, keys[0])
	if err != nil || string(v) != "v:"+keys[0] {
		t.Fatalf("Get(%q) = %q, %v", keys[0], v, logErr(t, "Get", err))
	}
	hits, err := c.GetMulti(ctx, keys)
	if err != nil || len(hits) != len(keys) {
		t.Fatalf("GetMulti: %d of %d hits, %v", len(hits), len(keys), logErr(t, "GetMulti", err))
	}
}

// mustFailAuth checks that a Get and a GetMulti (on Redis, over the raw
// connections: redis_raw.go) through c fail with ErrAuth in a *NodeError,
// and that their text says why and quotes no secret.
func mustFailAuth(t *testing.T, c *Client, key, why string) {
	t.Helper()
	_, getErr := c.Get(context.Background(), key)
	_, multiErr := c.GetMulti(context.Background(), []string{key})
	for op, err := range map[string]error{"Get": getErr, "GetMulti": multiErr} {
		logErr(t, op+" with bad credentials", err)
		if !errors.Is(err, ErrAuth) || len(nodeErrors(err)) != 1 {
			t.Fatalf("%s: %v, want ErrAuth in a NodeError", op, err)
		}
		if !strings.Contains(err.Error(), why) {
			t.Fatalf("%s: %q does not say %q", op, err, why)
		}
		for _, secret := range []string{testPassword, testACLSecret, testMCSecret} {
			if strings.Contains(fmt.Sprintf("%v %+v", err, err), secret) {
				t.Fatalf("%s: %q quotes a secret", op, err)
			}
		}
	}
}

// TestSecureRedisPassword checks requirepass: the right password works, a
// wrong one and none fail with ErrAuth; DB selects a database.
func TestSecureRedisPassword(t *testing.T) {
	nodes := secureNodes(testserver.SecureRedis(t, 2, testserver.Security{Password: testPassword}))
	c := secureClient(t, Options{Nodes: nodes, Password: testPassword, DialTimeout: 3 * time.Second})
	roundTrip(t, c, "pw")
	// The credentials come on top of the client's own go-redis settings.
	if o := c.Redis("pw:0").Options(); o.Password != testPassword || o.DialTimeout != 3*time.Second ||
		o.ReadTimeout != 5*time.Second || o.DialerRetries != 1 || o.MaxRetries != 0 || // go-redis reads MaxRetries -1 as 0: none
		!o.ContextTimeoutEnabled {
		t.Errorf("go-redis options: DialTimeout %v ReadTimeout %v DialerRetries %d MaxRetries %d ContextTimeoutEnabled %t",
			o.DialTimeout, o.ReadTimeout, o.DialerRetries, o.MaxRetries, o.ContextTimeoutEnabled)
	}
	// A NewRedisClient hook gets the same options, the password included.
	hooked := 0
	withHook := secureClient(t, Options{Nodes: nodes, Password: testPassword,
		NewRedisClient: func(n ring.Node, opt *redis.Options) *redis.Client {
			hooked++
			if opt.Password != testPassword || opt.Dialer == nil || opt.MaxRetries != -1 {
				t.Errorf("NewRedisClient(%s): Password %q, Dialer %v, MaxRetries %d; want the client's", n.Name, opt.Password, opt.Dialer != nil, opt.MaxRetries)
			}
			return redis.NewClient(opt)
		}})
	roundTrip(t, withHook, "pwhook")
	if hooked != len(nodes) {
		t.Errorf("NewRedisClient called %d times; want once per node", hooked)
	}
	mustFailAuth(t, secureClient(t, Options{Nodes: nodes, Password: testPassword + "x"}), "pw:1", "WRONGPASS")
	mustFailAuth(t, secureClient(t, Options{Nodes: nodes}), "pw:1", "NOAUTH")

	// DB selects a database, after the login.
	ctx := context.Background()
	db2 := secureClient(t, Options{Nodes: nodes, Password: testPassword, DB: 2})
	if err := db2.Set(ctx, "db:k", []byte("two"), time.Minute); err != nil {
		t.Fatal(logErr(t, "Set in DB 2", err))
	}
	mustGet(t, db2, "db:k", "two")
	mustMiss(t, secureClient(t, Options{Nodes: nodes, Password: testPassword}), "db:k")
	// GetMulti's raw connections select it too.
	if hits, err := db2.GetMulti(ctx, []string{"db:k"}); err != nil || string(hits["db:k"]) != "two" {
		t.Fatalf("GetMulti in DB 2 = %q, %v; want two", hits, logErr(t, "GetMulti in DB 2", err))
	}
	noDB := secureClient(t, Options{Nodes: nodes, Password: testPassword})
	if hits, err := noDB.GetMulti(ctx, []string{"db:k"}); err != nil || len(hits) != 0 {
		t.Fatalf("GetMulti in DB 0 = %q, %v; want a miss", hits, err)
	}
}

// TestSecureRedisACL checks an ACL user limited to cache:* keys: its keys
// work, another key is ErrNoPerm, a wrong password is ErrAuth.
func TestSecureRedisACL(t *testing.T) {
	nodes := secureNodes(testserver.SecureRedis(t, 2, testserver.Security{
		Password: testPassword,
		ACL:      []string{"cache on >" + testACLSecret + " ~cache:* +@all"},
	}))
	c := secureClient(t, Options{Nodes: nodes, Username: "cache", Password: testACLSecret})
	roundTrip(t, c, "cache:acl")
	ctx := context.Background()
	for name, op := range map[string]func() error{
		"Get":      func() error { _, err := c.Get(ctx, "other:1"); return err },
		"Set":      func() error { return c.Set(ctx, "other:1", []byte("x"), time.Minute) },
		"GetMulti": func() error { _, err := c.GetMulti(ctx, []string{"cache:acl:0", "other:1"}); return err },
	} {
		err := logErr(t, name+" outside the ACL", op())
		if !errors.Is(err, ErrNoPerm) || errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%s of a key outside ~cache:*: %v, want ErrNoPerm", name, err)
		}
		if ne := nodeErrors(err); len(ne) != 1 || !slices.Contains(ne[0].Keys, "other:1") {
			t.Errorf("%s: node errors %v, want one naming other:1", name, ne)
		}
	}
	mustFailAuth(t, secureClient(t, Options{Nodes: nodes, Username: "cache", Password: testPassword}), "cache:1", "WRONGPASS")
	mustFailAuth(t, secureClient(t, Options{Nodes: nodes, Username: "nobody", Password: testACLSecret}), "cache:1", "WRONGPASS")
}

// TestSecureNodeCredentials checks per-node credentials: two servers with
// different passwords, each node logged in with its own, including a node
// added by Reshard.
func TestSecureNodeCredentials(t *testing.T) {
	a := testserver.SecureRedis(t, 2, testserver.Security{Password: testPassword})
	b := testserver.SecureRedis(t, 1, testserver.Security{Password: testACLSecret})
	nodes := secureNodes(append(a, b...))
	perNode := func(n ring.Node, c Credentials) Credentials {
		if n.Addr == b[0].Addr {
			c.Password = testACLSecret
		}
		return c
	}
	c := secureClient(t, Options{Nodes: nodes[:2], Password: testPassword, NodeCredentials: perNode})
	roundTrip(t, c, "node")
	if err := c.Reshard(nodes, 0); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "node")
	key := keysOn(c, b[0].Addr, "on-b", 1)[0]
	if err := c.Set(context.Background(), key, []byte("x"), time.Minute); err != nil {
		t.Fatalf("Set on the node with its own password: %v", logErr(t, "Set", err))
	}
	// Without the override that node refuses the client.
	c2 := secureClient(t, Options{Nodes: nodes, Password: testPassword})
	mustFailAuth(t, c2, key, "WRONGPASS")
}

// TestSecureMemcachedAuth checks Memcached's ASCII authentication, over
// TLS, on every connection of the node's pool.
func TestSecureMemcachedAuth(t *testing.T) {
	ca := testserver.NewCA(t, "mcauth")
	servers := testserver.SecureMemcached(t, 2, testserver.Security{
		Users: map[string]string{"app": testMCSecret},
		TLS:   ca.Issue("server"),
	})
	nodes := secureNodes(servers)
	opts := Options{Backend: Memcached, Nodes: nodes, Username: "app", Password: testMCSecret, TLSConfig: ca.ClientConfig()}
	c := secureClient(t, opts)
	roundTrip(t, c, "mcauth")

	wrong := opts
	wrong.Password = "wrong"
	cw := secureClient(t, wrong)
	mustFailAuth(t, cw, "mcauth:1", "refused user")
	none := opts
	none.Username, none.Password = "", ""
	mustFailAuth(t, secureClient(t, none), "mcauth:1", "requires authentication")
}

// TestSecureTLS runs both backends over TLS: Get/Set/GetMulti, a full 8→6
// resharding, a process resuming it with MigrateFrom, nodes added back by a
// later Reshard, and a server certificate from an unknown CA refused.
func TestSecureTLS(t *testing.T) {
	ca := testserver.NewCA(t, "shardcache-test")
	sec := testserver.Security{TLS: ca.Issue("server")}
	for _, backend := range []Backend{Redis, Memcached} {
		t.Run(backend.String(), func(t *testing.T) {
			var servers []*testserver.Server
			if backend == Redis {
				servers = testserver.SecureRedis(t, 8, sec)
			} else {
				servers = testserver.SecureMemcached(t, 8, sec)
			}
			nodes := secureNodes(servers)
			from, to := nodes, nodes[:6]
			clock := newFakeClock()
			// 8 → 6 → 8: the two nodes come back holding keys.
			opts := Options{Backend: backend, Nodes: from, TLSConfig: ca.ClientConfig(), Now: clock.Now, SkipEmptyCheck: true}
			c := secureClient(t, opts)
			roundTrip(t, c, "tls")
			reshardOverTLS(t, c, clock, from, to)

			// A process started during the window resumes it: the old
			// placement's nodes are dialed with TLS too.
			resumed := opts
			resumed.Nodes = to
			resumed.MigrateFrom = &MigrateFrom{Nodes: from, Start: clock.Now(), Window: time.Hour}
			moved := dualKeys(t, "tls:resume", from, to, 20)
			old := secureClient(t, opts)
			setAll(t, old, moved, time.Hour)
			r := secureClient(t, resumed)
			if hits, err := r.GetMulti(context.Background(), moved); err != nil || len(hits) != len(moved) {
				t.Fatalf("MigrateFrom over TLS: %d of %d hits, %v", len(hits), len(moved), logErr(t, "GetMulti", err))
			}
			if st := r.Migration(); st.FallbackHits != int64(len(moved)) {
				t.Fatalf("MigrateFrom over TLS: %+v, want %d fallback hits", st, len(moved))
			}

			// After the window, the removed nodes come back through Reshard.
			clock.Advance(time.Hour)
			if err := c.Reshard(from, 0); err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c, "tls:back")
			if err := c.Set(context.Background(), keysOn(c, from[7].Addr, "tls:n7", 1)[0], []byte("x"), time.Minute); err != nil {
				t.Fatalf("Set on a node added back: %v", logErr(t, "Set", err))
			}

			// A server certificate from another CA is refused.
			stranger := testserver.NewCA(t, "stranger")
			bad := opts
			bad.TLSConfig = stranger.ClientConfig()
			mustFailAuth(t, secureClient(t, bad), "tls:0", "certificate")

			// So is a Memcached server that does not speak TLS: it answers
			// the handshake with an error line. A plaintext redis-server
			// waits for the rest of a command instead, and the handshake
			// times out, as with a node that is down.
			bad = opts
			bad.MigrateFrom = nil
			if backend == Memcached {
				bad.Nodes = secureNodes(testserver.Memcached(t, 1))
				mustFailAuth(t, secureClient(t, bad), "tls:0", "tls: first record does not look like a TLS handshake")
				return
			}
			bad.Nodes = secureNodes(testserver.Redis(t, 1))
			bad.DialTimeout = 200 * time.Millisecond
			_, err := secureClient(t, bad).Get(context.Background(), "tls:0")
			if logErr(t, "TLS to plaintext Redis", err); errors.Is(err, ErrAuth) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("TLS to a plaintext redis-server: %v, want a dial timeout", err)
			}
		})
	}
}

// reshardOverTLS writes keys on from, reshards to to for an hour, and checks
// that every key is read back, the moved ones from their old owner first.
func reshardOverTLS(t *testing.T, c *Client, clock *fakeClock, from, to []ring.Node) {
	t.Helper()
	ctx := context.Background()
	keys := numberedKeys("tls:reshard", 2000)
	setAll(t, c, keys, time.Hour)
	if err := c.Reshard(to, time.Hour); err != nil {
		t.Fatal(err)
	}
	moved := countMoved(t, keys, from, to)
	for _, k := range keys[:100] {
		if v, err := c.Get(ctx, k); err != nil || string(v) != "v:"+k {
			t.Fatalf("Get(%q) after the reshard = %q, %v", k, v, logErr(t, "Get", err))
		}
	}
	for chunk := range slices.Chunk(keys[100:], 500) {
		if hits, err := c.GetMulti(ctx, chunk); err != nil || len(hits) != len(chunk) {
			t.Fatalf("GetMulti after the reshard: %d of %d hits, %v", len(hits), len(chunk), logErr(t, "GetMulti", err))
		}
	}
	st := c.Migration()
	if st.FallbackHits != int64(moved) || st.Backfills != int64(moved) || st.FallbackMisses != 0 || st.FallbackErrors != 0 {
		t.Fatalf("8→6 over TLS, %d of %d keys moved: %+v", moved, len(keys), st)
	}
	t.Logf("8→6 over TLS: %d of %d keys moved, all read back", moved, len(keys))
}

// TestSecureClientCertificate checks a server that requires client
// certificates: with one the client works, without it fails with ErrAuth.
func TestSecureClientCertificate(t *testing.T) {
	ca := testserver.NewCA(t, "mtls")
	sec := testserver.Security{TLS: ca.Issue("server"), ClientCA: ca}
	nodes := secureNodes(testserver.SecureRedis(t, 1, sec))
	withCert := ca.ClientConfig()
	withCert.Certificates = []tls.Certificate{ca.Issue("client").TLS}
	roundTrip(t, secureClient(t, Options{Nodes: nodes, TLSConfig: withCert}), "mtls")
	mustFailAuth(t, secureClient(t, Options{Nodes: nodes, TLSConfig: ca.ClientConfig()}), "mtls:1", "certificate")
}

// TestSecureBadOptions checks the credentials New refuses.
func TestSecureBadOptions(t *testing.T) {
	nodes := []ring.Node{{Addr: "127.0.0.1:1"}}
	for name, opts := range map[string]Options{
		"memcached DB":          {Backend: Memcached, Nodes: nodes, DB: 1},
		"memcached no user":     {Backend: Memcached, Nodes: nodes, Password: testMCSecret},
		"memcached no password": {Backend: Memcached, Nodes: nodes, Username: "app"},
		"negative DB":           {Nodes: nodes, DB: -1},
		"per-node DB": {Nodes: nodes, NodeCredentials: func(_ ring.Node, c Credentials) Credentials {
			c.DB = -2
			return c
		}},
	} {
		c, err := New(opts)
		if !errors.Is(logErr(t, name, err), ErrBadOptions) {
			t.Errorf("%s: New = %v, want ErrBadOptions", name, err)
			if c != nil {
				c.Close()
			}
		}
	}
}

// TestSecureOptionsPrintRedacted checks that printing Options or Credentials
// in any format shows no password and no TLS keys.
func TestSecureOptionsPrintRedacted(t *testing.T) {
	ca := testserver.NewCA(t, "print")
	cfg := ca.ClientConfig()
	cfg.Certificates = []tls.Certificate{ca.Issue("client").TLS}
	opts := Options{Username: "cache", Password: testPassword, TLSConfig: cfg}
	creds := Credentials{Username: "cache", Password: testPassword, TLSConfig: cfg}
	type wrapper struct{ O Options }
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{opts, &opts, creds, &creds, wrapper{opts}} {
			s := fmt.Sprintf(format, v)
			t.Log(s)
			if strings.Contains(s, testPassword) || !strings.Contains(s, "cache") {
				t.Errorf("%s of %T = %s: want the user and no password", format, v, s)
			}
		}
	}
}

// TestSecretsNeverLeak runs the TestSecure tests again in a child process,
// verbose, and greps everything they print (test logs of every error in
// every format, go-redis's and the servers' output, panics) for the
// secrets.
func TestSecretsNeverLeak(t *testing.T) {
	if os.Getenv("SHARDCACHE_LEAK_CHILD") != "" {
		t.Skip("the child process runs the TestSecure tests only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecure", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "SHARDCACHE_LEAK_CHILD=1")
	testserver.LinkToParent(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := out.String()
	for _, s := range testSecrets {
		if i := strings.Index(text, s); i >= 0 {
			lo := max(0, strings.LastIndexByte(text[:i], '\n'))
			t.Errorf("secret %q printed by the TestSecure tests: %s", s, strings.TrimSpace(text[lo:min(len(text), i+len(s)+80)]))
		}
	}
	if err != nil {
		t.Fatalf("TestSecure tests failed in the child: %v\n%s", err, text)
	}
	// The grep looked at something: every test ran and logged its errors.
	for _, want := range []string{"--- PASS: TestSecureRedisACL", "--- PASS: TestSecureTLS", "WRONGPASS", "NOPERM", "certificate", "[redacted]"} {
		if !strings.Contains(text, want) {
			t.Fatalf("child output lacks %q:\n%s", want, text)
		}
	}
}

// echoServer is a server that knows no command and answers each with an
// error quoting its arguments, as redis-server does for an unknown command
// ("with args beginning with:") and as a proxy might. With memcached set it
// speaks memcached's text protocol instead, quoting a set's data line.
func echoServer(t *testing.T, memcached bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					line = strings.TrimSpace(line)
					var reply string
					switch {
					case memcached && strings.HasPrefix(line, "set "):
						data, _ := r.ReadString('\n')
						reply = "CLIENT_ERROR bad data chunk: " + strings.TrimSpace(data) + "\r\n"
					case memcached:
						reply = "ERROR " + line + "\r\n"
					default:
						n, _ := strconv.Atoi(strings.TrimPrefix(line, "*"))
						var args []string
						for range n {
							r.ReadString('\n') // $len
							a, _ := r.ReadString('\n')
							args = append(args, "'"+strings.TrimSpace(a)+"'")
						}
						reply = "-ERR unknown command, with args beginning with: " + strings.Join(args, " ") + "\r\n"
					}
					if _, err := io.WriteString(conn, reply); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestSecureEchoedPasswordRedacted checks that a server echoing the login's
// arguments, the password among them, does not put it in the client's
// errors, whose text still says the login failed.
func TestSecureEchoedPasswordRedacted(t *testing.T) {
	for _, backend := range []Backend{Redis, Memcached} {
		t.Run(backend.String(), func(t *testing.T) {
			addr := echoServer(t, backend == Memcached)
			c := secureClient(t, Options{Backend: backend, Nodes: []ring.Node{{Addr: addr}}, Username: "app", Password: testPassword})
			for name, op := range map[string]func() error{
				"Get":      func() error { _, err := c.Get(context.Background(), "k"); return err },
				"SetMulti": func() error { return c.SetMulti(context.Background(), map[string][]byte{"a": nil, "b": nil}, 0) },
			} {
				err := logErr(t, name+" on an echoing server", op())
				if err == nil || strings.Contains(fmt.Sprintf("%v %+v", err, err), testPassword) {
					t.Fatalf("%s: %v: want an error without the password", name, err)
				}
				if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), redacted) {
					t.Fatalf("%s: %v: want ErrAuth, the echoed password redacted", name, err)
				}
				// Nothing reachable from the error holds the password.
				var reached []error
				var walk func(e error)
				walk = func(e error) {
					reached = append(reached, e)
					switch u := e.(type) {
					case interface{ Unwrap() error }:
						if w := u.Unwrap(); w != nil {
							walk(w)
						}
					case interface{ Unwrap() []error }:
						for _, w := range u.Unwrap() {
							walk(w)
						}
					}
				}
				walk(err)
				var re redis.Error
				if errors.As(err, &re) {
					reached = append(reached, re)
				}
				for _, e := range reached {
					if strings.Contains(e.Error(), testPassword) {
						t.Fatalf("%s: %T reachable from the error holds the password", name, e)
					}
				}
			}
		})
	}
}
