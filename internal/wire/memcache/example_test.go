package memcache_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/wire"
	"github.com/shardcache/shardcache/internal/wire/memcache"
)

func Example() {
	ctx := context.Background()
	c := memcache.New(memcache.Config{Config: wire.Config{Addr: "127.0.0.1:11211", Size: 8}})
	defer c.Close()
	err := c.Store(ctx, memcache.Set, memcache.Item{Key: "user:42", Value: []byte("Ada"), Exptime: memcache.Expiration(time.Hour)})
	if errors.Is(err, memcache.ErrValueTooLarge) {
		return // refused before any I/O: the server's item_size_max leaves no room for it
	}
	it, err := c.Get(ctx, "user:42")
	switch {
	case err == memcache.ErrCacheMiss:
		fmt.Println("miss")
	case err == nil:
		fmt.Printf("%s (flags %d, cas %d)\n", it.Value, it.Flags, it.CAS)
	}
}

// A multi-get to several servers: every request is sent first, then each
// answer read in turn, on one goroutine.
func ExampleClient_Send() {
	ctx := context.Background()
	servers := []*memcache.Client{
		memcache.New(memcache.Config{Config: wire.Config{Addr: "127.0.0.1:11211"}}),
		memcache.New(memcache.Config{Config: wire.Config{Addr: "127.0.0.1:11212"}}),
	}
	keys := [][]string{{"a", "b"}, {"c"}}
	pending := make([]memcache.Pending, len(servers))
	for i, c := range servers {
		pending[i] = c.Send(ctx, keys[i])
	}
	for i, p := range pending {
		out := make([]wire.Answer, len(keys[i]))
		found, err := p.Recv(out)
		fmt.Println(servers[i].Addr(), found, err)
	}
}

// A lease with the meta commands: on a miss, mg with N creates a
// placeholder and gives one caller the win (W); the others see Z.
func ExampleClient_Meta() {
	ctx := context.Background()
	c := memcache.New(memcache.Config{Config: wire.Config{Addr: "127.0.0.1:11211"}})
	defer c.Close()
	r, err := c.MetaOne(ctx, memcache.Meta{Cmd: memcache.MetaGet, Key: "hot", Flags: memcache.FlagsOf("vcN"), Vivify: 30})
	switch {
	case errors.Is(err, memcache.ErrNoMeta):
		// memcached < 1.6: the classic commands only
	case err != nil:
	case r.Won():
		// Load, then store with the CAS of the placeholder.
		c.MetaOne(ctx, memcache.Meta{Cmd: memcache.MetaSet, Key: "hot", Value: []byte("v"),
			Flags: memcache.FlagsOf("CT"), CompareCAS: r.CAS, TTL: 300})
	case r.WinnerSent():
		// Another caller loads: wait, or serve r.Value if stale (r.Stale()).
	}
}

// A streaming listing of a server's keys: one callback per key, the
// listing never held in memory.
func ExampleClient_Metadump() {
	ctx := context.Background()
	c := memcache.New(memcache.Config{Config: wire.Config{Addr: "127.0.0.1:11211"}})
	defer c.Close()
	n := 0
	err := c.Metadump(ctx, func(key []byte, exp int64) error {
		n++
		return nil
	})
	fmt.Println(n, err)
}
