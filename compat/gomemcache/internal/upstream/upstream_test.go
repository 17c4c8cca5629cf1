package memcache

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/compat/gomemcache"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// copies are gomemcache's files kept here byte for byte: the name here,
// the path in gomemcache's module.
var copies = map[string]string{
	"memcache_test.go":   "memcache/memcache_test.go",
	"fakeserver_test.go": "memcache/fakeserver_test.go",
	"fakecerts_test.go":  "memcache/fakecerts_test.go",
	"selector_test.go":   "memcache/selector_test.go",
	"LICENSE":            "LICENSE",
}

var update = flag.Bool("update", false, "copy gomemcache's test files again from the module cache")

// excluded are the upstream tests and benchmarks that do not run here
// (TestMain adds them to -test.skip), each with why. Every other one runs.
var excluded = []struct{ name, why string }{
	{"TestLocalhost", "it runs testWithClient against a memcached someone runs on localhost:11211, " +
		"and skips without one; TestUpstream/memcached runs the same body against three " +
		"started for it (testserver, which fails under CI=true without the binary)"},
	{"TestUnixSocket", "a node is a TCP address, host:port (ring.Node.Addr; the dialer dials tcp): " +
		"the drop-in cannot reach a memcached on a Unix socket"},
	{"TestTLS", "it sets Client.DialContext to a TLS dialer; the drop-in has no dialer of the " +
		"caller's (TLS is gomemcache.Options.TLSConfig, a difference its package doc lists); " +
		"TestUpstream/tls runs the same body over TLS against three memcached -Z"},
	{"TestScanGetResponseLine/size-max-uint32", "a VALUE line of 2^31-1 bytes: the drop-in's parser " +
		"refuses a size over wire.MaxValue (512 MiB) rather than allocate it, as a stream out of step"},
	{"BenchmarkOnItem", "it times gomemcache's private connection path (getConn, onItem), " +
		"which the drop-in does not have"},
}

// skipPattern is excluded as a -test.skip pattern, each name anchored at
// each level.
func skipPattern() string {
	var alts []string
	for _, e := range excluded {
		levels := strings.Split(e.name, "/")
		for i, l := range levels {
			levels[i] = "^" + l + "$"
		}
		alts = append(alts, strings.Join(levels, "/"))
	}
	return strings.Join(alts, "|")
}

// TestMain excludes what cannot run (excluded), beside what -skip names.
func TestMain(m *testing.M) {
	flag.Parse()
	pattern := skipPattern()
	if s := flag.Lookup("test.skip").Value.String(); s != "" {
		pattern = s + "|" + pattern
	}
	if err := flag.Set("test.skip", pattern); err != nil {
		fmt.Fprintln(os.Stderr, "upstream:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// TestExcluded checks that every exclusion names an upstream test or
// benchmark (and subtest) that exists, so that none outlives a change of
// gomemcache's suite, and logs why each is excluded.
func TestExcluded(t *testing.T) {
	funcs := map[string][]byte{} // the upstream functions, and their files
	fset := token.NewFileSet()
	for name := range copies {
		if !strings.HasSuffix(name, ".go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				funcs[fd.Name.Name] = src
			}
		}
	}
	for _, e := range excluded {
		top, sub, _ := strings.Cut(e.name, "/")
		src, ok := funcs[top]
		if !ok {
			t.Errorf("excluded %s: gomemcache's suite has no %s", e.name, top)
			continue
		}
		if sub != "" && !bytes.Contains(src, []byte(`"`+sub+`"`)) {
			t.Errorf("excluded %s: gomemcache's suite has no subtest %q", e.name, sub)
		}
		t.Logf("excluded %s: %s", e.name, e.why)
	}
}

// TestUpstreamCopy checks that the copies are gomemcache's files, byte for
// byte, at the version go.mod requires; with -update it copies them again.
func TestUpstreamCopy(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/bradfitz/gomemcache").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/bradfitz/gomemcache: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatal("gomemcache is not in the module cache: go mod download github.com/bradfitz/gomemcache")
	}
	for name, path := range copies {
		want, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(path)))
		if err != nil {
			t.Fatal(err)
		}
		if *update {
			if err := os.WriteFile(name, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from gomemcache's %s (%s): run go generate in this directory", name, path, dir)
		}
	}
}

// nodesOf names servers prefix0, prefix1, ...
func nodesOf(prefix string, addrs []string) []ring.Node {
	nodes := make([]ring.Node, len(addrs))
	for i, a := range addrs {
		nodes[i] = ring.Node{Name: fmt.Sprintf("%s%d", prefix, i), Addr: a}
	}
	return nodes
}

// dropIn returns the drop-in over nodes, closed when t ends.
func dropIn(t *testing.T, nodes []ring.Node, opts gomemcache.Options) (*gomemcache.Client, *Client) {
	t.Helper()
	mc, err := gomemcache.NewWithOptions(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Shardcache().Close() })
	return mc, wrap(mc)
}

