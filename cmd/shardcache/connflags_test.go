package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/internal/testserver"
)

// Secrets of the CLI's security tests; every output of theirs is grepped
// for them.
const (
	cliAdminSecret = "Cli-5e1d-admin-secret"
	cliUserSecret  = "Cli-a0c3-user-secret"
)

// runSecure runs a command line and fails the test if its output shows a
// secret.
func runSecure(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	code, stdout, stderr = runCmd(t, args...)
	for _, s := range []string{cliAdminSecret, cliUserSecret} {
		if strings.Contains(stdout+stderr, s) {
			t.Errorf("%q printed a secret:\nstdout: %s\nstderr: %s", args, stdout, stderr)
		}
	}
	return code, stdout, stderr
}

// realSim is a tiny simulation on three real servers: 4 steps of 100ms.
func realSim(flag string, servers []*testserver.Server, extra ...string) []string {
	return append([]string{"simulate", "--json", "--quiet",
		flag, strings.Join(testserver.Addrs(servers), ","),
		"--from", "a=cache-a:6379,b=cache-b:6379,c=cache-c:6379",
		"--to", "a=cache-a:6379,b=cache-b:6379",
		"--keys", "100", "--zipf-v", "10", "--requests", "50", "--modes", "ring,dual-ring",
		"--step", "10s", "--ttl", "1m", "--real-step", "100ms", "--steps", "4", "--reshard-at", "2"}, extra...)
}

// checkSimOK checks that a run exited 0 with its requests served. A login
// or TLS failure fails every request (and the prefill, so the run); a few
// may time out on a loaded machine under -race, at the client's 500ms.
func checkSimOK(t *testing.T, what string, code int, out, errOut string) {
	t.Helper()
	if code != exitOK {
		t.Fatalf("%s: exit %d: %s", what, code, errOut)
	}
	var res simOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, out)
	}
	const requests = 4 * 50 // realSim's steps × requests per step
	for _, m := range res.Modes {
		if m.Errors > requests/10 {
			t.Fatalf("%s: %s had %d errors in %d requests", what, m.Mode, m.Errors, requests)
		}
		if m.Errors > 0 {
			t.Logf("%s: %s had %d errors in %d requests (timeouts on a loaded machine?)", what, m.Mode, m.Errors, requests)
		}
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSimulatePassword runs simulate on Redis servers that require an ACL
// user limited to simulate's keys: the password comes from the environment
// or, first, from --password-file; a wrong one fails saying so.
func TestSimulatePassword(t *testing.T) {
	servers := testserver.SecureRedis(t, 3, testserver.Security{
		Password: cliAdminSecret,
		ACL:      []string{"sim on >" + cliUserSecret + " ~shardcache-sim:* +@all"},
	})
	t.Setenv(passwordEnv, cliUserSecret)
	code, out, errOut := runSecure(t, realSim("--redis", servers, "--username", "sim")...)
	checkSimOK(t, "password from $"+passwordEnv, code, out, errOut)

	t.Setenv(passwordEnv, "wrong")
	right := writeFile(t, "right", cliUserSecret+"\n")
	code, out, errOut = runSecure(t, realSim("--redis", servers, "--username", "sim", "--password-file", right)...)
	checkSimOK(t, "--password-file over the environment", code, out, errOut)

	code, _, errOut = runSecure(t, realSim("--redis", servers, "--username", "sim")...)
	if code != exitFail || !strings.Contains(errOut, "authentication failed") || !strings.Contains(errOut, "WRONGPASS") {
		t.Fatalf("wrong password: exit %d, stderr %q; want 1 and an authentication failure", code, errOut)
	}
	os.Unsetenv(passwordEnv)
	code, _, errOut = runSecure(t, realSim("--redis", servers)...)
	if code != exitFail || !strings.Contains(errOut, "authentication failed") {
		t.Fatalf("no password: exit %d, stderr %q; want 1 and an authentication failure", code, errOut)
	}

	// plan reads no password and prints none.
	t.Setenv(passwordEnv, cliUserSecret)
	if code, _, errOut := runSecure(t, "plan", "--json"); code != exitOK {
		t.Fatalf("plan --json: exit %d: %s", code, errOut)
	}
}

// TestSimulateTLS runs simulate on Memcached over TLS (memcached -Z): with
// the test's CA it works; against the system's roots the certificate is
// refused; --insecure-skip-verify works and warns.
func TestSimulateTLS(t *testing.T) {
	ca := testserver.NewCA(t, "cli")
	servers := testserver.SecureMemcached(t, 3, testserver.Security{TLS: ca.Issue("server")})
	code, out, errOut := runSecure(t, realSim("--memcached", servers, "--tls-ca", ca.CertFile)...)
	checkSimOK(t, "--tls-ca", code, out, errOut)
	if strings.Contains(errOut, "WARNING") {
		t.Errorf("a warning without --insecure-skip-verify: %s", errOut)
	}

	code, _, errOut = runSecure(t, realSim("--memcached", servers, "--tls")...)
	if code != exitFail || !strings.Contains(errOut, "authentication failed") || !strings.Contains(errOut, "certificate") {
		t.Fatalf("unknown CA: exit %d, stderr %q; want 1 and a certificate failure", code, errOut)
	}

	code, out, errOut = runSecure(t, realSim("--memcached", servers, "--insecure-skip-verify")...)
	checkSimOK(t, "--insecure-skip-verify", code, out, errOut)
	if !strings.Contains(errOut, "WARNING: --insecure-skip-verify") {
		t.Errorf("--insecure-skip-verify without a warning: %q", errOut)
	}
}

// TestConnFlagsBadInput checks the connection flags' bad input: exit 2 and
// a message, and no password flag at all.
func TestConnFlagsBadInput(t *testing.T) {
	servers := "--redis=127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
	from := "--from=a=cache-a:6379,b=cache-b:6379,c=cache-c:6379"
	to := "--to=a=cache-a:6379,b=cache-b:6379"
	empty := writeFile(t, "empty", "\n")
	notPEM := writeFile(t, "ca.pem", "not a certificate")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls"}, "need --redis or --memcached"},
		{[]string{"--password-file", empty}, "need --redis or --memcached"},
		{[]string{"--password", cliUserSecret}, "flag provided but not defined: --password"},
		{[]string{servers, from, to, "--password-file", "/nonexistent/pw"}, "--password-file"},
		{[]string{servers, from, to, "--password-file", empty}, "empty first line"},
		{[]string{servers, from, to, "--tls-cert", notPEM}, "--tls-cert and --tls-key go together"},
		{[]string{servers, from, to, "--tls-ca", notPEM}, "no PEM certificate"},
		{[]string{servers, from, to, "--tls-cert", notPEM, "--tls-key", notPEM}, "--tls-cert, --tls-key"},
	} {
		code, out, errOut := runSecure(t, append([]string{"simulate", "--quiet"}, tc.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
