package testserver

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CA is a certificate authority made for one test, whose certificate and
// the certificates it issues are PEM files in a temporary directory.
type CA struct {
	// CertFile is the CA's certificate, for a server's list of client CAs.
	CertFile string
	// Pool holds the CA's certificate, for a tls.Config's RootCAs.
	Pool *x509.CertPool

	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Cert is a certificate issued by a CA, valid for 127.0.0.1 and localhost,
// as a server's or a client's.
type Cert struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// NewCA makes a certificate authority named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testserver: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testserver: CA certificate: %v", err)
	}
	ca := &CA{t: t, dir: t.TempDir(), cert: cert, key: key, Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.CertFile = ca.write(name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate named name signed by the CA.
func (ca *CA) Issue(name string) *Cert {
	t := ca.t
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testserver: certificate %s: %v", name, err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testserver: key %s: %v", name, err)
	}
	c := &Cert{
		CertFile: ca.write(name+".pem", "CERTIFICATE", der),
		KeyFile:  ca.write(name+"-key.pem", "PRIVATE KEY", pkcs8),
	}
	if c.TLS, err = tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		t.Fatalf("testserver: certificate %s: %v", name, err)
	}
	return c
}

// ClientConfig returns a TLS configuration that trusts the CA.
func (ca *CA) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
}

func (ca *CA) write(name, kind string, der []byte) string {
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		ca.t.Fatalf("testserver: %v", err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testserver: key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("testserver: serial: %v", err)
	}
	return n
}

// Security is how a server started by SecureRedis or SecureMemcached logs
// clients in and protects its connections. Secrets reach the servers
// through files, never their command lines, so that no test output shows
// them.
type Security struct {
	// Password is Redis's requirepass, the default user's password.
	Password string
	// ACL are Redis user rules, one user per entry, as after "ACL SETUSER"
	// ("cache on >secret ~cache:* +@all").
	ACL []string
	// Users are Memcached's ASCII authentication users (memcached -Y), by
	// name. The probe logs in as one of them.
	Users map[string]string
	// TLS, when set, is the server's certificate: the server then speaks
	// TLS only.
	TLS *Cert
	// ClientCA, when set with TLS, makes the server require client
	// certificates issued by it.
	ClientCA *CA
}

// SecureRedis starts n redis-server processes without persistence, with
// sec's password, users and TLS.
func SecureRedis(t testing.TB, n int, sec Security) []*Server {
	t.Helper()
	bin := binary(t, "redis-server")
	dir := t.TempDir()
	servers := make([]*Server, n)
	for i := range servers {
		conf := filepath.Join(dir, fmt.Sprintf("redis-%d.conf", i))
		servers[i] = launch(t, bin, 1, func(p []int) []string {
			lines := []string{
				"bind 127.0.0.1", `save ""`, "appendonly no", "daemonize no",
				"protected-mode no", "dir " + dir,
			}
			if sec.TLS != nil {
				lines = append(lines, "port 0", "tls-port "+strconv.Itoa(p[0]),
					"tls-cert-file "+sec.TLS.CertFile, "tls-key-file "+sec.TLS.KeyFile)
				if sec.ClientCA != nil {
					lines = append(lines, "tls-ca-cert-file "+sec.ClientCA.CertFile, "tls-auth-clients yes")
				} else {
					// redis-server wants a CA file even when it asks for no
					// client certificate; the server's own does.
					lines = append(lines, "tls-ca-cert-file "+sec.TLS.CertFile, "tls-auth-clients no")
				}
			} else {
				lines = append(lines, "port "+strconv.Itoa(p[0]))
			}
			if sec.Password != "" {
				lines = append(lines, "requirepass "+sec.Password)
			}
			for _, u := range sec.ACL {
				lines = append(lines, "user "+u)
			}
			writeSecret(t, conf, strings.Join(lines, "\n")+"\n")
			return []string{conf}
		}, sec.probe(probeRedisSecure))
	}
	return servers
}

