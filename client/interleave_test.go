package client

import (
	"bytes"
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// A Delete that lands between a read's old-owner hit and its backfill must
// not be undone by the backfill (backfill.go). These tests put the Delete
// exactly there, deterministically: a go-redis hook, or a gomemcache
// connection that runs it before sending a given command, on both backends
// and at both points of the copy.

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

// mcTrapConn springs before writing a command that starts with prefix.
type mcTrapConn struct {
	net.Conn
	*trap
	prefix []byte
	skip   *atomic.Int32 // matching writes to let through first
}

func (c mcTrapConn) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, c.prefix) && c.armed.Load() && c.skip.Add(-1) < 0 {
		c.spring(true)
	}
	return c.Conn.Write(p)
}

func TestDeleteDuringBackfill(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis-server", "memcached"} {
		for _, at := range []string{"before the copy", "before the confirmation"} {
			t.Run(kind+"/"+at, func(t *testing.T) {
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
				// Before the copy: the new owner's add of the key (Redis SET NX,
				// Memcached add). Before the confirmation: the old owner's second
				// read of the key (the first is the fallback read).
				trapped, names, prefix, skip := to[0].Addr, []string{"set", "setnx"}, "add "+key+" ", int32(0)
				if at == "before the confirmation" {
					trapped, names, prefix, skip = from[0].Addr, []string{"mget"}, "gets "+key, 1
				}
				opts := Options{Nodes: from, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
				if kind == "redis-server" {
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
					opts.NewMemcacheClient = func(n ring.Node, mc *memcache.Client) *memcache.Client {
						if n.Addr == trapped {
							left := new(atomic.Int32)
							left.Store(skip)
							dial := mc.DialContext
							mc.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
								conn, err := dial(ctx, network, addr)
								if err != nil {
									return nil, err
								}
								return mcTrapConn{conn, tr, []byte(prefix), left}, nil
							}
						}
						return mc
					}
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
				if !tr.fired.Load() {
					t.Fatal("the Delete never ran: the trap did not match the backfill's commands")
				}
				mustMiss(t, c, key)
				for _, s := range servers {
					if found := rawHas(t, opts.Backend, s.Addr, key); found {
						t.Errorf("the deleted key is back on %s", s.Addr)
					}
				}
				st := c.Migration()
				if st.Backfills != 1 || st.BackfillsRevoked != 1 {
					t.Errorf("counters %+v; want the copy stored and then revoked", st)
				}
			})
		}
	}
}

// rawHas reads key from the server at addr directly.
func rawHas(t *testing.T, b Backend, addr, key string) bool {
	t.Helper()
	if b == Memcached {
		mc := memcache.New(addr)
		defer mc.Close()
		_, err := mc.Get(key)
		if err != nil && err != memcache.ErrCacheMiss {
			t.Fatal(err)
		}
		return err == nil
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	n, err := rdb.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}
