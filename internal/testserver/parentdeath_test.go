package testserver

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServersDieWithTheTest runs a child test binary that starts a
// redis-server, a memcached and a nutcracker, SIGKILLs it (no cleanup runs,
// as when a binary is killed or panics on its -timeout), and finds none of
// the servers left. Started without LinkToParent, the same servers outlive
// the child: the check fails then, so it is not vacuous.
func TestServersDieWithTheTest(t *testing.T) {
	if os.Getenv("SHARDCACHE_ORPHAN_CHILD") == "1" {
		t.Skip("the child's part runs in TestOrphanChild")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	if left := orphansAfterKill(t, false); len(left) > 0 {
		t.Errorf("servers %v outlived the test process that started them", left)
	}
	if left := orphansAfterKill(t, true); len(left) == 0 {
		t.Error("without the link, no server outlived the killed child: the check above shows nothing")
	}
}

// orphansAfterKill runs TestOrphanChild in a child process, SIGKILLs it once
// its servers answer, and returns those of their processes still alive
// (zombies aside) after a grace period: the kernel delivers the
// parent-death signal as the child exits, so linked servers are gone well
// within it.
func orphansAfterKill(t *testing.T, unlinked bool) []int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOrphanChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SHARDCACHE_ORPHAN_CHILD=1")
	if unlinked {
		cmd.Env = append(cmd.Env, "SHARDCACHE_TESTSERVER_UNLINKED=1")
	}
	LinkToParent(cmd)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	sc := bufio.NewScanner(stdout)
	var seen strings.Builder
	for sc.Scan() {
		fmt.Fprintln(&seen, sc.Text())
		if rest, ok := strings.CutPrefix(sc.Text(), "ORPHAN-PIDS "); ok {
			for _, f := range strings.Fields(rest) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("child printed %q", sc.Text())
				}
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) == 0 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the child printed no pids:\n%s\n%s", seen.String(), stderr.String())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if unlinked { // whatever the test finds, nothing of it stays
		t.Cleanup(func() {
			for _, pid := range pids {
				if running(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}

	const grace = 5 * time.Second
	deadline := time.Now().Add(grace)
	for {
		var alive []int
		for _, pid := range pids {
			if running(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 || time.Now().After(deadline) {
			return alive
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running reports whether pid is a live process, not a zombie waiting for
// its new parent to reap it.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// TestOrphanChild is the child of TestServersDieWithTheTest: it starts its
// servers, prints their pids and waits to be killed.
func TestOrphanChild(t *testing.T) {
	if os.Getenv("SHARDCACHE_ORPHAN_CHILD") != "1" {
		t.Skip("run by TestServersDieWithTheTest")
	}
	r, m := Redis(t, 1)[0], Memcached(t, 1)[0]
	n := Nutcracker(t, []string{r.Addr}, "murmur", "ketama", true)
	fmt.Printf("ORPHAN-PIDS %d %d %d\n", r.Pid(), m.Pid(), n.Pid())
	<-t.Context().Done() // never: the parent kills this process
}