// SecureMemcached starts n memcached processes with 64 MiB of memory each,
// with sec's users and TLS (memcached -Z, which Debian's memcached 1.6 is
// built with). A memcached built without TLS skips a TLS test, or fails it
// under CI=true, as a missing binary does.
func SecureMemcached(t testing.TB, n int, sec Security) []*Server {
	t.Helper()
	bin := binary(t, "memcached")
	if sec.TLS != nil {
		requireTLSBuild(t, bin)
	}
	dir := t.TempDir()
	var auth string
	if len(sec.Users) > 0 {
		auth = filepath.Join(dir, "auth")
		var b strings.Builder
		for u, p := range sec.Users {
			fmt.Fprintf(&b, "%s:%s\n", u, p)
		}
		writeSecret(t, auth, b.String())
	}
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = launch(t, bin, 1, func(p []int) []string {
			args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(p[0]), "-U", "0", "-m", "64"}
			if os.Geteuid() == 0 {
				args = append(args, "-u", "root")
			}
			if auth != "" {
				args = append(args, "-Y", auth)
			}
			if sec.TLS != nil {
				o := "ssl_chain_cert=" + sec.TLS.CertFile + ",ssl_key=" + sec.TLS.KeyFile
				if sec.ClientCA != nil {
					o += ",ssl_ca_cert=" + sec.ClientCA.CertFile + ",ssl_verify_mode=2"
				}
				args = append(args, "-Z", "-o", o)
			}
			return args
		}, sec.probe(probeMemcachedSecure))
	}
	return servers
}

// writeSecret writes a file that holds a password.
func writeSecret(t testing.TB, path, content string) {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("testserver: %v", err)
	}
}

// probe returns a probe that connects as sec says, then runs answers.
func (sec Security) probe(answers func(sec Security, c net.Conn, r *bufio.Reader, pid int) error) func([]int, int) error {
	return func(ports []int, pid int) error {
		c, _, err := dial(ports[0])
		if err != nil {
			return err
		}
		defer c.Close()
		if sec.TLS != nil {
			cfg := &tls.Config{InsecureSkipVerify: true} // the probe checks the process, not the certificate
			if sec.ClientCA != nil {
				cfg.Certificates = []tls.Certificate{sec.TLS.TLS}
			}
			tc := tls.Client(c, cfg)
			if err := tc.Handshake(); err != nil {
				return fmt.Errorf("TLS handshake: %w", err)
			}
			c = tc
		}
		return answers(sec, c, bufio.NewReader(c), pid)
	}
}

func probeRedisSecure(sec Security, c net.Conn, r *bufio.Reader, pid int) error {
	if sec.Password != "" {
		cmd := fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(sec.Password), sec.Password)
		if _, err := io.WriteString(c, cmd); err != nil {
			return err
		}
		if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
			return fmt.Errorf("AUTH refused (%v)", err) // not the line: it could quote the password
		}
	}
	return redisAnswers(c, r, pid)
}

func probeMemcachedSecure(sec Security, c net.Conn, r *bufio.Reader, pid int) error {
	for u, p := range sec.Users {
		token := u + " " + p
		if _, err := fmt.Fprintf(c, "set auth 0 0 %d\r\n%s\r\n", len(token), token); err != nil {
			return err
		}
		if line, err := r.ReadString('\n'); err != nil || line != "STORED\r\n" {
			return fmt.Errorf("authentication refused (%v)", err)
		}
		break
	}
	return memcachedAnswers(c, r, pid)
}

// requireTLSBuild skips the test, or fails it under CI, when memcached was
// built without TLS: its help then lacks --enable-ssl.
func requireTLSBuild(t testing.TB, bin string) {
	t.Helper()
	help, _ := exec.Command(bin, "-h").CombinedOutput() // memcached -h exits 0; the text is what counts
	if bytes.Contains(help, []byte("--enable-ssl")) {
		return
	}
	msg := fmt.Sprintf("testserver: %s was built without TLS (no --enable-ssl in its -h); "+
		"the TLS tests need a memcached built with --enable-tls, as Debian's 1.6 is", bin)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
