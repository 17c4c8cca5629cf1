package replica_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/internal/node/replica"
	"github.com/shardcache/shardcache/ring"
)

// member is a replica.Member that is never held down.
type member struct{ n *nodetest.Map }

func (m member) Conn() node.Node                          { return m.n }
func (m member) RingNode() ring.Node                      { return ring.Node{} }
func (m member) Down() bool                               { return false }
func (m member) Fail(node.Op) error                       { return node.ErrNodeDown }
func (m member) Missed(context.Context, error, ...string) {}

// A key on two replicas: a write reaches both; a read of the first that
// lost its copy (evicted, say) finds it on the second and copies it back.
func Example() {
	a, b := nodetest.NewMap(), nodetest.NewMap()
	ms := []replica.Member{member{a}, member{b}}
	set := replica.New(ms, ms, replica.Config{
		Tomb: 5 * time.Second, RepairWithin: time.Second,
		Unreachable: func(context.Context, error) bool { return false },
	})
	ctx := context.Background()
	_ = set.Set(ctx, "user:42", []byte("Ada"), time.Hour)
	fmt.Println(string(a.Value("user:42")), string(b.Value("user:42")))

	_ = a.Delete(ctx, "user:42") // the first replica loses it
	v, err := set.Get(ctx, "user:42")
	fmt.Println(string(v), err, string(a.Value("user:42")))
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
	nodes := map[string]*nodetest.Map{}
	for _, n := range r.Nodes() {
		nodes[n.Addr] = nodetest.NewMap()
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
		fmt.Printf("%s %v %q\n", n.Name, replica.Keeps(p, "user:42", n.Addr), nodes[n.Addr].Value("user:42"))
	}
	// Output:
	// a+c true a
	// a true "Ada"
	// b false ""
	// c true "Ada"
}
