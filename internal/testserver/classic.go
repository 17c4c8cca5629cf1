package testserver

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// MemcachedClassic starts n memcached processes as Memcached does, each
// behind a front that makes it a server without the meta commands, as
// memcached before 1.6 was: every mg, ms, md, ma, mn and me request (an
// ms's data block swallowed) reaches the server as a command it does not
// know, so that it answers ERROR in its place in the stream; every other
// request and every answer pass unchanged. A Server's Addr is its front's;
// Stop and Restart act on the process, and the front dials it again for
// each connection it accepts.
func MemcachedClassic(t testing.TB, n int) []*Server {
	t.Helper()
	servers := Memcached(t, n)
	for _, s := range servers {
		s.Addr = classicFront(t, s.Addr)
	}
	return servers
}

// notMeta stands for a meta command: memcached answers ERROR to it.
const notMeta = "shardcache_not_meta\r\n"

// classicFront listens on a loopback port for connections to relay to
// upstream, with the meta commands turned into notMeta, until the test
// ends; it returns its address.
func classicFront(t testing.TB, upstream string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: classic front: %v", err)
	}
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			return false
		}
		conns[c] = true
		return true
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil || !track(c) || !track(up) {
				c.Close()
				if up != nil {
					up.Close()
				}
				continue
			}
			wg.Go(func() {
				io.Copy(c, up) // answers pass unchanged
				c.Close()
			})
			wg.Go(func() {
				relayClassic(c, up)
				up.Close()
			})
		}
	})
	return ln.Addr().String()
}

// relayClassic copies requests from c to up, each meta command replaced by
// notMeta, until either end closes.
func relayClassic(c, up net.Conn) {
	r := bufio.NewReader(c)
	w := bufio.NewWriter(up)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		f := bytes.Fields(line)
		cmd := ""
		if len(f) > 0 {
			cmd = string(f[0])
		}
		data := -1 // the length of the data block that follows, if any
		switch cmd {
		case "mg", "md", "ma", "mn", "me":
			line = []byte(notMeta)
		case "ms":
			if len(f) > 2 {
				if n, err := strconv.Atoi(string(f[2])); err == nil && n >= 0 {
					if _, err := r.Discard(n + 2); err != nil {
						return
					}
				}
			}
			line = []byte(notMeta)
		case "set", "add", "replace", "append", "prepend", "cas":
			if len(f) > 4 {
				if n, err := strconv.Atoi(string(f[4])); err == nil && n >= 0 {
					data = n
				}
			}
		}
		if _, err := w.Write(line); err != nil {
			return
		}
		if data >= 0 {
			if _, err := io.CopyN(w, r, int64(data)+2); err != nil {
				return
			}
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}
