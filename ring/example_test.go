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
