// Package testserver starts real redis-server, memcached and nutcracker
// (twemproxy) processes on free loopback ports for integration tests.
//
// Each helper waits until the server answers, stops it in t.Cleanup, and
// puts the server's own output in the failure message when it does not come
// up. A missing binary skips the test, except under CI=true where it fails:
// CI must never pass by skipping the tests that matter.
//
// SecureRedis and SecureMemcached (secure.go) start servers that require a
// password, ACL users or TLS, with certificates from a CA made for the test
// (NewCA).
package testserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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
)

const (
	// startTimeout bounds the wait for one process to answer.
	startTimeout = 5 * time.Second
	// attempts is how many times a process that exits at start-up is run
	// again, usually because another process took its port in between.
	attempts = 3
	// maxOutput caps the output kept per server; the start-up lines, which
	// explain failures, come first.
	maxOutput = 1 << 20
)

// ClientTimeout is the network timeout for a test's clients of servers no
// fault touches: the clients' defaults (500 ms, gomemcache's and
// shardcache's) are timeouts a healthy server on a busy machine reached in
// CI, and a test that is not about timeouts must not depend on them.
const ClientTimeout = 5 * time.Second

// EnvMark names the variable set in the environment of every server this
// package starts, to the test process's pid: a process that has it and
// outlived its test is a leak (/proc/PID/environ shows it).
const EnvMark = "SHARDCACHE_TESTSERVER"

// errExited reports a process that died before it answered.
var errExited = errors.New("testserver: process exited before it answered")

// Server is one server process started for a test.
type Server struct {
	// Addr is where the server listens, "127.0.0.1:PORT".
	Addr string

	// What to run; fixed once the ports are chosen, so Restart reuses them.
	t     testing.TB
	bin   string
	ports []int                            // ports[0] is Addr's; nutcracker also needs a stats port
	args  func(ports []int) []string       // may write files, such as nutcracker's config
	probe func(ports []int, pid int) error // nil when the server answers and is this process
	out   *output                          // stdout and stderr since the last port change

	mu   sync.Mutex
	cmd  *exec.Cmd     // nil when stopped
	done chan struct{} // closed when cmd has exited
}

// Stop kills the process and waits for it to exit, so that its port no
// longer accepts connections. It may be called more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
}

// Pid returns the server's process ID, or 0 when it is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Restart stops the server if it runs and starts it again on the same port,
// with no data: the servers run without persistence. It fails the test if
// the server does not come back; call it from the test's goroutine.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
	var err error
	for range attempts {
		if err = s.start(); !errors.Is(err, errExited) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("testserver: restart %s on %s: %v\n%s", filepath.Base(s.bin), s.Addr, err, s.out)
	}
}

// Redis starts n redis-server processes without persistence.
func Redis(t testing.TB, n int) []*Server {
	t.Helper()
	return RedisArgs(t, n)
}

// RedisArgs starts n redis-server processes as Redis does, with extra
// arguments after its own: "--maxmemory", "8mb", "--maxmemory-policy",
// "allkeys-lru" gives each a memory limit it evicts at.
func RedisArgs(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	bin := binary(t, "redis-server")
	dir := t.TempDir()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = launch(t, bin, 1, func(p []int) []string {
			return append([]string{
				"--port", strconv.Itoa(p[0]), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--daemonize", "no",
				"--protected-mode", "no", "--dir", dir,
			}, extra...)
		}, probeRedis)
	}
	return servers
}

// Memcached starts n memcached processes with 64 MiB of memory each.
func Memcached(t testing.TB, n int) []*Server {
	t.Helper()
	return MemcachedArgs(t, n)
}

// MemcachedArgs starts n memcached processes as Memcached does, with extra
// arguments after its own: "-m", "1024" gives each 1 GiB instead.
func MemcachedArgs(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	bin := binary(t, "memcached")
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = launch(t, bin, 1, func(p []int) []string {
			args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(p[0]), "-U", "0", "-m", "64"}
			if os.Geteuid() == 0 {
				// memcached refuses to run as root unless told to.
				args = append(args, "-u", "root")
			}
			return append(args, extra...)
		}, probeMemcached)
	}
	return servers
}

// Nutcracker starts twemproxy with one pool in front of backends, using the
// given hash (such as "murmur" or "fnv1a_64") and distribution (such as
// "ketama" or "modula"); redis selects the Redis protocol, else Memcached's.
//
// A backend is "host:port" or "host:port name", each with weight 1. Ketama
// places keys by the name when there is one, else by "host:port", so names
// make placement independent of the ports the backends happened to get.
// The proxy's readiness does not depend on its backends being up.
func Nutcracker(t testing.TB, backends []string, hash, distribution string, redis bool) *Server {
	t.Helper()
	p := Pool{Hash: hash, Distribution: distribution, Redis: redis}
	for _, b := range backends {
		addr, name, _ := strings.Cut(strings.TrimSpace(b), " ")
		p.Backends = append(p.Backends, Backend{Addr: addr, Name: strings.TrimSpace(name)})
	}
	return NutcrackerPool(t, p)
}

