package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// listed is a placement of the caller's over nodes, checked by nothing:
// every key on the first.
type listed []ring.Node

func (l listed) Locate(string) ring.Node { return l[0] }
func (l listed) Nodes() []ring.Node      { return l }

// TestBadInput runs every public entry point with bad input: each call gets
// a typed error (errors.Is), never a panic, and loses no data: a key written
// before reads back after, and a rejected write stores nothing.
func TestBadInput(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := t.Context()
		if err := c.Set(ctx, "kept", []byte("safe"), 0); err != nil {
			t.Fatal(err)
		}
		huge := make([]byte, 2<<20)
		long := strings.Repeat("k", c.opts.MaxKeyLength+1)
		keys := map[string]string{"empty key": "", "oversized key": long}
		if cl.backend == Memcached {
			keys["control character"] = "a\r\nset x 0 0 1"
			keys["space"] = "a b"
		}
		type op struct {
			name string
			call func(key string) error
		}
		keyOps := []op{
			{"Get", func(k string) error { _, err := c.Get(ctx, k); return err }},
			{"Set", func(k string) error { return c.Set(ctx, k, []byte("v"), 0) }},
			{"Add", func(k string) error { return c.Add(ctx, k, []byte("v"), 0) }},
			{"Delete", func(k string) error { return c.Delete(ctx, k) }},
			{"Incr", func(k string) error { _, err := c.Incr(ctx, k, 1); return err }},
			{"Touch", func(k string) error { return c.Touch(ctx, k, time.Minute) }},
			{"GetMulti", func(k string) error { _, err := c.GetMulti(ctx, []string{"ok", k}); return err }},
			{"SetMulti", func(k string) error { return c.SetMulti(ctx, map[string][]byte{"ok": nil, k: nil}, 0) }},
			{"DeleteMulti", func(k string) error { return c.DeleteMulti(ctx, []string{"kept", k}) }},
		}
		for what, k := range keys {
			for _, o := range keyOps {
				if err := o.call(k); !errors.Is(err, ErrMalformedKey) {
					t.Errorf("%s with an %s = %v; want ErrMalformedKey", o.name, what, err)
				}
			}
		}

		type check struct {
			name string
			err  error
			want error
		}
		var checks []check
		add := func(name string, err, want error) { checks = append(checks, check{name, err, want}) }
		for _, ttl := range []time.Duration{-time.Nanosecond, -time.Hour} {
			add(fmt.Sprintf("Set, TTL %v", ttl), c.Set(ctx, "ttl", nil, ttl), ErrBadTTL)
			add(fmt.Sprintf("Add, TTL %v", ttl), c.Add(ctx, "ttl", nil, ttl), ErrBadTTL)
			add(fmt.Sprintf("Touch, TTL %v", ttl), c.Touch(ctx, "kept", ttl), ErrBadTTL)
			add(fmt.Sprintf("SetMulti, TTL %v", ttl), c.SetMulti(ctx, map[string][]byte{"ttl": nil}, ttl), ErrBadTTL)
		}
		if cl.backend == Memcached {
			add("Set of 2 MiB", c.Set(ctx, "big", huge, 0), ErrValueTooLarge)
			add("Add of 2 MiB", c.Add(ctx, "big", huge, 0), ErrValueTooLarge)
			add("SetMulti with 2 MiB", c.SetMulti(ctx, map[string][]byte{"ok": nil, "big": huge}, 0), ErrValueTooLarge)
			// Within MaxValueSize but over the server's item limit (the key
			// and the item's header count too): the server's refusal.
			add("Set of 1 MiB", c.Set(ctx, "big", huge[:1<<20], 0), ErrValueTooLarge)
		} else {
			if err := c.Set(ctx, "big", huge, 0); err != nil {
				t.Fatalf("Set of 2 MiB on Redis: %v", err)
			}
			if v, err := c.Get(ctx, "big"); err != nil || len(v) != len(huge) {
				t.Fatalf("Get of a 2 MiB value: %d bytes, %v", len(v), err)
			}
			small := cl.client(t, Options{MaxValueSize: 1 << 20})
			add("Set over MaxValueSize", small.Set(ctx, "big2", huge, 0), ErrValueTooLarge)
		}
		// Every call that takes a value refuses one over the limit before
		// any I/O, and takes one within it: the values a loader returns
		// are handed to the caller but not stored.
		limited, over, within := c, huge, huge[:1<<20-4096]
		if cl.backend == Redis {
			limited, over, within = cl.client(t, Options{MaxValueSize: 1 << 20}), huge[:1<<20+1], huge[:1<<20]
		}
		valueOps := map[string]func(key string, v []byte) error{
			"Set":               func(k string, v []byte) error { return limited.Set(ctx, k, v, 0) },
			"Add":               func(k string, v []byte) error { return limited.Add(ctx, k, v, 0) },
			"SetMulti":          func(k string, v []byte) error { return limited.SetMulti(ctx, map[string][]byte{k: v}, 0) },
			"Store(StoreSet)":   func(k string, v []byte) error { return limited.Store(ctx, StoreSet, Item{Key: k, Value: v}) },
			"Store(StoreAdd)":   func(k string, v []byte) error { return limited.Store(ctx, StoreAdd, Item{Key: k, Value: v}) },
			"Store(StoreCAS)":   func(k string, v []byte) error { return limited.Store(ctx, StoreCAS, Item{Key: k, Value: v, CasID: 1}) },
			"Store(StoreRepl.)": func(k string, v []byte) error { return limited.Store(ctx, StoreReplace, Item{Key: k, Value: v}) },
		}
		sent := func() (n int64) { // what the memcached servers have read
			for _, s := range cl.servers {
				if cl.backend == Memcached {
					n += s.MemcachedStat(t, "bytes_read")
				}
			}
			return n
		}
		before := sent()
		for name, op := range valueOps {
			add(name+" over the value limit", op("big:"+name, over), ErrValueTooLarge)
		}
		if n := sent() - before; n > 1<<16 {
			t.Errorf("the servers read %d bytes during the refused writes: a value was sent", n)
		}
		for name, op := range valueOps {
			if strings.Contains(name, "CAS") || strings.Contains(name, "Repl") {
				continue // of a key that is not there: refused by the server, not by size
			}
			if err := op("fits:"+name, within); err != nil {
				t.Errorf("%s of %d bytes, within the limit: %v", name, len(within), err)
			}
		}
		leased := cl.client(t, Options{MaxValueSize: limited.opts.MaxValueSize, Lease: time.Minute})
		for name, load := range map[string]func(c *Client, k string) ([]byte, error){
			"GetOrLoad": func(c *Client, k string) ([]byte, error) {
				return c.GetOrLoad(ctx, k, time.Minute, func(context.Context) ([]byte, error) { return over, nil })
			},
			"GetMultiOrLoad": func(c *Client, k string) ([]byte, error) {
				m, err := c.GetMultiOrLoad(ctx, []string{k}, time.Minute, func(context.Context, []string) (map[string][]byte, error) {
					return map[string][]byte{k: over}, nil
				})
				return m[k], err
			},
		} {
			for _, c := range []*Client{limited, leased} {
				k := fmt.Sprintf("bigload:%s:lease=%t", name, c.opts.Lease > 0)
				if v, err := load(c, k); len(v) != len(over) {
					t.Errorf("%s of a value over the limit = %d bytes, %v; want the loaded value", k, len(v), err)
				}
				if h := cl.holders(t, k); len(h) != 0 {
					t.Errorf("%s stored a value over the limit on %v", k, h)
				}
				// Its lease given up: another process loads at once
				// rather than waiting out the lease.
				start := time.Now()
				if v, err := load(leased, k); len(v) != len(over) || time.Since(start) > prompt {
					t.Errorf("%s again = %d bytes, %v, in %v; want the loaded value at once", k, len(v), err, time.Since(start))
				}
			}
		}

		// A nil value is an empty one, not an error.
		if err := c.Set(ctx, "nil", nil, 0); err != nil {
			t.Errorf("Set of a nil value = %v", err)
		}
		mustGet(t, c, "nil", "")

		for _, nodes := range []struct {
			name  string
			nodes []ring.Node
			want  error
		}{
			{"no nodes", nil, ring.ErrNoNodes},
			{"empty list", []ring.Node{}, ring.ErrNoNodes},
			{"duplicate name", []ring.Node{{Name: "a", Addr: "127.0.0.1:1"}, {Name: "a", Addr: "127.0.0.1:2"}}, ring.ErrDuplicateName},
			{"duplicate address", []ring.Node{{Name: "a", Addr: "127.0.0.1:1"}, {Name: "b", Addr: "127.0.0.1:1"}}, ring.ErrDuplicateAddr},
			{"negative weight", []ring.Node{{Addr: "127.0.0.1:1", Weight: -1}}, ring.ErrBadWeight},
			{"absurd weight", []ring.Node{{Addr: "127.0.0.1:1", Weight: 1 << 40}}, ring.ErrBadWeight},
			{"empty address", []ring.Node{{Name: "a"}}, ring.ErrEmptyAddr},
			{"no port", []ring.Node{{Addr: "127.0.0.1"}}, ring.ErrBadAddr},
			{"port out of range", []ring.Node{{Addr: "127.0.0.1:70000"}}, ring.ErrBadAddr},
			{"no host", []ring.Node{{Addr: ":6379"}}, ring.ErrBadAddr},
			{"padded address", []ring.Node{{Addr: " 127.0.0.1:6379"}}, ring.ErrBadAddr},
			{"address with a newline", []ring.Node{{Addr: "127.0.0.1:6379\n"}}, ring.ErrBadAddr},
		} {
			add("Reshard, "+nodes.name, c.Reshard(nodes.nodes, time.Minute), nodes.want)
			nc, err := New(Options{Backend: cl.backend, Nodes: nodes.nodes})
			if nc != nil {
				nc.Close()
			}
			add("New, "+nodes.name, err, nodes.want)
		}
		// A padded address on every other way in: a placement of the
		// caller's, MigrateFrom, ReshardTo, the gutter pool.
		padded := []ring.Node{{Name: "p", Addr: " " + cl.addrs[0]}}
		add("ReshardTo, padded address", c.ReshardTo(listed(padded), time.Minute), ring.ErrBadAddr)
		for name, opts := range map[string]Options{
			"Placement":   {Placement: listed(padded)},
			"MigrateFrom": {Nodes: cl.nodes(), MigrateFrom: &MigrateFrom{Nodes: padded, Start: time.Now(), Window: time.Minute}},
			"MigrateFrom.Placement": {Nodes: cl.nodes(),
				MigrateFrom: &MigrateFrom{Placement: listed(padded), Start: time.Now(), Window: time.Minute}},
			"Gutter": {Nodes: cl.nodes(1, 2), Gutter: []ring.Node{{Name: "g", Addr: cl.addrs[0] + " "}}},
		} {
			opts.Backend = cl.backend
			nc, err := New(opts)
			if nc != nil {
				nc.Close()
			}
			add("New, padded address in "+name, err, ring.ErrBadAddr)
		}
		add("Reshard, negative window", c.Reshard(cl.nodes(), -time.Second), migration.ErrBadWindow)
		add("ReshardTo nil", c.ReshardTo(nil, time.Minute), ErrBadOptions)
		for name, opts := range map[string]Options{
			"unknown backend":          {Backend: Backend(9), Nodes: cl.nodes()},
			"negative Vnodes":          {Nodes: cl.nodes(), Vnodes: -1},
			"negative PoolSize":        {Nodes: cl.nodes(), PoolSize: -1},
			"negative MaxKeyLength":    {Nodes: cl.nodes(), MaxKeyLength: -1},
			"negative MaxValueSize":    {Nodes: cl.nodes(), MaxValueSize: -1},
			"negative timeout":         {Nodes: cl.nodes(), ReadTimeout: -time.Second},
			"negative BackfillQueue":   {Nodes: cl.nodes(), BackfillQueue: -1},
			"ReleaseRedisClient alone": {Nodes: cl.nodes(), ReleaseRedisClient: func(ring.Node, *redis.Client) {}},
			"Nodes and Placement":      {Nodes: cl.nodes(), Placement: mustRing(t, cl.nodes())},
			"MigrateFrom, bad window":  {Nodes: cl.nodes(), MigrateFrom: &MigrateFrom{Nodes: cl.nodes(0), Start: time.Now(), Window: -time.Minute}},
		} {
			opts.Backend = max(opts.Backend, cl.backend)
			nc, err := New(opts)
			if nc != nil {
				nc.Close()
			}
			want := ErrBadOptions
			if name == "MigrateFrom, bad window" {
				want = migration.ErrBadWindow
			}
			add("New, "+name, err, want)
		}
		nc, err := New(Options{Backend: cl.backend, Nodes: cl.nodes(),
			MigrateFrom: &MigrateFrom{Nodes: []ring.Node{{Addr: "nope"}}, Start: time.Now(), Window: time.Minute}})
		if nc != nil {
			nc.Close()
		}
		add("New, MigrateFrom with a bad address", err, ring.ErrBadAddr)

		// A cancelled context: every call returns context.Canceled.
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		for name, op := range ctxOps(c) {
			add(name+", cancelled context", op(cancelled), context.Canceled)
		}

		for _, ch := range checks {
			if !errors.Is(ch.err, ch.want) {
				t.Errorf("%s = %v; want %v", ch.name, ch.err, ch.want)
			}
		}
		for _, k := range []string{"ttl", "big", "big2", "ok"} {
			if cl.backend == Redis && k == "big" {
				continue
			}
			if h := cl.holders(t, k); len(h) != 0 {
				t.Errorf("a rejected write stored %q on %v", k, h)
			}
		}
		mustGet(t, c, "kept", "safe")
		if got := c.Nodes(); len(got) != len(cl.addrs) {
			t.Errorf("failed Reshards changed the nodes to %v", got)
		}

		// A closed client: every call returns ErrClosed; the data stays.
		c.Close()
		for name, op := range ctxOps(c) {
			if err := op(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close = %v; want ErrClosed", name, err)
			}
		}
		if err := c.Reshard(cl.nodes(), 0); !errors.Is(err, ErrClosed) {
			t.Errorf("Reshard after Close = %v; want ErrClosed", err)
		}
		if c.Health() != nil || c.Nodes() != nil || c.Redis("k") != nil {
			t.Error("Health, Nodes or Redis after Close is not nil")
		}
		if err := c.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
		after := cl.client(t, Options{})
		mustGet(t, after, "kept", "safe")
	})
}
