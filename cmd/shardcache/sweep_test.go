package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// TestSweepCommand writes keys to three real servers, runs "shardcache
// sweep" to four, and reads every key back through a client of the four
// alone: the command copied the moved ones, and says how many.
func TestSweepCommand(t *testing.T) {
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		t.Run(backend.String(), func(t *testing.T) {
			var servers []*testserver.Server
			if backend == client.Redis {
				servers = testserver.Redis(t, 4)
			} else {
				servers = testserver.Memcached(t, 4)
			}
			nodes, list := fleet(servers)
			from, to := strings.Join(list[:3], ","), strings.Join(list, ",")
			c, err := client.New(client.Options{ReadTimeout: testserver.ClientTimeout, WriteTimeout: testserver.ClientTimeout, Backend: backend, Nodes: nodes[:3]})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			keys := make(map[string][]byte)
			for i := range 1500 {
				keys[fmt.Sprintf("cmd:%d", i)] = []byte(strconv.Itoa(i))
			}
			if err := c.SetMulti(t.Context(), keys, 0); err != nil {
				t.Fatal(err)
			}
			moved := movedKeys(t, keys, nodes[:3], nodes)

			code, out, errOut := runCmd(t, "sweep", "--backend", backend.String(), "--from", from, "--to", to, "--rate", "0")
			if code != exitOK {
				t.Fatalf("exit %d:\n%s%s", code, out, errOut)
			}
			t.Logf("%d of %d keys move:\n%s", moved, len(keys), out)
			// --rate 0 is the default limit, as SweepOptions.Rate 0 is.
			if want := fmt.Sprintf(`(?m)^  copied to their new owner\s+%d$`, moved); !regexp.MustCompile(want).MatchString(out) ||
				!strings.Contains(out, "Swept 3 of 3 old nodes") || !strings.Contains(errOut, "100%") ||
				!strings.Contains(out, fmt.Sprintf("limited to %d keys/s per node", client.DefaultSweepRate)) {
				t.Fatalf("summary lacks %d copies, or stderr its bar:\n%s%s", moved, out, errOut)
			}

			after, err := client.New(client.Options{ReadTimeout: testserver.ClientTimeout, WriteTimeout: testserver.ClientTimeout, Backend: backend, Nodes: nodes})
			if err != nil {
				t.Fatal(err)
			}
			defer after.Close()
			for chunk := range chunks(keys, 500) {
				hits, err := after.GetMulti(t.Context(), chunk)
				if err != nil || len(hits) != len(chunk) {
					t.Fatalf("after the sweep, %d of %d keys on their new owners: %v", len(hits), len(chunk), err)
				}
			}

			// Run again, without a limit: nothing left to copy, and the first
			// run's copies are said to be copied before, not newer values.
			code, out, _ = runCmd(t, "sweep", "--quiet", "--backend", backend.String(), "--from", from, "--to", to, "--rate", "-1")
			if want := fmt.Sprintf(`(?m)^  already copied \(the same value on the new owner\)\s+%d$`, moved); code != exitOK || !strings.Contains(out, "no rate limit") ||
				!regexp.MustCompile(want).MatchString(out) || !regexp.MustCompile(`(?m)^  copied to their new owner\s+0$`).MatchString(out) ||
				!regexp.MustCompile(`(?m)^  newer on the new owner \(written or deleted since\)\s+0$`).MatchString(out) {
				t.Fatalf("second run: exit %d:\n%s", code, out)
			}
		})
	}
}

func chunks(m map[string][]byte, n int) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		var c []string
		for k := range m {
			if c = append(c, k); len(c) == n {
				if !yield(c) {
					return
				}
				c = nil
			}
		}
		if len(c) > 0 {
			yield(c)
		}
	}
}

// fleet names the servers n0, n1, ...: their nodes, and the same as a
// command line's node list entries.
func fleet(servers []*testserver.Server) (nodes []ring.Node, list []string) {
	for i, a := range testserver.Addrs(servers) {
		nodes = append(nodes, ring.Node{Name: fmt.Sprintf("n%d", i), Addr: a})
		list = append(list, fmt.Sprintf("n%d=%s", i, a))
	}
	return nodes, list
}

// movedKeys counts the keys whose server differs between rings of from and
// of to.
func movedKeys(t *testing.T, keys map[string][]byte, from, to []ring.Node) int {
	t.Helper()
	oldRing, newRing := mustRing(t, from), mustRing(t, to)
	moved := 0
	for k := range keys {
		if oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			moved++
		}
	}
	return moved
}