// spread runs gomemcache's suite on c and checks that its keys reached
// every one of the nodes of mc.
func spread(t *testing.T, mc *gomemcache.Client, c *Client, nodes int) {
	t.Helper()
	reached := map[string]bool{}
	c.before = func(_ string, keys ...string) {
		for _, k := range keys {
			reached[mc.Shardcache().Locate(k).Name] = true
		}
	}
	testWithClient(t, c)
	delete(reached, "") // DeleteAll and Ping name no key
	if len(reached) != nodes {
		t.Errorf("the suite's keys reached %d of the %d nodes: %v", len(reached), nodes, reached)
	}
}

// reshardPoints are the calls of gomemcache's suite (testWithClient) before
// which TestUpstream/reshard moves every key to another fleet: the keys
// written before the call are on their old owners only, and the suite
// goes on through the migration. A point is the n-th call of a method with
// those keys, checked when it comes, so that a new version of the suite
// fails here rather than move the reshard elsewhere unseen.
var reshardPoints = []struct {
	call  string // method and keys, as Client.call names them
	nth   int
	touch bool // in testTouchWithClient, which -short skips
	why   string
}{
	{"Set foo", 1, false, "the whole suite during the migration"},
	{"Get foo", 1, false, "a Get falls back to the old owner and backfills; the CAS finds the copy"},
	{"CompareAndSwap foo", 1, false, "CAS ids read from the old owner: the CAS swaps there, the stale one conflicts"},
	{"Add bar", 2, false, "Add of a key only the old owner holds is ErrNotStored"},
	{"Append append", 2, false, "Append brings the key over"},
	{"Replace bar", 1, false, "Replace brings the key over"},
	{"GetMulti foo,bar", 1, false, "GetMulti falls back for both keys"},
	{"Delete foo", 1, false, "a Delete reaches the old owner: the Get after it misses"},
	{"Increment num", 1, false, "Increment brings the counter over"},
	{"Increment num", 3, false, "a non-number only on the old owner: gomemcache's client error"},
	{"Touch foo", 1, true, "Touch brings the key over; bar expires on its old owner"},
	{"DeleteAll", 1, false, "DeleteAll flushes both fleets"},
	{"Ping", 1, false, "Ping reaches both fleets"},
}

// TestUpstream runs gomemcache's own suite, testWithClient of its
// memcache_test.go unchanged, against the drop-in: over three memcached
// servers, over three of gomemcache's fake servers (fakeserver_test.go;
// TestFakeServer runs it over one), over three memcached speaking TLS, and
// over three memcached resharded to three others at each of reshardPoints.
// The suite is the same for all: keys placed by the drop-in's ring, and
// gomemcache's errors.
func TestUpstream(t *testing.T) {
	t.Run("memcached", func(t *testing.T) {
		t.Parallel()
		nodes := nodesOf("n", testserver.Addrs(testserver.Memcached(t, 3)))
		mc, c := dropIn(t, nodes, gomemcache.Options{})
		spread(t, mc, c, len(nodes))
	})
	t.Run("fake servers", func(t *testing.T) {
		t.Parallel()
		var addrs []string
		for range 3 {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go (&testServer{}).Serve(ln)
			addrs = append(addrs, ln.Addr().String())
		}
		nodes := nodesOf("n", addrs)
		mc, c := dropIn(t, nodes, gomemcache.Options{})
		spread(t, mc, c, len(nodes))
	})
	t.Run("tls", func(t *testing.T) {
		t.Parallel()
		ca := testserver.NewCA(t, "upstream")
		servers := testserver.SecureMemcached(t, 3, testserver.Security{TLS: ca.Issue("memcached")})
		nodes := nodesOf("n", testserver.Addrs(servers))
		mc, c := dropIn(t, nodes, gomemcache.Options{TLSConfig: ca.ClientConfig()})
		spread(t, mc, c, len(nodes))
	})
	t.Run("reshard", func(t *testing.T) {
		for _, p := range reshardPoints {
			t.Run(fmt.Sprintf("%s#%d", p.call, p.nth), func(t *testing.T) {
				t.Parallel()
				if p.touch && testing.Short() {
					t.Logf("-short: gomemcache's suite does not touch (testTouchWithClient), and %s never comes", p.call)
					return
				}
				addrs := testserver.Addrs(testserver.Memcached(t, 6))
				from, to := nodesOf("old", addrs[:3]), nodesOf("new", addrs[3:])
				mc, c := dropIn(t, from, gomemcache.Options{})
				seen := map[string]int{}
				resharded := false
				c.before = func(method string, keys ...string) {
					call := strings.TrimSpace(method + " " + strings.Join(keys, ","))
					seen[call]++
					if call != p.call || seen[call] != p.nth {
						return
					}
					// Every key moves: the fleets share no node.
					if err := mc.Reshard(to, time.Hour); err != nil {
						t.Fatalf("Reshard before %s: %v", call, err)
					}
					resharded = true
				}
				testWithClient(t, c)
				if !resharded {
					t.Fatalf("the suite made no call %s #%d: the reshard never happened", p.call, p.nth)
				}
				st := mc.Migration()
				if !st.Active || st.Moved < 1-1e-9 {
					t.Errorf("the suite did not run through a migration that moves every key: %+v", st)
				}
				t.Logf("%s: fallback hits %d, backfills %d, dual writes %d, dual deletes %d",
					p.why, st.FallbackHits, st.Backfills, st.DualWrites, st.DualDeletes)
			})
		}
	})
}
