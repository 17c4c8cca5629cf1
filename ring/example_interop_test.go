package ring_test

import (
	"fmt"

	"github.com/shardcache/shardcache/ring"
)

// A twemproxy pool with "distribution: ketama" and "hash: md5":
//
//	servers:
//	 - 10.0.0.1:11211:1
//	 - 10.0.0.2:11211:2
//	 - 10.0.0.3:11212:1 gamma
//
// Ketama places keys as it does, so a client can move off the proxy to a
// ring without a cold cache.
func ExampleNewKetama() {
	old, err := ring.NewKetama([]ring.Node{
		{Addr: "10.0.0.1:11211", Weight: 1},
		{Addr: "10.0.0.2:11211", Weight: 2},
		{Name: "gamma", Addr: "10.0.0.3:11212", Weight: 1},
	})
	if err != nil {
		panic(err)
	}
	for _, n := range old.Nodes() {
		fmt.Println(n.Name, n.Addr)
	}
	fmt.Println(old.Locate("user:42").Addr)
	// Output:
	// 10.0.0.1 10.0.0.1:11211
	// 10.0.0.2 10.0.0.2:11211
	// gamma 10.0.0.3:11212
	// 10.0.0.2:11211
}

// gomemcache's memcache.New("10.0.0.1:11211", "10.0.0.2:11211", ...) places
// keys by crc32 mod N over its ServerList: the default Modulo.
func ExampleNewModulo() {
	old, err := ring.NewModulo([]string{"10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211"})
	if err != nil {
		panic(err)
	}
	fmt.Println(old.Locate("user:42").Addr)
	// Output:
	// 10.0.0.2:11211
}

// A go-redis Ring with Addrs {"shard1": "10.0.0.1:6379", "shard2":
// "10.0.0.2:6379"} and its default consistent hash.
func ExampleNewRendezvous() {
	old, err := ring.NewRendezvous([]ring.Node{
		{Name: "shard1", Addr: "10.0.0.1:6379"},
		{Name: "shard2", Addr: "10.0.0.2:6379"},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(old.Locate("user:42").Name, old.Locate("{user:42}:cart").Name)
	// Output:
	// shard2 shard2
}

// Before switching from gomemcache's ServerList to a ring, Compare says
// how many keys change server: those a dual-ring migration reads from the
// old owner while the new one fills.
func ExampleCompare() {
	addrs := []string{"10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211"}
	old, _ := ring.NewModulo(addrs)
	var nodes []ring.Node
	for _, a := range addrs {
		nodes = append(nodes, ring.Node{Addr: a})
	}
	next, _ := ring.New(nodes)
	c := ring.Compare(old, next)
	fmt.Printf("%.1f%% of the keys change server (exact: %v)\n", 100*c.Moved, c.Exact)
	// Output:
	// 66.7% of the keys change server (exact: true)
}
