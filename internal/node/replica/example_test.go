package replica_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/replica"
	"github.com/shardcache/shardcache/ring"
)

// mem is a node.Node over a map, enough for the example: Get, Set, Add,
// AddMulti, Bury and GetMulti.
type mem struct {
	node.Node // the rest is not used here
	mu        sync.Mutex
	kv        map[string][]byte
}

func (m *mem) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.kv[key]; ok {
		return v, nil
	}
	return nil, node.ErrCacheMiss
}

func (m *mem) GetMulti(ctx context.Context, keys []string, _ bool) ([]node.Item, error) {
	out := make([]node.Item, len(keys))
	for i, k := range keys {
		v, err := m.Get(ctx, k)
		out[i] = node.Item{Key: k, Value: v, Found: err == nil, TTLKnown: true}
	}
	return out, nil
}

func (m *mem) Set(_ context.Context, key string, value []byte, _ time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kv[key] = value
	return nil
}

func (m *mem) AddMulti(_ context.Context, items []node.Item) ([]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	stored := make([]bool, len(items))
	for i, it := range items {
		if _, ok := m.kv[it.Key]; !ok {
			m.kv[it.Key], stored[i] = it.Value, true
		}
	}
	return stored, nil
}

// member is a replica.Member that is never held down.
type member struct{ n *mem }

func (m member) Conn() node.Node                          { return m.n }
func (m member) Down() bool                               { return false }
func (m member) Fail(node.Op) error                       { return node.ErrNodeDown }
func (m member) Missed(context.Context, error, ...string) {}

// A key on two replicas: a write reaches both; a read of the first that
// lost its copy (evicted, say) finds it on the second and copies it back.
func Example() {
	a, b := &mem{kv: map[string][]byte{}}, &mem{kv: map[string][]byte{}}
	ms := []replica.Member{member{a}, member{b}}
	set := replica.New(ms, ms, replica.Config{
		Tomb: 5 * time.Second, RepairWithin: time.Second,
		Unreachable: func(context.Context, error) bool { return false },
	})
	ctx := context.Background()
	_ = set.Set(ctx, "user:42", []byte("Ada"), time.Hour)
	fmt.Println(string(a.kv["user:42"]), string(b.kv["user:42"]))

	delete(a.kv, "user:42") // the first replica loses it
	v, err := set.Get(ctx, "user:42")
	fmt.Println(string(v), err, string(a.kv["user:42"]))
	// Output:
	// Ada Ada
	// Ada <nil> Ada
}

// Keys placed on two replicas of three nodes: a key's set is a node of
// its own, whose client writes to both of its members.
func ExamplePlacement() {
	r, err := ring.New([]ring.Node{{Name: "a", Addr: "10.0.0.1:6379"}, {Name: "b", Addr: "10.0.0.2:6379"}, {Name: "c", Addr: "10.0.0.3:6379"}})
	if err != nil {
		panic(err)
	}
	nodes := map[string]*mem{}
	for _, n := range r.Nodes() {
		nodes[n.Addr] = &mem{kv: map[string][]byte{}}
	}
	p := replica.NewPlacement(r, 2, "", replica.Config{
		Tomb: 5 * time.Second, RepairWithin: time.Second,
		Unreachable: func(context.Context, error) bool { return false },
	})
	set := p.Locate("user:42")
	fmt.Println(set.Name, strings.HasPrefix(set.Addr, replica.AddrPrefix), p.Primary("user:42").Name)

	conn := p.Set(set.Addr, func(addr string) replica.Member { return member{nodes[addr]} })
	_ = conn.Set(context.Background(), "user:42", []byte("Ada"), time.Hour)
	for _, n := range r.Nodes() {
		fmt.Printf("%s %v %q\n", n.Name, replica.Keeps(p, "user:42", n.Addr), nodes[n.Addr].kv["user:42"])
	}
	// Output:
	// a+c true a
	// a true "Ada"
	// b false ""
	// c true "Ada"
}
