package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// A Delete that lands between a read's old-owner hit and its backfill must
// not be undone by the backfill (copy.go). These tests put the Delete
// exactly there, deterministically: a go-redis hook, or a proxy that runs
// it before forwarding a given command, on both backends, the backfill
// synchronous or not.

// trap runs fn once, the first time armed is set and match says yes.
type trap struct {
	armed atomic.Bool
	fired atomic.Bool
	fn    func()
}

func (tr *trap) spring(match bool) {
	if match && tr.armed.CompareAndSwap(true, false) {
		tr.fn()
		tr.fired.Store(true)
	}
}

// redisTrap springs before a command of its node whose name is one of
// names and whose arguments include key.
type redisTrap struct {
	*trap
	names []string
	key   string
}

func (redisTrap) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisTrap) matches(cmd redis.Cmder) bool {
	if !slices.Contains(h.names, cmd.Name()) {
		return false
	}
	for _, a := range cmd.Args()[1:] {
		if a == h.key {
			return true
		}
	}
	return false
}

func (h redisTrap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.spring(h.matches(cmd))
		return next(ctx, cmd)
	}
}

func (h redisTrap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.spring(slices.ContainsFunc(cmds, h.matches))
		return next(ctx, cmds)
	}
}

// trapProxy is a TCP proxy to upstream that springs tr before forwarding
// the client's bytes that hold one of marks, after letting skip such writes
// through: it sees every connection of the client to the node, gomemcache's
// and the raw ones alike.
func trapProxy(t *testing.T, upstream string, tr *trap, marks []string, skip int32) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	left := new(atomic.Int32)
	left.Store(skip)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Go(func() { io.Copy(c, u); c.Close() })
			wg.Go(func() {
				defer u.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						p := buf[:n]
						if slices.ContainsFunc(marks, func(m string) bool { return bytes.Contains(p, []byte(m)) }) &&
							tr.armed.Load() && left.Add(-1) < 0 {
							tr.spring(true)
						}
						if _, werr := u.Write(p); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

func TestDeleteDuringBackfill(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis-server", "memcached"} {
		for _, async := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/async=%v", kind, async), func(t *testing.T) {
				var servers []*testserver.Server
				if kind == "redis-server" {
					servers = testserver.Redis(t, 2)
				} else {
					servers = testserver.Memcached(t, 2)
				}
				from := []ring.Node{{Name: "old", Addr: servers[0].Addr}}
				to := []ring.Node{{Name: "new", Addr: servers[1].Addr}} // every key moves
				const key = "user:42"
				var c *Client
				tr := &trap{fn: func() {
					if err := c.Delete(context.Background(), key); err != nil {
						t.Errorf("Delete in the middle of the backfill: %v", err)
					}
				}}
				// Before the copy: the new owner's add of the key (Redis the copy
				// script, Memcached add), after the old owner's read.
				opts := Options{Nodes: from, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, AsyncBackfill: async}
				if kind == "redis-server" {
					trapped, names := to[0].Addr, []string{"evalsha", "eval"}
					opts.Backend = Redis
					opts.NewRedisClient = func(n ring.Node, opt *redis.Options) *redis.Client {
						rdb := redis.NewClient(opt)
						if n.Addr == trapped {
							rdb.AddHook(redisTrap{tr, names, key})
						}
						return rdb
					}
				} else {
					opts.Backend = Memcached
					to[0].Addr = trapProxy(t, to[0].Addr, tr, []string{"add " + key + " "}, 0)
				}
				var err error
				if c, err = New(opts); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				ctx := context.Background()
				if err := c.Set(ctx, key, []byte("Ada"), time.Hour); err != nil {
					t.Fatal(err)
				}
				if err := c.Reshard(to, time.Hour); err != nil {
					t.Fatal(err)
				}

				tr.armed.Store(true)
				// The read found the value before the Delete, and may return it.
				if v, err := c.Get(ctx, key); err != nil || string(v) != "Ada" {
					t.Fatalf("Get = %q, %v; want the value the old owner held", v, err)
				}
				// The copy is refused (asynchronously: once the worker is done).
				deadline := time.Now().Add(10 * time.Second)
				for c.Migration().BackfillsSkipped+c.Migration().Backfills == 0 && time.Now().Before(deadline) {
					runtime.Gosched()
				}
				if !tr.fired.Load() {
					t.Fatal("the Delete never ran: the trap did not match the backfill's commands")
				}
				mustMiss(t, c, key)
				for _, s := range servers {
					if found := rawHas(t, opts.Backend, s.Addr, key); found {
						t.Errorf("the deleted key is back on %s", s.Addr)
					}
				}
				if st := c.Migration(); st.Backfills != 0 || st.BackfillsSkipped != 1 {
					t.Errorf("counters %+v; want the copy refused by the tombstone", st)
				}
			})
		}
	}
}

// rawHas reads key from the server at addr directly.
func rawHas(t *testing.T, b Backend, addr, key string) bool {
	t.Helper()
	if b == Memcached {
		mc := gomemcacheClient(addr)
		defer mc.Close()
		it, err := mc.Get(key)
		if err != nil && err != memcache.ErrCacheMiss {
			t.Fatal(err)
		}
		return err == nil && !(len(it.Value) == 0 && node.IsTombstoneFlags(it.Flags))
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	n, err := rdb.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}
