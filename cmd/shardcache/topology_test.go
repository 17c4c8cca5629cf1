package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/etcdsource"
	"github.com/shardcache/shardcache/topology/topofile"
)

const (
	fourNodes = "a=10.0.0.1:11211,b=10.0.0.2:11211,c=10.0.0.3:11211,d=10.0.0.4:11211"
	fiveNodes = fourNodes + ",e=10.0.0.5:11211"
)

// etcdSource connects to the test's etcd at key.
func etcdSource(t *testing.T, addr, key string) *etcdsource.Source {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &etcdsource.Source{Client: cli, Key: key}
}

// mustRun runs a command line that must succeed, and returns its stdout.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCmd(t, args...)
	if code != exitOK {
		t.Fatalf("%q: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

// wantIn fails the test unless out holds each of wants.
func wantIn(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, out)
		}
	}
}

func TestTopologyPublish(t *testing.T) {
	srv := testserver.Etcd(t)
	etcd := []string{"--etcd", srv.Addr, "--key", "/shardcache/cli"}
	publish := func(args ...string) []string {
		return append(append([]string{"topology", "publish"}, etcd...), args...)
	}
	show := append([]string{"topology", "show"}, etcd...)
	src := etcdSource(t, srv.Addr, "/shardcache/cli")

	out := mustRun(t, publish("--to", fourNodes, "--yes")...)
	wantIn(t, "first publish", out, "No topology at /shardcache/cli yet", "First topology", "without a migration", "Published version")
	first, err := src.Get(t.Context())
	if err != nil || len(first.Nodes) != 4 || first.Migration != nil {
		t.Fatalf("after the first publish: %+v, %v", first, err)
	}
	wantIn(t, "show", mustRun(t, show...), "version "+itoa(first.Version)+", 4 nodes", "a     10.0.0.1:11211  1")

	// A dry run prints the plan and writes nothing; without --yes and
	// without a terminal, publish refuses.
	// A change that adds a node is checked, on servers of a --backend;
	// these addresses have none.
	code, out, errOut := runCmd(t, publish("--to", fiveNodes, "--dry-run")...)
	if code != exitUsage || !strings.Contains(errOut, "--backend") || !strings.Contains(errOut, "--skip-empty-check") {
		t.Fatalf("publish adding a node without --backend: exit %d\n%s%s", code, out, errOut)
	}
	out = mustRun(t, publish("--to", fiveNodes, "--dry-run", "--skip-empty-check")...)
	wantIn(t, "dry run", out, "Plan: 4 nodes → 5 nodes", "Keys that move", "Migration: starts 2m0s after the write, window 1h0m0s", "Dry run: nothing published")
	code, out, errOut = runCmd(t, publish("--to", fiveNodes, "--skip-empty-check")...)
	if code != exitUsage || !strings.Contains(errOut, "--yes") {
		t.Fatalf("publish without --yes: exit %d\n%s%s", code, out, errOut)
	}
	if got, _ := src.Get(t.Context()); got.Version != first.Version {
		t.Fatalf("version %d after a dry run and a refusal, want %d", got.Version, first.Version)
	}

	// The migration: from the nodes at the key, with a start and a window.
	before := time.Now()
	out = mustRun(t, publish("--to", fiveNodes, "--window", "30m", "--start-in", "5m", "--skip-empty-check", "--yes")...)
	wantIn(t, "publish", out, "Topology at /shardcache/cli: version "+itoa(first.Version)+", 4 nodes", "Keys that move", "Published version", "window 30m0s")
	second, err := src.Get(t.Context())
	if err != nil || len(second.Nodes) != 5 || second.Migration == nil || len(second.Migration.From) != 4 {
		t.Fatalf("after the second publish: %+v, %v", second, err)
	}
	if m := second.Migration; m.Window != 30*time.Minute || m.Start.Before(before.Add(5*time.Minute)) || m.Start.After(time.Now().Add(5*time.Minute+time.Second)) {
		t.Fatalf("migration %+v, want a window of 30m and a start 5m after the write", m)
	}
	wantIn(t, "show", mustRun(t, show...), "version "+itoa(second.Version)+", 5 nodes",
		"Migration from "+fourNodes+" (ring)", "before start, starts in")

	// Another change before this one is over is refused, unless asked for;
	// removing four of five nodes is refused, unless allowed. A refusal is
	// not a usage error: its reason alone, exit 1.
	code, _, errOut = runCmd(t, publish("--to", "a=10.0.0.1:11211", "--yes")...)
	if code != exitFail || !strings.Contains(errOut, "--replace-running") || strings.Contains(errOut, "Usage:") {
		t.Fatalf("publish during a migration: exit %d\n%s", code, errOut)
	}
	code, _, errOut = runCmd(t, publish("--to", "a=10.0.0.1:11211", "--replace-running", "--yes")...)
	if code != exitFail || !strings.Contains(errOut, "removes too much") || !strings.Contains(errOut, "--max-removed-share") || strings.Contains(errOut, "Usage:") {
		t.Fatalf("publish removing 4 of 5 nodes: exit %d\n%s", code, errOut)
	}
	mustRun(t, publish("--to", "a=10.0.0.1:11211", "--replace-running", "--max-removed-share", "0.8", "--yes")...)
	third, err := src.Get(t.Context())
	if err != nil || len(third.Nodes) != 1 || third.MaxRemovedShare != 0.8 {
		t.Fatalf("after the third publish: %+v, %v", third, err)
	}

	// show --json is the topology's encoding, version included.
	got, err := topofile.Parse([]byte(mustRun(t, append(show, "--json")...)), topofile.JSON)
	if err != nil || got.Version != third.Version || !got.Equal(third) {
		t.Fatalf("show --json: %+v, %v; want %+v", got, err, third)
	}
}

