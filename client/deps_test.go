package client

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestUserDependencies builds a one-file module that imports client, as a
// user's does, and checks that the libraries only shardcache's tests,
// command and other packages use (miniredis and its Lua, yaml, gomemcache,
// which only compat/gomemcache needs, etcd's gRPC client, Prometheus's) are
// not among its packages, nor the first three among its requirements. It runs the go command offline, from the module cache and the project's
// go.sum, as on a fresh machine whose cache holds only what the build
// downloaded.
func TestUserDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The project's go.sum, so that the offline run below needs no checksum
	// database: with GOPROXY=off and a module missing from go.sum, the go
	// command would ask sum.golang.org, unreachable on a machine without
	// its cache of earlier lookups.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	write("go.mod", "module example.com/user\n\ngo 1.26\n\nrequire github.com/shardcache/shardcache v0.0.0\n\nreplace github.com/shardcache/shardcache => "+root+"\n")
	write("main.go", `package main

import (
	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

func main() {
	c, err := client.New(client.Options{Nodes: []ring.Node{{Addr: "127.0.0.1:6379"}}})
	if err == nil {
		c.Close()
	}
}
`)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOSUMDB=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// -e: tidy also resolves the tests of the dependencies (go-redis's
	// ginkgo, say), which a build never downloads; offline, those lookups
	// fail, and they say nothing of what a user's build requires.
	run("mod", "tidy", "-e")
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	deps := run("list", "-deps", ".")
	why := run("mod", "why", "-vendor", "-m", "github.com/alicebob/miniredis/v2", "go.yaml.in/yaml/v3")
	for _, mod := range []string{"github.com/alicebob/miniredis", "github.com/yuin/gopher-lua", "go.yaml.in/yaml",
		"github.com/bradfitz/gomemcache", "go.etcd.io/etcd", "google.golang.org/grpc", "github.com/prometheus/client_golang"} {
		if strings.Contains(string(gomod), mod) || strings.Contains(deps, mod) {
			t.Errorf("a user importing client requires %s:\ngo.mod:\n%s\npackages:\n%s", mod, gomod, deps)
		}
	}
	if strings.Count(why, "does not need") != 2 {
		t.Errorf("go mod why:\n%s", why)
	}
	// Nor in its module graph, where go.sum and the module cache would
	// bring them (issue 45: the root module is the core; the command, the
	// harness and the sources with heavy clients are modules of their own).
	graph := run("mod", "graph")
	if !strings.Contains(graph, "github.com/redis/go-redis/v9@") {
		t.Errorf("go mod graph without go-redis:\n%s", graph)
	}
	for _, mod := range []string{"go.etcd.io/etcd", "github.com/Shopify/toxiproxy", "github.com/anishathalye/porcupine",
		"go.uber.org/zap", "github.com/rs/zerolog", "github.com/schollz/progressbar", "go.opentelemetry.io/otel/sdk",
		"google.golang.org/grpc", "github.com/prometheus/client_golang", "github.com/fsnotify/fsnotify", "github.com/miekg/dns"} {
		if strings.Contains(graph, mod) {
			t.Errorf("the module graph of a user importing client has %s:\n%s", mod, graph)
		}
	}
	if !strings.Contains(deps, "github.com/redis/go-redis/v9\n") {
		t.Errorf("the user's build lacks go-redis, which client wraps:\n%s", deps)
	}
}

// TestNoWireCode checks the seam's rule for this package: client holds
// policy, and the wire lives below it, so none of its non-test files imports
// net or bufio, or a wire package of ours; it reaches nodes through
// internal/node alone.
func TestNoWireCode(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "net" || path == "bufio" || strings.Contains(path, "/internal/wire") {
				t.Errorf("%s imports %s: wire code belongs under internal/", name, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source file of client found")
	}
}

// TestCoreRequirements holds the root module, the core, to at most eight
// direct requirements (issue 45): a module its packages or their tests do
// not need belongs to a module of its own beside it (docs/layout.md).
func TestCoreRequirements(t *testing.T) {
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var direct []string
	block := false
	for _, line := range strings.Split(string(gomod), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			block = true
		case block && line == ")":
			block = false
		case block && line != "" && !strings.HasSuffix(line, "// indirect"):
			direct = append(direct, line)
		case strings.HasPrefix(line, "require ") && !strings.HasSuffix(line, "// indirect"):
			direct = append(direct, strings.TrimPrefix(line, "require "))
		}
	}
	if len(direct) > 8 || len(direct) == 0 {
		t.Errorf("the root module requires %d modules directly, want 1 to 8:\n%s", len(direct), strings.Join(direct, "\n"))
	}
}
