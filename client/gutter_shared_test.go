package client

import (
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/internal/testserver/faultproxy"
	"github.com/shardcache/shardcache/ring"
)

// TestGutterShared: two processes of a fleet, one of which (a) cannot
// reach node "a" and writes its key through the gutter, then is closed
// without ever reaching "a" again (its own hints gone with it); the other
// (b) reaches "a" all along, which still holds the value the write
// replaced. b must stop reading that value: the gutter's log, applied by
// every process at its ticks. Without the log it reads it until the
// key's TTL.
func TestGutterShared(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			var ss []*testserver.Server
			backend := Redis
			if kind == "redis-server" {
				ss = testserver.Redis(t, 3)
			} else {
				ss, backend = testserver.Memcached(t, 3), Memcached
			}
			proxy := faultproxy.New(t, ss[0].Addr)
			opts := func(addrA string) Options {
				return Options{Backend: backend, Nodes: []ring.Node{{Name: "a", Addr: addrA}, {Name: "b", Addr: ss[1].Addr}},
					Gutter: []ring.Node{{Name: "g", Addr: ss[2].Addr}}, GutterTTL: time.Minute,
					FailureThreshold: 1, ProbeInterval: 20 * time.Millisecond,
					ReadTimeout: faultTimeout, WriteTimeout: faultTimeout}
			}
			b, err := New(opts(ss[0].Addr))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			a, err := New(opts(proxy.Addr))
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			k := keysOn(b, ss[0].Addr, "k", 1)[0]
			if err := b.Set(ctx, k, []byte("old"), time.Hour); err != nil {
				t.Fatal(err)
			}

			proxy.BlackHole()
			a.Get(ctx, k) // fails: a holds "a" down
			waitFor(t, "a holding the node down", func() bool { return a.Health()[0].Down })
			if err := a.Set(ctx, k, []byte("new"), time.Hour); err != nil {
				t.Fatalf("Set with the node down: %v; want it written to the gutter", err)
			}
			a.Close() // its own hints die with it
			waitFor(t, "b to stop reading the replaced value", func() bool {
				v, err := b.Get(ctx, k)
				return err == ErrCacheMiss || (err == nil && string(v) != "old")
			})
			mustMiss(t, b, k)

		})
	}
}
