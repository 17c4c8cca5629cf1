package topology

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestDependencies checks that the package a client imports needs nothing
// but the standard library and ring: fsnotify and yaml come with topofile,
// etcd's gRPC client with etcdsource, for those who use them.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	deps := func(pkg string) []string {
		out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps",
			"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	allowed := append(deps("../ring"), "github.com/shardcache/shardcache/topology")
	for _, pkg := range deps(".") {
		if !slices.Contains(allowed, pkg) {
			t.Errorf("package topology depends on %s, which ring does not", pkg)
		}
	}
}