func mustRing(t *testing.T, nodes []ring.Node) *ring.Ring {
	t.Helper()
	r, err := ring.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSweepCommandNewNodeDown: a sweep whose --to node does not answer
// refuses to start, naming it, instead of failing its keys one by one.
func TestSweepCommandNewNodeDown(t *testing.T) {
	servers := testserver.Redis(t, 3)
	nodes, list := fleet(servers)
	servers[2].Stop()
	code, out, errOut := runCmd(t, "sweep", "--backend", "redis", "--from", strings.Join(list[:2], ","), "--to", strings.Join(list, ","), "--timeout", "2s")
	if code != exitFail || !strings.Contains(errOut, nodes[2].Addr) || !strings.Contains(errOut, "does not answer") || strings.Contains(out, "Swept") {
		t.Fatalf("sweep to a node that is down: exit %d\n%s%s", code, out, errOut)
	}
}

func TestSweepCommandBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sweep", "--backend", "etcd", "--from", "h:1", "--to", "h:2"}, `--backend "etcd"`},
		{[]string{"sweep", "--from", "h:1"}, "both --from and --to"},
		{[]string{"sweep", "--from", "h:1", "--to", "h:2", "--concurrency", "-1"}, "--concurrency -1"},
		{[]string{"sweep", "--from", "h:1", "--to", "h:2", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"sweep", "--from", "h", "--to", "h:2"}, "want HOST:PORT"},
		{[]string{"plan", "--keys", "-1"}, "--keys"},
		{[]string{"plan", "--keys", "10", "--sweep-rate", "0"}, "--sweep-rate"},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%q: exit %d, want %d with %q on stderr; stderr:\n%s\nstdout:\n%s", tc.args, code, exitUsage, tc.want, errOut, out)
		}
	}
	if code, out, _ := runCmd(t, "help", "sweep"); code != exitOK || !strings.Contains(out, "-rate") || !strings.Contains(out, "0 is the default") || !strings.Contains(out, "-1 for no limit") {
		t.Errorf("help sweep: exit %d:\n%s", code, out)
	}
	if code, out, _ := runCmd(t, "help", "plan"); code != exitOK || !strings.Contains(out, "-sweep-rate") {
		t.Errorf("help plan: exit %d:\n%s", code, out)
	}
	// A server that is down: a failure, not bad input (the new one
	// named first: the sweep does not start).
	code, _, errOut := runCmd(t, "sweep", "--quiet", "--from", "127.0.0.1:1", "--to", "127.0.0.1:2")
	if code != exitFail || !strings.Contains(errOut, "127.0.0.1:2") {
		t.Errorf("sweep of a stopped server: exit %d, stderr:\n%s", code, errOut)
	}
}

// TestPlanSweepEstimate checks the estimate against its definition: the old
// node with the largest share, listed at the rate.
func TestPlanSweepEstimate(t *testing.T) {
	code, out, errOut := runCmd(t, "plan", "--json", "--keys", "1000000", "--sweep-rate", "5000")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep planReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	var top float64
	var topName string
	for _, n := range rep.Nodes {
		if n.Before != nil && n.Before.Share > top {
			top, topName = n.Before.Share, n.Name
		}
	}
	sw := rep.Sweep
	if sw == nil || sw.Slowest != topName || sw.Listed != int64(top*1e6+0.5) ||
		sw.Seconds != float64(sw.Listed)/5000 || sw.Copies != int64(rep.ServerMoved*1e6+0.5) {
		t.Fatalf("sweep estimate %+v; want %s listing %.0f keys at 5000/s", sw, topName, top*1e6)
	}
	_, text, _ := runCmd(t, "plan", "--keys", "1000000", "--sweep-rate", "5000")
	d := time.Duration(sw.Seconds * float64(time.Second)).Round(time.Second)
	if !strings.Contains(text, fmt.Sprintf("about %v, set by the largest old node, %s", d, topName)) {
		t.Fatalf("plan text lacks the estimate %v:\n%s", d, text)
	}
	if _, text, _ := runCmd(t, "plan"); strings.Contains(text, "Sweep") {
		t.Fatal("plan without --keys prints a sweep estimate")
	}
}

// TestSweepCommandSecure runs "shardcache sweep" on Redis servers that
// require a password over TLS: the command takes them from the connection
// flags and the environment, copies every moved key, prints no secret, and
// fails, saying why, with a wrong password.
func TestSweepCommandSecure(t *testing.T) {
	ca := testserver.NewCA(t, "sweep")
	servers := testserver.SecureRedis(t, 4, testserver.Security{Password: cliAdminSecret, TLS: ca.Issue("server")})
	nodes, list := fleet(servers)
	c, err := client.New(client.Options{Nodes: nodes[:3], Password: cliAdminSecret, TLSConfig: ca.ClientConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := make(map[string][]byte)
	for i := range 300 {
		keys[fmt.Sprintf("secure:%d", i)] = []byte(strconv.Itoa(i))
	}
	if err := c.SetMulti(t.Context(), keys, 0); err != nil {
		t.Fatal(err)
	}
	moved := movedKeys(t, keys, nodes[:3], nodes)
	from, to := strings.Join(list[:3], ","), strings.Join(list, ",")
	args := []string{"sweep", "--quiet", "--from", from, "--to", to, "--rate", "0", "--tls-ca", ca.CertFile}

	t.Setenv(passwordEnv, "wrong")
	if code, out, errOut := runSecure(t, args...); code == exitOK || !strings.Contains(errOut, "auth") {
		t.Fatalf("wrong password: exit %d, want a failure that says so:\n%s%s", code, out, errOut)
	}
	t.Setenv(passwordEnv, cliAdminSecret)
	code, out, errOut := runSecure(t, args...)
	if want := fmt.Sprintf(`(?m)^  copied to their new owner\s+%d$`, moved); code != exitOK || !regexp.MustCompile(want).MatchString(out) {
		t.Fatalf("exit %d, want %d copies:\n%s%s", code, moved, out, errOut)
	}
}
