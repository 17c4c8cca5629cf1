package client

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// connCounter samples the connections a real server has open, through a
// connection of its own (not counted), every millisecond while a test runs,
// and keeps the most seen.
type connCounter struct {
	peak atomic.Int64
	stop chan struct{}
	done sync.WaitGroup
}

// countConns starts sampling the server at addr, of kind "redis" or
// "memcached".
func countConns(t *testing.T, kind, addr string) *connCounter {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	sample := func() (int, error) {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if kind == "redis" {
			if _, err := conn.Write([]byte("INFO clients\r\n")); err != nil {
				return 0, err
			}
			l, err := r.ReadString('\n') // $<len>
			if err != nil {
				return 0, err
			}
			size, _ := strconv.Atoi(strings.TrimSpace(l[1:]))
			buf := make([]byte, size+2)
			if _, err := ioFull(r, buf); err != nil {
				return 0, err
			}
			for _, line := range strings.Split(string(buf), "\r\n") {
				if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
					n, _ := strconv.Atoi(v)
					return n - 1, nil
				}
			}
			return 0, fmt.Errorf("no connected_clients in %q", buf)
		}
		if _, err := conn.Write([]byte("stats\r\n")); err != nil {
			return 0, err
		}
		n := -1
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return 0, err
			}
			l = strings.TrimSpace(l)
			if l == "END" {
				return n - 1, nil
			}
			if v, ok := strings.CutPrefix(l, "STAT curr_connections "); ok {
				n, _ = strconv.Atoi(v)
			}
		}
	}
	if _, err := sample(); err != nil {
		t.Fatal(err)
	}
	c := &connCounter{stop: make(chan struct{})}
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		defer conn.Close()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			n, err := sample()
			if err != nil {
				t.Error(err)
				return
			}
			for p := c.peak.Load(); int64(n) > p && !c.peak.CompareAndSwap(p, int64(n)); p = c.peak.Load() {
			}
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return c
}

// max stops sampling and returns the most connections seen at once.
func (c *connCounter) max() int64 {
	close(c.stop)
	c.done.Wait()
	return c.peak.Load()
}

// TestPoolSizeBounds: under 64 concurrent callers mixing Get, Set and
// GetMulti, a node sees at most PoolSize connections from one client at
// any moment, counted by the real server itself: on Redis with and without
// AutoPipeline and NearCache, and on Memcached with and without
// AutoPipeline. A caller that finds them all busy waits for one.
func TestPoolSizeBounds(t *testing.T) {
	const poolSize = 4
	for _, tc := range []struct {
		name string
		kind string
		opts Options
	}{
		{"redis", "redis", Options{}},
		{"redis/autopipeline", "redis", Options{AutoPipeline: true}},
		{"redis/nearcache", "redis", Options{NearCache: &NearCache{}}},
		{"redis/autopipeline+nearcache", "redis", Options{AutoPipeline: true, NearCache: &NearCache{}}},
		{"memcached", "memcached", Options{Backend: Memcached}},
		{"memcached/autopipeline", "memcached", Options{Backend: Memcached, AutoPipeline: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var servers []*testserver.Server
			if tc.kind == "redis" {
				servers = testserver.Redis(t, 2)
			} else {
				servers = testserver.Memcached(t, 2)
			}
			opts := tc.opts
			opts.Nodes = []ring.Node{{Name: "a", Addr: servers[0].Addr}, {Name: "b", Addr: servers[1].Addr}}
			opts.PoolSize = poolSize
			opts.ReadTimeout, opts.WriteTimeout = 5*time.Second, 5*time.Second // waits, not failures, on a busy machine
			c, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			counters := []*connCounter{countConns(t, tc.kind, servers[0].Addr), countConns(t, tc.kind, servers[1].Addr)}
			keys := numberedKeys("budget", 40)
			ctx := context.Background()
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for i := range 30 {
						k := keys[(g+i)%len(keys)]
						var err error
						switch (g + i) % 3 {
						case 0:
							err = c.Set(ctx, k, []byte("v"+k), time.Minute)
						case 1:
							if _, err = c.Get(ctx, k); err == ErrCacheMiss {
								err = nil
							}
						default:
							_, err = c.GetMulti(ctx, keys)
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			for i, cc := range counters {
				if n := cc.max(); n > poolSize || n == 0 {
					t.Errorf("node %d saw %d connections at once from a client of PoolSize %d", i, n, poolSize)
				}
			}
		})
	}
}

func ioFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
