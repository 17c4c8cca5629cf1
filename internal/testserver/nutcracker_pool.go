package testserver

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Backend is one server of a nutcracker pool.
type Backend struct {
	Addr   string // "host:port"
	Weight int    // 0 means 1
	Name   string // optional; ketama places keys by it when set
}

// Pool is the configuration of a nutcracker pool.
type Pool struct {
	Backends     []Backend
	Hash         string // such as "md5", "murmur" or "fnv1a_64"
	Distribution string // such as "ketama" or "modula"
	Redis        bool   // the Redis protocol, else Memcached's
	HashTag      string // twemproxy's hash_tag, two characters such as "{}"; none when empty
}

// NutcrackerPool starts twemproxy with one pool, as configured. The proxy's
// readiness does not depend on its backends being up.
func NutcrackerPool(t testing.TB, p Pool) *Server {
	t.Helper()
	if len(p.Backends) == 0 {
		t.Fatal("testserver: nutcracker needs at least one backend")
	}
	var servers strings.Builder
	for _, b := range p.Backends {
		if _, _, err := net.SplitHostPort(b.Addr); err != nil {
			t.Fatalf("testserver: nutcracker backend %q: %v", b.Addr, err)
		}
		fmt.Fprintf(&servers, "   - %s:%d", b.Addr, max(b.Weight, 1))
		if b.Name != "" {
			fmt.Fprintf(&servers, " %s", b.Name)
		}
		servers.WriteString("\n")
	}
	tag := ""
	if p.HashTag != "" {
		tag = fmt.Sprintf("  hash_tag: %q\n", p.HashTag)
	}
	bin := binary(t, "nutcracker")
	conf := filepath.Join(t.TempDir(), "nutcracker.yml")
	args := func(ports []int) []string {
		yml := fmt.Sprintf("%s:\n  listen: 127.0.0.1:%d\n  hash: %s\n  distribution: %s\n%s"+
			"  redis: %t\n  timeout: 2000\n  auto_eject_hosts: false\n  servers:\n%s",
			poolName(ports), ports[0], p.Hash, p.Distribution, tag, p.Redis, servers.String())
		if err := os.WriteFile(conf, []byte(yml), 0o644); err != nil {
			t.Fatalf("testserver: nutcracker config: %v", err)
		}
		// Without -o, Debian's build logs to /var/log/nutcracker.
		return []string{"-c", conf, "-s", strconv.Itoa(ports[1]), "-a", "127.0.0.1", "-o", "/dev/stderr"}
	}
	return launch(t, bin, 2, args, probeNutcracker)
}
