package testserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ConnCounter samples the client connections a redis-server or memcached
// has open, through a connection of its own (not counted), every
// millisecond until Stop, as the server itself counts them (Redis's INFO
// connected_clients, memcached's curr_connections); and how many it
// accepted meanwhile (total_connections_received, total_connections), which
// catches a connection too short-lived for any sample to see.
type ConnCounter struct {
	peak      atomic.Int64
	stop      chan struct{}
	stopOnce  sync.Once
	done      sync.WaitGroup
	acceptedN int64
}

// CountConns starts counting the connections of s, a redis-server or a
// memcached.
func (s *Server) CountConns(t testing.TB) *ConnCounter {
	t.Helper()
	redis := s.isRedis()
	conn, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	// sample returns the connections open besides this one and the
	// connections accepted since the server started.
	sample := func() (open, accepted int64, err error) {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		var fields map[string]string
		if redis {
			fields, err = redisInfo(conn, r)
			open, _ = strconv.ParseInt(fields["connected_clients"], 10, 64)
			accepted, _ = strconv.ParseInt(fields["total_connections_received"], 10, 64)
		} else {
			fields, err = memcachedStats(conn, r)
			open, _ = strconv.ParseInt(fields["curr_connections"], 10, 64)
			accepted, _ = strconv.ParseInt(fields["total_connections"], 10, 64)
		}
		if err == nil && open == 0 {
			err = fmt.Errorf("testserver: %s counts no connection, not even the counter's", s.Addr)
		}
		return open - 1, accepted, err
	}
	_, before, err := sample()
	if err != nil {
		t.Fatal(err)
	}
	c := &ConnCounter{stop: make(chan struct{})}
	t.Cleanup(func() { c.Stop() }) // a test that ends before its Stop
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		defer conn.Close()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for stopped := false; ; {
			select {
			case <-c.stop:
				stopped = true // one last sample, taken after Stop's call
			default:
			}
			n, accepted, err := sample()
			if err != nil {
				t.Error(err)
				return
			}
			for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
			}
			if stopped {
				c.acceptedN = accepted - before
				return
			}
			select {
			case <-c.stop:
			case <-tick.C:
			}
		}
	}()
	return c
}

// Stop ends the counting and returns the most connections seen open at
// once and the connections the server accepted since CountConns.
func (c *ConnCounter) Stop() (peak, accepted int64) {
	c.stopOnce.Do(func() { close(c.stop) })
	c.done.Wait()
	return c.peak.Load(), c.acceptedN
}

// redisInfo sends INFO and returns its fields.
func redisInfo(conn net.Conn, r *bufio.Reader) (map[string]string, error) {
	if _, err := conn.Write([]byte("INFO\r\n")); err != nil {
		return nil, err
	}
	return readInfo(r)
}

// readInfo reads INFO's answer and returns its fields.
func readInfo(r *bufio.Reader) (map[string]string, error) {
	l, err := r.ReadString('\n') // $<len>
	if err != nil {
		return nil, err
	}
	size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, "$")))
	if err != nil {
		return nil, fmt.Errorf("testserver: INFO answered %q", l)
	}
	buf := make([]byte, size+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(buf), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// memcachedStats sends stats and returns its fields.
func memcachedStats(conn net.Conn, r *bufio.Reader) (map[string]string, error) {
	if _, err := conn.Write([]byte("stats\r\n")); err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l = strings.TrimSpace(l)
		if l == "END" {
			return fields, nil
		}
		if f := strings.Fields(l); len(f) == 3 && f[0] == "STAT" {
			fields[f[1]] = f[2]
		}
	}
}

// Monitor records the commands a redis-server is sent by its clients
// (MONITOR), from the call to Stop.
type Monitor struct {
	s     *Server
	conn  net.Conn
	r     *bufio.Reader
	calls map[string]int64
}

// Monitor starts recording the commands s is sent.
func (s *Server) Monitor(t testing.TB) *Monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := r.ReadString('\n'); err != nil || l != "+OK\r\n" {
		t.Fatalf("testserver: MONITOR answered %q, %v", l, err)
	}
	return &Monitor{s: s, conn: conn, r: r}
}

// Stop returns how many times each command (by lower-case name) was sent
// since Monitor, those a Lua script called left out: every command sent
// before Stop's call, which sends a marker on a connection of its own and
// reads until the server has logged it.
func (m *Monitor) Stop(t testing.TB) map[string]int64 {
	t.Helper()
	marker := fmt.Sprintf("testserver-monitor-%d", time.Now().UnixNano())
	mc, err := net.DialTimeout("tcp", m.s.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, err := fmt.Fprintf(mc, "ECHO %s\r\n", marker); err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for {
		l, err := m.r.ReadString('\n')
		if err != nil {
			t.Fatalf("testserver: reading MONITOR: %v", err)
		}
		if strings.Contains(l, marker) {
			m.conn.Close()
			return calls
		}
		// +1700000000.123456 [0 127.0.0.1:5555] "get" "k"; [0 lua] inside a script
		_, rest, ok := strings.Cut(l, "] \"")
		if !ok || strings.Contains(l, " lua] ") {
			continue
		}
		name, _, _ := strings.Cut(rest, "\"")
		calls[strings.ToLower(name)]++
	}
}

// stats returns the fields of the server's statistics, over a connection
// of its own: redis-server's INFO, memcached's stats. A server that does
// not answer fails the test.
func (s *Server) stats(t testing.TB) map[string]string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	var fields map[string]string
	if s.isRedis() {
		fields, err = redisInfo(conn, r)
	} else {
		fields, err = memcachedStats(conn, r)
	}
	if err != nil {
		t.Fatalf("testserver: statistics of %s: %v", s.Addr, err)
	}
	return fields
}

// isRedis reports whether the server is a redis-server, not a memcached.
func (s *Server) isRedis() bool { return strings.Contains(filepath.Base(s.bin), "redis") }

// stat returns the integer field name of the server's statistics.
func (s *Server) stat(t testing.TB, name string) int64 {
	t.Helper()
	v, ok := s.stats(t)[name]
	if !ok {
		t.Fatalf("testserver: %s has no statistics field %q", s.Addr, name)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		t.Fatalf("testserver: %s of %s = %q", name, s.Addr, v)
	}
	return n
}

// MemcachedStat returns the field name of a memcached's stats, such as
// "bytes_read" (everything its clients sent it, this call's request
// included).
func (s *Server) MemcachedStat(t testing.TB, name string) int64 {
	t.Helper()
	return s.stat(t, name)
}

// Evictions returns the keys the server has evicted to make room since it
// started (redis-server's evicted_keys, memcached's evictions): a checker
// of lost keys needs to know that none were, or which server's were.
func (s *Server) Evictions(t testing.TB) int64 {
	t.Helper()
	if s.isRedis() {
		return s.stat(t, "evicted_keys")
	}
	return s.stat(t, "evictions")
}
