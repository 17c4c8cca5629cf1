package testserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// conn is a raw client connection speaking RESP or memcached's text protocol.
type conn struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

func connect(t testing.TB, addr string) *conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &conn{t: t, c: c, r: bufio.NewReader(c)}
}

// send writes raw bytes.
func (c *conn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// line reads one line without its CRLF.
func (c *conn) line() string {
	c.t.Helper()
	l, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read: %v (got %q)", err, l)
	}
	return strings.TrimSuffix(l, "\r\n")
}

// do sends a RESP command and returns a simple reply as its line, a bulk
// reply as its value, and a nil bulk as "(nil)".
func (c *conn) do(args ...string) string {
	c.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	c.send(b.String())
	l := c.line()
	if !strings.HasPrefix(l, "$") {
		return l
	}
	n, err := strconv.Atoi(l[1:])
	if err != nil {
		c.t.Fatalf("bad bulk header %q", l)
	}
	if n < 0 {
		return "(nil)"
	}
	v := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, v); err != nil {
		c.t.Fatalf("read bulk: %v", err)
	}
	return string(v[:n])
}

// mcSet stores a value with memcached's "set".
func (c *conn) mcSet(key, value string) {
	c.t.Helper()
	c.send(fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", key, len(value), value))
	if l := c.line(); l != "STORED" {
		c.t.Fatalf("set %s: %q", key, l)
	}
}

// mcGet reads a value with memcached's "get"; ok is false on a miss.
func (c *conn) mcGet(key string) (value string, ok bool) {
	c.t.Helper()
	c.send("get " + key + "\r\n")
	l := c.line()
	if l == "END" {
		return "", false
	}
	var k string
	var flags, n int
	if _, err := fmt.Sscanf(l, "VALUE %s %d %d", &k, &flags, &n); err != nil || k != key {
		c.t.Fatalf("get %s: %q", key, l)
	}
	v := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, v); err != nil {
		c.t.Fatalf("get %s: %v", key, err)
	}
	if l := c.line(); l != "END" {
		c.t.Fatalf("get %s: trailing %q", key, l)
	}
	return string(v[:n]), true
}

func refused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("%s still accepts after Stop", addr)
	}
}

func TestRedis(t *testing.T) {
	servers := Redis(t, 2)
	addrs := Addrs(servers)
	if len(addrs) != 2 || addrs[0] == addrs[1] {
		t.Fatalf("Addrs = %v, want two distinct addresses", addrs)
	}
	for i, s := range servers {
		c := connect(t, s.Addr)
		if got := c.do("SET", "k", "v"+strconv.Itoa(i)); got != "+OK" {
			t.Fatalf("SET on %s: %q", s.Addr, got)
		}
	}
	// Each server holds its own value: they are separate processes.
	for i, s := range servers {
		if got, want := connect(t, s.Addr).do("GET", "k"), "v"+strconv.Itoa(i); got != want {
			t.Fatalf("GET on %s = %q, want %q", s.Addr, got, want)
		}
	}

	servers[0].Stop()
	servers[0].Stop() // idempotent
	refused(t, servers[0].Addr)
	if got := connect(t, servers[1].Addr).do("GET", "k"); got != "v1" {
		t.Fatalf("other server after Stop: GET = %q", got)
	}

	servers[0].Restart()
	c := connect(t, servers[0].Addr)
	if got := c.do("PING"); got != "+PONG" {
		t.Fatalf("PING after Restart: %q", got)
	}
	if got := c.do("GET", "k"); got != "(nil)" {
		t.Fatalf("GET after Restart = %q, want (nil): no persistence", got)
	}
}

func TestMemcached(t *testing.T) {
	servers := Memcached(t, 2)
	for i, s := range servers {
		connect(t, s.Addr).mcSet("k", "v"+strconv.Itoa(i))
	}
	for i, s := range servers {
		if got, ok := connect(t, s.Addr).mcGet("k"); !ok || got != "v"+strconv.Itoa(i) {
			t.Fatalf("get on %s = %q, %v", s.Addr, got, ok)
		}
	}
	servers[1].Stop()
	refused(t, servers[1].Addr)
	servers[1].Restart()
	if _, ok := connect(t, servers[1].Addr).mcGet("k"); ok {
		t.Fatal("value survived Restart")
	}
}