// TestTopologyPublishChecksAddedNodes: publish refuses a change adding a
// node that holds keys (a node added back with old values), and publishes
// it once the node is flushed.
func TestTopologyPublishChecksAddedNodes(t *testing.T) {
	for _, backend := range []string{"redis", "memcached"} {
		t.Run(backend, func(t *testing.T) {
			srv := testserver.Etcd(t)
			var servers []*testserver.Server
			b := client.Redis
			if backend == "redis" {
				servers = testserver.Redis(t, 2)
			} else {
				servers, b = testserver.Memcached(t, 2), client.Memcached
			}
			nodes := []ring.Node{{Name: "a", Addr: servers[0].Addr, Weight: 1}, {Name: "b", Addr: servers[1].Addr, Weight: 1}}
			key := "/shardcache/check-" + backend
			publish := func(args ...string) []string {
				return append([]string{"topology", "publish", "--etcd", srv.Addr, "--key", key, "--backend", backend, "--yes"}, args...)
			}
			mustRun(t, publish("--to", "a="+nodes[0].Addr)...)
			old, err := client.New(client.Options{Backend: b, Nodes: nodes[1:]})
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			if err := old.Set(t.Context(), "left-behind", []byte("v1"), 0); err != nil {
				t.Fatal(err)
			}
			both := "a=" + nodes[0].Addr + ",b=" + nodes[1].Addr
			code, out, errOut := runCmd(t, publish("--to", both)...)
			if code != exitFail || !strings.Contains(errOut, nodes[1].Addr) || !strings.Contains(errOut, "holds keys") || strings.Contains(out, "Published") {
				t.Fatalf("publish adding a node that holds a key: exit %d\n%s%s", code, out, errOut)
			}
			src := etcdSource(t, srv.Addr, key)
			if got, err := src.Get(t.Context()); err != nil || len(got.Nodes) != 1 {
				t.Fatalf("after the refusal the topology is %+v, %v; want the first, of 1 node", got, err)
			}
			other := "redis"
			if backend == "redis" {
				other = "memcached"
			}
			code, out, errOut = runCmd(t, append(publish("--to", both), "--backend", other)...)
			if code != exitUsage || !strings.Contains(errOut, "--backend "+backend) {
				t.Fatalf("publish with the wrong --backend: exit %d\n%s%s", code, out, errOut)
			}
			if err := old.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			out = mustRun(t, publish("--to", both)...)
			wantIn(t, "publish after the flush", out, "Checked: b="+nodes[1].Addr+" hold no keys", "Published version")
		})
	}
}

