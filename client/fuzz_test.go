package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/pool"
	"github.com/shardcache/shardcache/ring"
)

// FuzzCheckKey checks key validation: a key is accepted or rejected with
// ErrMalformedKey, never a panic, and an accepted key fits the backend.
func FuzzCheckKey(f *testing.F) {
	for _, k := range []string{"", "user:42", "a b", "a\r\nb", "\x00", "\x7f", "ключ", "\xff\xfe", strings.Repeat("k", 251)} {
		f.Add(k)
	}
	clients := map[Backend]*Client{}
	for _, b := range []Backend{Redis, Memcached} {
		o := Options{Backend: b}
		o.init()
		clients[b] = &Client{opts: o}
	}
	f.Fuzz(func(t *testing.T, key string) {
		for b, c := range clients {
			err := c.checkKey(key)
			if err != nil {
				if !errors.Is(err, ErrMalformedKey) {
					t.Fatalf("%v: checkKey(%q) = %v; want ErrMalformedKey", b, key, err)
				}
				continue
			}
			if key == "" || len(key) > c.opts.MaxKeyLength {
				t.Fatalf("%v: accepted a key of %d bytes (max %d)", b, len(key), c.opts.MaxKeyLength)
			}
			if b == Memcached && strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
				t.Fatalf("memcached: accepted %q, which the text protocol would split", key)
			}
		}
	})
}

// memNode is an in-memory node, for fuzzing the multi-key split without I/O.
type memNode struct {
	mu sync.Mutex
	m  map[string][]byte
}

var _ node.Node = (*memNode)(nil)

func (n *memNode) Get(_ context.Context, k string) ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v, ok := n.m[k]; ok {
		return v, nil
	}
	return nil, ErrCacheMiss
}

func (n *memNode) GetMulti(_ context.Context, keys []string, _ bool) ([]item, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	items := make([]item, len(keys))
	for i, k := range keys {
		items[i].Key = k
		items[i].Value, items[i].Found = n.m[k]
	}
	return items, nil
}

// memPending is a multi-get of a memNode, answered when received.
type memPending struct {
	n    *memNode
	keys []string
}

func (p memPending) Recv(out []node.Answer) error {
	items, _ := p.n.GetMulti(context.Background(), p.keys, false)
	for i, it := range items {
		out[i] = node.Answer{Value: it.Value, Found: it.Found}
	}
	return nil
}

func (n *memNode) Send(_ context.Context, keys []string) node.Pending { return memPending{n, keys} }

func (n *memNode) Set(_ context.Context, k string, v []byte, _ time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.m[k] = bytes.Clone(v)
	return nil
}

func (n *memNode) SetMulti(ctx context.Context, items []item) error {
	for _, it := range items {
		n.Set(ctx, it.Key, it.Value, it.TTL)
	}
	return nil
}

func (n *memNode) Add(ctx context.Context, k string, v []byte, ttl time.Duration) error {
	if _, err := n.Get(ctx, k); err == nil {
		return ErrNotStored
	}
	return n.Set(ctx, k, v, ttl)
}

func (n *memNode) AddMulti(ctx context.Context, items []item) ([]bool, error) {
	stored := make([]bool, len(items))
	for i, it := range items {
		stored[i] = n.Add(ctx, it.Key, it.Value, it.TTL) == nil
	}
	return stored, nil
}

func (n *memNode) Delete(_ context.Context, k string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.m, k)
	return nil
}

func (n *memNode) DeleteMulti(ctx context.Context, keys []string) error {
	for _, k := range keys {
		n.Delete(ctx, k)
	}
	return nil
}

// Bury deletes; the fuzzed splits never copy, so no tombstone is kept.
func (n *memNode) Bury(_ context.Context, keys []string, _ time.Duration, _ node.TombKind) ([]bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	found := make([]bool, len(keys))
	for i, k := range keys {
		_, found[i] = n.m[k]
		delete(n.m, k)
	}
	return found, nil
}

func (n *memNode) Incr(context.Context, string, int64) (int64, error) {
	return 0, errors.New("not supported")
}
func (n *memNode) Touch(context.Context, string, time.Duration) error { return nil }
func (n *memNode) Ping(context.Context) error                         { return nil }
func (n *memNode) Close() error                                       { return nil }

// FuzzMultiSplit checks the multi-key split: SetMulti puts each key on the
// node Locate names and only there, GetMulti returns exactly what was set
// (duplicates included), DeleteMulti removes it all; a bad key anywhere
// rejects the whole call before any write.
func FuzzMultiSplit(f *testing.F) {
	f.Add("a\nb\nc\n{tag}x\n{tag}y", uint8(3))
	f.Add("dup\ndup\n\n", uint8(1))
	f.Add(strings.Repeat("k\n", 50), uint8(7))
	f.Fuzz(func(t *testing.T, list string, n uint8) {
		nodes := make([]ring.Node, int(n%8)+1)
		mems := map[string]*memNode{}
		for i := range nodes {
			nodes[i] = ring.Node{Name: fmt.Sprintf("n%d", i), Addr: fmt.Sprintf("10.0.0.%d:6379", i+1)}
			mems[nodes[i].Addr] = &memNode{m: map[string][]byte{}}
		}
		r, err := ring.New(nodes, ring.WithVnodes(16))
		if err != nil {
			t.Fatal(err)
		}
		o := Options{Backend: Memcached}
		o.init()
		c := &Client{opts: o}
		c.pools = pool.New(func(n ring.Node) (*member, error) {
			h := newHealth(n, &o)
			return &member{Node: mems[n.Addr], rn: n, h: h, down: node.NewFailing(ErrNodeDown, h)}, nil
		})
		own, err := c.pools.Acquire(r.Nodes())
		if err != nil {
			t.Fatal(err)
		}
		c.state.Store(&state{placement: r, own: own, conns: own})
		ctx := context.Background()

		keys := strings.Split(list, "\n")
		items := map[string][]byte{}
		bad := false
		for _, k := range keys {
			items[k] = []byte("v:" + k)
			bad = bad || c.checkKey(k) != nil
		}
		err = c.SetMulti(ctx, items, 0)
		if bad {
			if !errors.Is(err, ErrMalformedKey) {
				t.Fatalf("SetMulti with a bad key = %v; want ErrMalformedKey", err)
			}
			for addr, m := range mems {
				if len(m.m) != 0 {
					t.Fatalf("SetMulti with a bad key stored %d keys on %s", len(m.m), addr)
				}
			}
			if _, err := c.GetMulti(ctx, keys); !errors.Is(err, ErrMalformedKey) {
				t.Fatalf("GetMulti with a bad key = %v; want ErrMalformedKey", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for addr, m := range mems {
			for k := range m.m {
				if r.Locate(k).Addr != addr {
					t.Fatalf("%q stored on %s; Locate says %s", k, addr, r.Locate(k).Addr)
				}
			}
		}
		hits, err := c.GetMulti(ctx, keys)
		if err != nil || !maps.EqualFunc(hits, items, bytes.Equal) {
			t.Fatalf("GetMulti = %d hits, %v; want the %d items set", len(hits), err, len(items))
		}
		if err := c.DeleteMulti(ctx, keys); err != nil {
			t.Fatal(err)
		}
		if hits, _ := c.GetMulti(ctx, keys); len(hits) != 0 {
			t.Fatalf("after DeleteMulti, %d hits", len(hits))
		}
	})
}