// Addrs returns the servers' addresses, in order.
func Addrs(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// binary finds a server binary, skipping the test when it is missing, or
// failing it under CI.
func binary(t testing.TB, name string) string {
	t.Helper()
	if path, err := exec.LookPath(name); err == nil {
		return path
	}
	// Debian installs nutcracker in /usr/sbin, outside a normal user's PATH.
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin"} {
		if path, err := exec.LookPath(filepath.Join(dir, name)); err == nil {
			return path
		}
	}
	msg := fmt.Sprintf("testserver: %s not found; install it with `make deps` "+
		"(apt-get install redis-server memcached nutcracker)", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// launch starts one server on nports free ports, trying other ports when
// the process exits at start-up.
func launch(t testing.TB, bin string, nports int, args func([]int) []string, probe func([]int, int) error) *Server {
	t.Helper()
	s := &Server{t: t, bin: bin, args: args, probe: probe}
	t.Cleanup(s.Stop)
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		s.out = new(output) // only the last attempt explains a failure
		s.ports = freePorts(t, nports)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ports[0]))
		err := s.start()
		if err == nil {
			return s
		}
		if !errors.Is(err, errExited) || attempt == attempts {
			t.Fatalf("testserver: start %s on %s: %v\n%s", filepath.Base(bin), s.Addr, err, s.out)
		}
		t.Logf("testserver: %s on %s exited at start-up, trying another port", filepath.Base(bin), s.Addr)
	}
}

// start runs the process once and waits until it answers. s.mu is held.
func (s *Server) start() error {
	cmd := exec.Command(s.bin, s.args(s.ports)...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	// The mark in its environment tells a test server from any other
	// process of the same name: .ci/run fails when one outlives the suite.
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", EnvMark, os.Getpid()))
	// SHARDCACHE_TESTSERVER_UNLINKED=1 leaves the link out: only
	// TestServersDieWithTheTest sets it, to show that its check fails then.
	if os.Getenv("SHARDCACHE_TESTSERVER_UNLINKED") != "1" {
		LinkToParent(cmd)
	}
	fmt.Fprintf(s.out, "$ %q\n", cmd.Args)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done

	deadline := time.Now().Add(startTimeout)
	for {
		err := s.probe(s.ports, cmd.Process.Pid)
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("%w (%v)", errExited, cmd.ProcessState)
		default:
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("no answer after %v: %w", startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the process and waits for it. s.mu is held.
func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill() // fails only when it has exited already
	<-s.done
	s.cmd = nil
}

// freePorts returns n distinct ports that were free a moment ago. Another
// process may take one before the server binds it; launch then retries.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testserver: free port: %v", err)
		}
		// Closed at return, not here, so the n ports differ.
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// dial connects to a local port with a short deadline for the whole exchange.
func dial(port int) (net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	return c, bufio.NewReader(c), nil
}

// probeRedis checks that PING answers +PONG and that the server answering
// is this process, not another one that won the race for the port.
func probeRedis(ports []int, pid int) error {
	c, r, err := dial(ports[0])
	if err != nil {
		return err
	}
	defer c.Close()
	return redisAnswers(c, r, pid)
}

// redisAnswers is probeRedis on a connection made (and logged in) already.
func redisAnswers(c net.Conn, r *bufio.Reader, pid int) error {
	if _, err := io.WriteString(c, "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return err
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		return fmt.Errorf("PING: %q, %v", line, err)
	}
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "$") {
		return fmt.Errorf("INFO: %q, %v", line, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 {
		return fmt.Errorf("INFO: %q", line)
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return err
	}
	return checkPid(string(info), "process_id:", pid)
}

// probeMemcached checks that "version" answers and that the server
// answering is this process.
func probeMemcached(ports []int, pid int) error {
	c, r, err := dial(ports[0])
	if err != nil {
		return err
	}
	defer c.Close()
	return memcachedAnswers(c, r, pid)
}

// memcachedAnswers is probeMemcached on a connection made (and logged in)
// already.
func memcachedAnswers(c net.Conn, r *bufio.Reader, pid int) error {
	if _, err := io.WriteString(c, "version\r\nstats\r\n"); err != nil {
		return err
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "VERSION") {
		return fmt.Errorf("version: %q, %v", line, err)
	}
	var stats strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("stats: %v", err)
		}
		if line == "END\r\n" {
			break
		}
		stats.WriteString(line)
	}
	return checkPid(stats.String(), "STAT pid ", pid)
}

// probeNutcracker checks that the stats port reports this process's pool,
// then that the proxy port accepts. It sends no command: that would reach
// a backend, and tests may start the proxy with backends down.
func probeNutcracker(ports []int, _ int) error {
	c, r, err := dial(ports[1])
	if err != nil {
		return err
	}
	stats, err := io.ReadAll(r) // nutcracker writes its stats and closes
	c.Close()
	if err != nil {
		return err
	}
	if !bytes.Contains(stats, []byte(`"`+poolName(ports)+`"`)) {
		return fmt.Errorf("stats port %d belongs to another nutcracker", ports[1])
	}
	c, _, err = dial(ports[0])
	if err != nil {
		return err
	}
	return c.Close()
}

// poolName names nutcracker's pool after its ports, so its stats tell this
// process from another one.
func poolName(ports []int) string {
	return fmt.Sprintf("shardcache_%d_%d", ports[0], ports[1])
}

// checkPid finds "<key><pid>" on a line of a server's self-description.
func checkPid(text, key string, pid int) error {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("port taken by another server (pid %s, want %d)", v, pid)
			}
			return nil
		}
	}
	return fmt.Errorf("no %q in the server's answer", key)
}

// output collects a process's stdout and stderr, which exec writes from its
// own goroutines, keeping the first maxOutput bytes.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if room := maxOutput - o.buf.Len(); room > 0 {
		o.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