// TestTopologyPublishBadValue: over a value at the key that does not parse,
// publish refuses, saying why and what to do, and writes nothing; with
// --overwrite-bad-value it checks the change against --from, the nodes the
// processes still run, and refuses what they would refuse.
func TestTopologyPublishBadValue(t *testing.T) {
	srv := testserver.Etcd(t)
	const key = "/shardcache/bad"
	src := etcdSource(t, srv.Addr, key)
	if _, err := src.Publish(t.Context(), &topology.Topology{Nodes: mustNodes(t, fourNodes)}, 0); err != nil {
		t.Fatal(err)
	}
	put, err := src.Client.Put(t.Context(), key, `{"nodes": [{"addr": "10.0.0.1:11211", "wieght": 2}]}`)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(args ...string) []string {
		return append([]string{"topology", "publish", "--etcd", srv.Addr, "--key", key, "--yes"}, args...)
	}
	unchanged := func(what string) {
		t.Helper()
		if _, err := src.Get(t.Context()); !errors.Is(err, etcdsource.ErrBadValue) || !strings.Contains(err.Error(), "revision "+itoa(put.Header.Revision)) {
			t.Fatalf("after %s, the key holds %v; want the bad value", what, err)
		}
	}

	code, out, errOut := runCmd(t, publish("--to", "a=10.0.0.1:11211")...)
	if code != exitFail || !strings.Contains(errOut, "wieght") || !strings.Contains(errOut, "--overwrite-bad-value") ||
		strings.Contains(errOut, "Usage:") || strings.Contains(out, "Published") {
		t.Fatalf("publish over a bad value: exit %d\n%s%s", code, out, errOut)
	}
	unchanged("the refusal")
	code, out, errOut = runCmd(t, publish("--to", "a=10.0.0.1:11211", "--from", fourNodes, "--overwrite-bad-value")...)
	if code != exitFail || !strings.Contains(errOut, "removes too much") || strings.Contains(errOut, "Usage:") || strings.Contains(out, "Published") {
		t.Fatalf("publish over a bad value removing 3 of the 4 nodes of --from: exit %d\n%s%s", code, out, errOut)
	}
	unchanged("a change the processes would refuse")
	out = mustRun(t, publish("--to", fiveNodes, "--from", fourNodes, "--overwrite-bad-value", "--skip-empty-check")...)
	wantIn(t, "publish over a bad value with --overwrite-bad-value", out, "Plan: 4 nodes → 5 nodes", "Published version")
	if got, err := src.Get(t.Context()); err != nil || len(got.Nodes) != 5 || got.Migration == nil || len(got.Migration.From) != 4 {
		t.Fatalf("after the overwrite: %+v, %v; want 5 nodes migrating from 4", got, err)
	}
}

// TestTopologyEtcdUnreachable: an etcd the commands cannot reach (a port
// that refuses, a listener that never answers) fails them within
// --dial-timeout with an error that names each endpoint and its cause,
// not "context deadline exceeded", and without a usage line.
func TestTopologyEtcdUnreachable(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := closed.Addr().String()
	closed.Close()
	silent := silentListener(t)
	endpoints := refusing + "," + silent
	for _, args := range [][]string{
		{"topology", "show"},
		{"topology", "status"},
		{"topology", "publish", "--to", fourNodes, "--yes"},
		{"topology", "watch"},
		{"balance"},
	} {
		args = append(args, "--etcd", endpoints, "--key", "/k", "--dial-timeout", "1s")
		code, out, errOut := runCmd(t, args...)
		if code != exitFail || out != "" || !strings.Contains(errOut, "cannot connect (--dial-timeout 1s)") ||
			!strings.Contains(errOut, refusing+": connect: connection refused") || !strings.Contains(errOut, silent+": accepts connections, but no etcd answered") ||
			strings.Contains(errOut, "deadline") || strings.Contains(errOut, "Usage:") {
			t.Errorf("%q: exit %d, want 1 naming each endpoint and its cause; stdout %q, stderr:\n%s", args, code, out, errOut)
		}
	}
	code, _, errOut := runCmd(t, "topology", "show", "--etcd", refusing, "--key", "/k", "--dial-timeout", "0s")
	if code != exitUsage || !strings.Contains(errOut, "--dial-timeout 0s") {
		t.Errorf("--dial-timeout 0s: exit %d, want 2:\n%s", code, errOut)
	}
}

