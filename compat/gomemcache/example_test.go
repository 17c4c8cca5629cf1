package gomemcache_test

import (
	"fmt"
	"log"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/compat/gomemcache"
	"github.com/shardcache/shardcache/ring"
)

func Example() {
	// Was: mc := memcache.New("10.0.0.1:11211", "10.0.0.2:11211")
	mc, err := gomemcache.New([]ring.Node{
		{Name: "a", Addr: "10.0.0.1:11211"},
		{Name: "b", Addr: "10.0.0.2:11211"},
	})
	if err != nil {
		log.Fatal(err)
	}
	mc.Timeout = 100 * time.Millisecond // gomemcache's knobs, as before

	// The rest of the program is unchanged: gomemcache's types and errors.
	err = mc.Set(&memcache.Item{Key: "user:42", Value: []byte("Ada"), Flags: 1, Expiration: 3600})
	it, err := mc.Get("user:42")
	if err == memcache.ErrCacheMiss {
		fmt.Println("miss")
	} else if err == nil {
		fmt.Println(string(it.Value), it.Flags)
	}

	// Add a node, keeping every key for the window (the longest TTL).
	err = mc.Reshard([]ring.Node{
		{Name: "a", Addr: "10.0.0.1:11211"},
		{Name: "b", Addr: "10.0.0.2:11211"},
		{Name: "c", Addr: "10.0.0.3:11211"},
	}, time.Hour)
	fmt.Println(mc.Migration().Active)
}

func ExampleNewSelector() {
	r, err := ring.New([]ring.Node{{Addr: "10.0.0.1:11211"}, {Addr: "10.0.0.2:11211"}})
	if err != nil {
		log.Fatal(err)
	}
	sel, err := gomemcache.NewSelector(r)
	if err != nil {
		log.Fatal(err)
	}
	// gomemcache's own client, placed by the ring; no dual-ring migration.
	mc := memcache.NewFromSelector(sel)
	_ = mc.Set(&memcache.Item{Key: "user:42", Value: []byte("Ada")})
}
