package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// TestSweepMemoryFlat runs "shardcache sweep" as a process of its own (the
// command built without -race: the race detector's shadow memory made the
// test binary's RSS 1.6 GB, and its growth noise) over a Memcached node
// listing 100k keys, then 1M, and compares the process's peak RSS: the
// listing goes to a spool file, not memory (the whole of it was once held,
// about 130 bytes a key: 130 MB at 1M keys), so the two differ by less
// than 20 MB. One key in a hundred moves: the listing is what grows. The
// peak is the process's own VmHWM, read from /proc while it runs: its
// rusage Maxrss is at least the test binary's RSS when it was forked
// (golang/go#32054), 1.6 GB under -race beside the other tests.
func TestSweepMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1.1M keys")
	}
	bin := filepath.Join(t.TempDir(), "shardcache")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the command: %v\n%s", err, out)
	}
	peak := map[int]int64{}
	for _, n := range []int{100_000, 1_000_000} {
		servers := testserver.MemcachedArgs(t, 2, "-m", "1024")
		from := []ring.Node{{Name: "a", Addr: servers[0].Addr}}
		to := []ring.Node{{Name: "a", Addr: servers[0].Addr}, {Name: "b", Addr: servers[1].Addr, Weight: 0.01}}
		fill(t, from, n)
		// 30 s timeouts: a read once took 5 s (the default) while CI ran
		// the chaos tests beside this one.
		cmd := exec.Command(bin, "sweep", "--quiet", "--backend", "memcached", "--rate", "0", "--timeout", "30s",
			"--from", formatNodes(from), "--to", formatNodes(to))
		var buf strings.Builder
		cmd.Stdout, cmd.Stderr = &buf, &buf
		testserver.LinkToParent(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		hwm := make(chan int64, 1)
		go func() { hwm <- watchHWM(cmd.Process.Pid, done) }()
		err := cmd.Wait()
		close(done)
		out := buf.String()
		if err != nil {
			t.Fatalf("sweep of %d keys: %v\n%s", n, err, out)
		}
		if !strings.Contains(string(out), fmt.Sprintf("%d keys listed", n)) {
			t.Fatalf("sweep of %d keys:\n%s", n, out)
		}
		peak[n] = <-hwm // KiB
		if peak[n] == 0 {
			t.Fatalf("sweep of %d keys: no VmHWM read from /proc/%d/status", n, cmd.Process.Pid)
		}
		t.Logf("%d keys listed: peak RSS %.1f MB (rusage Maxrss %.1f MB)", n, float64(peak[n])/1024,
			float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)/1024)
	}
	if d := peak[1_000_000] - peak[100_000]; d > 20<<10 {
		t.Errorf("peak RSS grew %.1f MB from 100k to 1M listed keys; want under 20 MB", float64(d)/1024)
	}
}

// watchHWM reads the VmHWM of process pid (KiB) every millisecond until
// done is closed or the process is gone, and returns the last it read: the
// high-water mark only grows.
func watchHWM(pid int, done <-chan struct{}) int64 {
	var last int64
	path := fmt.Sprintf("/proc/%d/status", pid)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					if kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64); err == nil && kb > 0 {
						last = kb
					}
				}
			}
		}
		select {
		case <-done:
			return last
		case <-time.After(time.Millisecond):
		}
	}
}

// fill writes n keys of 32 bytes, without expiry, to the one node of
// nodes: pipelined "set … noreply" on one raw connection, then a "version"
// whose answer says memcached has read them all. The client under -race
// took minutes for the 1.1M keys; this takes seconds, and the test is about
// the sweep's memory, not the writes.
func fill(t *testing.T, nodes []ring.Node, n int) {
	t.Helper()
	if len(nodes) != 1 {
		t.Fatalf("fill writes to one node, not %d", len(nodes))
	}
	conn, err := net.DialTimeout("tcp", nodes[0].Addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Minute))
	w := bufio.NewWriterSize(conn, 1<<16)
	v := strings.Repeat("v", 32)
	for i := range n {
		fmt.Fprintf(w, "set mem:%d 0 0 %d noreply\r\n%s\r\n", i, len(v), v)
	}
	if _, err := w.WriteString("version\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "VERSION ") {
		t.Fatalf("fill %d keys: %q, %v (an error line means a set was refused)", n, line, err)
	}
}