// silentListener accepts TCP connections and never answers on them, as a
// service that is not etcd's gRPC, or one that waits for TLS, does; it
// returns its address.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func TestTopologyStatus(t *testing.T) {
	srv := testserver.Etcd(t)
	src := etcdSource(t, srv.Addr, "/shardcache/status")
	status := []string{"topology", "status", "--etcd", srv.Addr, "--key", "/shardcache/status"}
	wantIn(t, "status of an empty key", mustRun(t, status...), "0 processes on version 0")
	mustRun(t, "topology", "publish", "--etcd", srv.Addr, "--key", "/shardcache/status", "--to", fourNodes, "--yes")
	v1, _ := src.Get(t.Context())
	mustRun(t, "topology", "publish", "--etcd", srv.Addr, "--key", "/shardcache/status", "--to", fiveNodes, "--start-in", "0s", "--window", "0s", "--skip-empty-check", "--yes")
	v2, _ := src.Get(t.Context())
	for id, v := range map[string]int64{"web-1": v2.Version, "web-2": v2.Version, "web-3": v1.Version} {
		r, err := src.Register(t.Context(), id, v, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
	}
	out := mustRun(t, status...)
	wantIn(t, "status", out, "2 processes on version "+itoa(v2.Version)+", 1 still on "+itoa(v1.Version), "web-3    "+itoa(v1.Version))
}

// lines runs a command line in the background, its stdout read a line at a
// time; wait returns its exit status once it has ended.
func lines(t *testing.T, args ...string) (next func() string, wait func() int) {
	t.Helper()
	r, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		var errOut strings.Builder
		code := run(context.Background(), args, w, &errOut)
		if code != exitOK {
			t.Errorf("%q: exit %d\n%s", args, code, errOut.String())
		}
		w.Close()
		done <- code
	}()
	sc := bufio.NewScanner(r)
	got := make(chan string)
	go func() {
		for sc.Scan() {
			got <- sc.Text()
		}
		close(got)
	}()
	next = func() string {
		t.Helper()
		select {
		case l, ok := <-got:
			if !ok {
				t.Fatalf("%q ended early", args)
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("%q: no line within 10 s", args)
		}
		return ""
	}
	wait = func() int {
		for range got {
		}
		return <-done
	}
	return next, wait
}

