package ring_test

import (
	"fmt"

	"github.com/shardcache/shardcache/ring"
)

func Example() {
	old, err := ring.New([]ring.Node{
		{Name: "a", Addr: "10.0.0.1:6379"},
		{Name: "b", Addr: "10.0.0.2:6379"},
		{Name: "c", Addr: "10.0.0.3:6379", Weight: 2}, // twice the memory
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(old.Locate("user:42").Name)
	fmt.Println(old.Locate("{user:42}:cart").Name) // hash tag: same node as "user:42"

	grown, _ := ring.New(append(old.Nodes(), ring.Node{Name: "d", Addr: "10.0.0.4:6379"}))
	fmt.Printf("adding d moves %.0f%% of the keys, all of them to d: %.0f%%\n",
		100*ring.Moved(old, grown), 100*grown.Shares()["d"])
	// Output:
	// a
	// a
	// adding d moves 21% of the keys, all of them to d: 21%
}

// A key kept on three nodes, one per zone, so that losing a zone loses no
// key; the copies each node keeps, for sizing its memory.
func ExampleLocateN() {
	r, err := ring.New([]ring.Node{
		{Name: "a1", Addr: "10.0.1.1:6379", Zone: "eu-west-1a"},
		{Name: "a2", Addr: "10.0.1.2:6379", Zone: "eu-west-1a"},
		{Name: "b1", Addr: "10.0.2.1:6379", Zone: "eu-west-1b"},
		{Name: "b2", Addr: "10.0.2.2:6379", Zone: "eu-west-1b"},
		{Name: "c1", Addr: "10.0.3.1:6379", Zone: "eu-west-1c"},
	})
	if err != nil {
		panic(err)
	}
	for _, n := range ring.LocateN(r, "user:42", 3) {
		fmt.Println(n.Name, n.Zone)
	}

	// On a hot path, into a buffer of the caller's: no allocation.
	var buf [3]ring.Node
	replicas := r.AppendLocateN(buf[:0], "user:42", 3)
	fmt.Println(len(replicas), replicas[0] == r.Locate("user:42"))

	// c1, alone in its zone, keeps a copy of every key.
	fmt.Printf("c1 keeps %.0f%% of the keys, a1 %.0f%%\n", 100*r.ReplicaShares(3)["c1"], 100*r.ReplicaShares(3)["a1"])
	// Output:
	// a1 eu-west-1a
	// c1 eu-west-1c
	// b1 eu-west-1b
	// 3 true
	// c1 keeps 100% of the keys, a1 54%
}

// An equalized ring gives every node its fair share within 1%, where a
// classic one strays by several percent; on a change it moves little more
// than the fair share of the node added, which CompareEqualization weighs.
func ExampleWithEqualize() {
	var nodes []ring.Node
	for i := range 8 {
		nodes = append(nodes, ring.Node{Name: fmt.Sprintf("cache-%d", i), Addr: fmt.Sprintf("10.0.0.%d:6379", i+1)})
	}
	nodes[0].Weight = 1.05 // fractional weights: a 5% correction
	classic, _ := ring.New(nodes)
	equalized, err := ring.New(nodes, ring.WithEqualize(0)) // 0: DefaultTolerance, 1%
	if err != nil {
		panic(err)
	}
	fmt.Printf("furthest from its fair share: classic %.1f%%, equalized %.1f%%\n", 100*classic.Deviation(), 100*equalized.Deviation())

	grown := append(nodes, ring.Node{Name: "cache-8", Addr: "10.0.0.9:6379"})
	c, err := ring.CompareEqualization(nodes, grown)
	if err != nil {
		panic(err)
	}
	// The classic ring moves only what cache-8 takes, less than its fair
	// share here; the equalized one gives it its share, and corrects the
	// others' a little.
	fmt.Printf("adding cache-8: its fair share %.1f%%; moved: classic %.1f%%, equalized %.1f%%\n",
		100*c.Minimum, 100*c.Classic.Moved, 100*c.Equalized.Moved)
	// Output:
	// furthest from its fair share: classic 7.1%, equalized 0.3%
	// adding cache-8: its fair share 11.0%; moved: classic 10.6%, equalized 11.1%
}
