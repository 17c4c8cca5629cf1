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
	done      sync.WaitGroup
	acceptedN int64
}

// CountConns starts counting the connections of s, a redis-server or a
// memcached.
func (s *Server) CountConns(t testing.TB) *ConnCounter {
	t.Helper()
	redis := strings.Contains(filepath.Base(s.bin), "redis")
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
	close(c.stop)
	c.done.Wait()
	return c.peak.Load(), c.acceptedN
}

// redisInfo sends INFO and returns its fields.
func redisInfo(conn net.Conn, r *bufio.Reader) (map[string]string, error) {
	if _, err := conn.Write([]byte("INFO\r\n")); err != nil {
		return nil, err
	}
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