func TestTopologyWatchEtcd(t *testing.T) {
	srv := testserver.Etcd(t)
	src := etcdSource(t, srv.Addr, "/shardcache/watch")
	rev, err := src.Publish(t.Context(), &topology.Topology{Nodes: mustNodes(t, fourNodes)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	next, wait := lines(t, "topology", "watch", "--etcd", srv.Addr, "--key", "/shardcache/watch", "--count", "2")
	wantIn(t, "first line", next(), "version "+itoa(rev)+": 4 nodes "+fourNodes)
	m := &topology.Migration{From: mustNodes(t, fourNodes), Start: time.Now().Add(time.Minute), Window: time.Hour}
	rev2, err := src.Publish(t.Context(), &topology.Topology{Nodes: mustNodes(t, fiveNodes), Migration: m}, rev)
	if err != nil {
		t.Fatal(err)
	}
	wantIn(t, "second line", next(), "version "+itoa(rev2)+": 5 nodes", "migration from 4 nodes", "window 1h0m0s: before start")
	if code := wait(); code != exitOK {
		t.Fatalf("watch --count 2: exit %d", code)
	}
}

func TestTopologyWatchFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodes.yaml")
	write := func(text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("- {name: a, addr: '10.0.0.1:11211'}\n")
	next, wait := lines(t, "topology", "watch", "--file", path, "--count", "3")
	wantIn(t, "first line", next(), ": 1 node a=10.0.0.1:11211")
	write("- {name: a, addr: '10.0.0.1:11211', wieght: 2}\n")
	wantIn(t, "second line", next(), "error: ", "wieght")
	write("- {name: a, addr: '10.0.0.1:11211'}\n- {name: b, addr: '10.0.0.2:11211'}\n")
	wantIn(t, "third line", next(), ": 2 nodes a=10.0.0.1:11211,b=10.0.0.2:11211")
	if code := wait(); code != exitOK {
		t.Fatalf("watch --count 3: exit %d", code)
	}
	wantIn(t, "show --file", mustRun(t, "topology", "show", "--file", path), "Topology from file "+path, ", 2 nodes\n", "b     10.0.0.2:11211  1")
	write("- {name: a, addr: '10.0.0.1:11211'}\n")
	wantIn(t, "show --file of one node", mustRun(t, "topology", "show", "--file", path), ", 1 node\n")
}

func TestTopologyShowDNS(t *testing.T) {
	s := testserver.DNS(t)
	s.SetSRV("_memcache._tcp.cache.test", testserver.SRV{Target: "cache-0.cache.test", Port: 11211}, testserver.SRV{Target: "cache-1.cache.test", Port: 11211})
	s.SetA("cache-0.cache.test", "127.0.1.1")
	s.SetA("cache-1.cache.test", "127.0.1.2")
	out := mustRun(t, "topology", "show", "--dns", "_memcache._tcp.cache.test.", "--dns-server", s.Addr)
	wantIn(t, "show --dns", out, "2 nodes", "cache-0.cache.test  127.0.1.1:11211  1", "cache-1.cache.test  127.0.1.2:11211  1")
	s.SetNXDomain("_memcache._tcp.cache.test")
	code, _, errOut := runCmd(t, "topology", "show", "--dns", "_memcache._tcp.cache.test.", "--dns-server", s.Addr)
	if code != exitFail || !strings.Contains(errOut, "without nodes") {
		t.Fatalf("show --dns of NXDOMAIN: exit %d\n%s", code, errOut)
	}
}

func TestTopologyBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topology"}, "Usage: shardcache topology COMMAND"},
		{[]string{"topology", "publsh"}, `unknown command "publsh"`},
		{[]string{"topology", "show"}, "want one of --etcd"},
		{[]string{"topology", "show", "--etcd", "127.0.0.1:1"}, "want --key"},
		{[]string{"topology", "show", "--file", "a.json", "--dns", "h:1"}, "only one"},
		{[]string{"topology", "show", "--key", "/k", "--file", "a.json"}, "--key: only with --etcd"},
		{[]string{"topology", "show", "--file", "a.json", "--json", "--yaml"}, "only one"},
		{[]string{"topology", "status", "--file", "a.json"}, "flag provided but not defined"},
		{[]string{"topology", "publish", "--etcd", "127.0.0.1:1", "--key", "/k"}, "want --to"},
		{[]string{"topology", "publish", "--etcd", "127.0.0.1:1", "--key", "/k", "--to", "a=h"}, "want HOST:PORT"},
		{[]string{"topology", "publish", "--etcd", "127.0.0.1:1", "--key", "/k", "--to", "a=h:1", "--window", "-1s"}, "--window"},
		{[]string{"topology", "publish", "--etcd", "127.0.0.1:1", "--key", "/k", "--to", "a=h:1", "--start-in", "-1s"}, "--start-in"},
		{[]string{"topology", "publish", "--etcd", "127.0.0.1:1", "--key", "/k", "--to", "a=h:1", "--max-removed-share", "1.5"}, "--max-removed-share"},
		{[]string{"topology", "publish", "--etcd", "127.0.0.1:1", "--key", "/k", "--to", "a=h:1", "--from-kind", "jump"}, "--from-kind"},
		{[]string{"topology", "publish", "--etcd", "127.0.0.1:1", "--key", "/k", "--to", "a=h:1@eu-1a"}, "a topology has no zones yet"},
		{[]string{"topology", "publish", "--etcd", "127.0.0.1:1", "--key", "/k", "--to", "a=h:1", "--from", "a=h:1@eu-1a"}, "--from: node a: zone"},
		{[]string{"topology", "watch", "--file", "a.json", "--count", "-1"}, "--count"},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%q: exit %d, want %d with %q on stderr; stderr:\n%s\nstdout:\n%s", tc.args, code, exitUsage, tc.want, errOut, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "topology"}, "publish"},
		{[]string{"topology", "publish", "-h"}, "-max-removed-share"},
		{[]string{"topology", "watch", "--help"}, "-count"},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		if code != exitOK || !strings.Contains(out, tc.want) {
			t.Errorf("%q: exit %d, stdout lacks %q:\n%s%s", tc.args, code, tc.want, out, errOut)
		}
	}
	// A bad node in a file: the program and each package said once.
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("- {name: a, addr: 'x'}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCmd(t, "topology", "show", "--file", path)
	if code != exitFail || strings.Count(errOut, "shardcache") != 1 || !strings.Contains(errOut, `node 1 (name "a"): bad address`) {
		t.Errorf("show of a bad file: exit %d, stderr:\n%s\nwant exit 1, the node, and \"shardcache\" once", code, errOut)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestTopologyWatchChild is "shardcache topology watch" in a process of its
// own, for TestTopologyWatchProcesses; it does nothing in a normal run.
func TestTopologyWatchChild(t *testing.T) {
	args := os.Getenv("SHARDCACHE_WATCH_CHILD")
	if args == "" {
		t.Skip("run by TestTopologyWatchProcesses")
	}
	os.Exit(run(context.Background(), strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
}

// TestTopologyWatchProcesses has three OS processes follow one etcd key,
// and checks that a publish reaches each of them within a second.
func TestTopologyWatchProcesses(t *testing.T) {
	if os.Getenv("SHARDCACHE_WATCH_CHILD") != "" {
		t.Skip("a child process")
	}
	srv := testserver.Etcd(t)
	src := etcdSource(t, srv.Addr, "/shardcache/fleet")
	rev, err := src.Publish(t.Context(), &topology.Topology{Nodes: mustNodes(t, fourNodes)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join([]string{"topology", "watch", "--etcd", srv.Addr, "--key", "/shardcache/fleet", "--count", "2"}, "\x1f")
	type child struct {
		cmd   *exec.Cmd
		lines chan string
		err   strings.Builder
	}
	var children []*child
	for range 3 {
		c := &child{lines: make(chan string, 2)}
		c.cmd = exec.Command(os.Args[0], "-test.run=^TestTopologyWatchChild$", "-test.count=1")
		c.cmd.Env = append(os.Environ(), "SHARDCACHE_WATCH_CHILD="+args)
		testserver.LinkToParent(c.cmd)
		c.cmd.Stderr = &c.err
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				c.lines <- sc.Text()
			}
			close(c.lines)
		}()
		children = append(children, c)
	}
	line := func(i int, c *child) string {
		t.Helper()
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("process %d ended early: %v\n%s", i, c.cmd.Wait(), c.err.String())
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("process %d: no line within 10 s\n%s", i, c.err.String())
		}
		return ""
	}
	for i, c := range children {
		wantIn(t, "first line", line(i, c), "version "+itoa(rev)+":")
	}
	m := &topology.Migration{From: mustNodes(t, fourNodes), Start: time.Now().Add(time.Minute).Truncate(time.Second), Window: time.Hour}
	published := time.Now()
	rev2, err := src.Publish(t.Context(), &topology.Topology{Nodes: mustNodes(t, fiveNodes), Migration: m}, rev)
	if err != nil {
		t.Fatal(err)
	}
	var latencies []time.Duration
	for i, c := range children {
		l := line(i, c)
		latencies = append(latencies, time.Since(published))
		// Each reports the same start and window, written by the publisher.
		wantIn(t, "second line", l, "version "+itoa(rev2)+": 5 nodes", "start "+m.Start.Format(time.RFC3339)+", window 1h0m0s")
	}
	// Logged, not bounded: a busy machine stretches it. That each
	// process received the publish, with its start and window, is checked
	// above.
	t.Logf("publish to receipt in 3 processes (read in turn): %v", latencies)
	for i, c := range children {
		for range c.lines {
		}
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("process %d: %v\n%s", i, err, c.err.String())
		}
	}
}