func TestNutcrackerRedis(t *testing.T) {
	backends := Redis(t, 2)
	proxy := Nutcracker(t, Addrs(backends), "murmur", "ketama", true)

	const keys = 100
	c := connect(t, proxy.Addr)
	for i := range keys {
		if got := c.do("SET", "key:"+strconv.Itoa(i), strconv.Itoa(i)); got != "+OK" {
			t.Fatalf("SET via nutcracker: %q", got)
		}
	}
	for i := range keys {
		if got := c.do("GET", "key:"+strconv.Itoa(i)); got != strconv.Itoa(i) {
			t.Fatalf("GET key:%d via nutcracker = %q", i, got)
		}
	}
	// Every key sits on exactly one backend, and both backends hold some.
	perBackend := make([]int, len(backends))
	direct := []*conn{connect(t, backends[0].Addr), connect(t, backends[1].Addr)}
	for i := range keys {
		found := 0
		for b, d := range direct {
			if d.do("GET", "key:"+strconv.Itoa(i)) != "(nil)" {
				perBackend[b]++
				found++
			}
		}
		if found != 1 {
			t.Fatalf("key:%d is on %d backends", i, found)
		}
	}
	if perBackend[0] == 0 || perBackend[1] == 0 {
		t.Fatalf("keys per backend = %v, want both used", perBackend)
	}

	proxy.Stop()
	refused(t, proxy.Addr)
}

func TestNutcrackerMemcachedNamed(t *testing.T) {
	backends := Memcached(t, 2)
	named := []string{backends[0].Addr + " alpha", backends[1].Addr + " beta"}
	proxy := Nutcracker(t, named, "fnv1a_64", "ketama", false)
	c := connect(t, proxy.Addr)
	c.mcSet("k", "v")
	if got, ok := c.mcGet("k"); !ok || got != "v" {
		t.Fatalf("get via nutcracker = %q, %v", got, ok)
	}
}

// TestNutcrackerBackendsDown checks the proxy comes up without its backends.
func TestNutcrackerBackendsDown(t *testing.T) {
	backends := Redis(t, 1)
	backends[0].Stop()
	proxy := Nutcracker(t, Addrs(backends), "murmur", "ketama", true)
	if got := connect(t, proxy.Addr).do("GET", "k"); !strings.HasPrefix(got, "-") {
		t.Fatalf("GET with the backend down = %q, want an error", got)
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of acting.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}

func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.failed, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}

func TestMissingBinary(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			r := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				binary(r, "shardcache-no-such-server")
			}()
			<-done
			if ci == "true" && !r.failed || ci != "true" && !r.skipped {
				t.Fatalf("CI=%q: skipped=%v failed=%v", ci, r.skipped, r.failed)
			}
			if !strings.Contains(r.msg, "make deps") {
				t.Fatalf("message %q does not say how to install", r.msg)
			}
		})
	}
}

func TestPaused(t *testing.T) {
	s := Memcached(t, 1)[0]
	if s.Paused() {
		t.Fatal("Paused before Pause")
	}
	s.Pause()
	for i := 0; !s.Paused(); i++ {
		if i == 20000 {
			t.Fatal("not Paused after Pause")
		}
		time.Sleep(time.Millisecond)
	}
	s.Resume()
	for i := 0; s.Paused(); i++ {
		if i == 20000 {
			t.Fatal("still Paused after Resume")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMemcachedClassic: behind its front, memcached answers the classic
// commands, values and noreply included, and ERROR to every meta command
// in its place in a pipeline.
func TestMemcachedClassic(t *testing.T) {
	s := MemcachedClassic(t, 1)[0]
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "set a 5 0 3\r\nabc\r\nmg a v\r\nms b 2 T0\r\nxy\r\nmn\r\nset q 0 0 1 noreply\r\nz\r\nget a q b\r\n")
	r := bufio.NewReader(c)
	want := []string{"STORED", "ERROR", "ERROR", "ERROR", "VALUE a 5 3", "abc", "VALUE q 0 1", "z", "END"}
	for _, w := range want {
		line, err := r.ReadString('\n')
		if err != nil || strings.TrimRight(line, "\r\n") != w {
			t.Fatalf("read %q, %v; want %q (after %q)", line, err, w, want)
		}
	}
}
