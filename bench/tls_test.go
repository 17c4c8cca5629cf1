package bench

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// BenchmarkTLS compares, on one redis-server and one memcached speaking TLS
// and requiring a password (Redis requirepass, memcached -Y), the façade
// with Password and TLSConfig against the wrapped library configured for
// the same server: go-redis with TLSConfig and Password, gomemcache with a
// tls.Dialer as DialContext (and no login: gomemcache has none, so its
// server runs without -Y). Rows are BenchmarkTLS/BACKEND/Get/MODE/ROW.
// Connections are reused, so the rows measure the cost per call of TLS
// records, not handshakes.
func BenchmarkTLS(b *testing.B) {
	const password = "bench-password"
	ca := testserver.NewCA(b, "bench")
	cert := ca.Issue("server")
	ctx := context.Background()
	modes := []struct {
		name string
		run  func(func(int) error) func(*testing.B)
	}{{"serial", serial}, {"parallel", parallel}}

	b.Run("redis", func(b *testing.B) {
		addr := testserver.SecureRedis(b, 1, testserver.Security{Password: password, TLS: cert})[0].Addr
		sc := secureFacade(b, client.Options{Nodes: []ring.Node{{Addr: addr}}, Password: password, TLSConfig: ca.ClientConfig()})
		// directRedis's options, with the password and TLS.
		direct := redis.NewClient(&redis.Options{
			Addr: addr, Password: password, TLSConfig: ca.ClientConfig(),
			DialTimeout: facadeTimeout, ReadTimeout: facadeTimeout, WriteTimeout: facadeTimeout,
			PoolSize: facadePoolSize(), ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1,
		})
		defer direct.Close()
		keys := loadKeys(b, sc)
		const mask = singleKeys - 1
		directGet := func(i int) error { return checkValue(direct.Get(ctx, keys[i&mask]).Bytes()) }
		facadeGet := func(i int) error { return checkValue(sc.Get(ctx, keys[i&mask])) }
		for _, mode := range modes {
			b.Run("Get/"+mode.name+"/go-redis", mode.run(directGet))
			b.Run("Get/"+mode.name+"/shardcache", mode.run(facadeGet))
		}
	})

	b.Run("memcached", func(b *testing.B) {
		addr := testserver.SecureMemcached(b, 1, testserver.Security{TLS: cert})[0].Addr
		sc := secureFacade(b, client.Options{Backend: client.Memcached, Nodes: []ring.Node{{Addr: addr}}, TLSConfig: ca.ClientConfig()})
		direct := directMemcache(addr)
		cfg := ca.ClientConfig()
		cfg.ServerName = "127.0.0.1"
		direct.DialContext = (&tls.Dialer{Config: cfg}).DialContext
		keys := loadKeys(b, sc)
		const mask = singleKeys - 1
		directGet := func(i int) error {
			it, err := direct.Get(keys[i&mask])
			if err != nil {
				return err
			}
			return checkValue(it.Value, nil)
		}
		facadeGet := func(i int) error { return checkValue(sc.Get(ctx, keys[i&mask])) }
		for _, mode := range modes {
			b.Run("Get/"+mode.name+"/gomemcache", mode.run(directGet))
			b.Run("Get/"+mode.name+"/shardcache", mode.run(facadeGet))
		}
	})
}

// secureFacade opens a façade with opts and the default timeouts.
func secureFacade(tb testing.TB, opts client.Options) *client.Client {
	tb.Helper()
	c, err := client.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// loadKeys writes singleKeys keys through the façade and returns them.
func loadKeys(b *testing.B, sc *client.Client) []string {
	keys := keysOn(sc, sc.Nodes()[0].Addr, singleKeys)
	items := make(map[string][]byte, len(keys))
	for _, k := range keys {
		items[k] = benchValue
	}
	if err := sc.SetMulti(context.Background(), items, time.Hour); err != nil {
		b.Fatal(err)
	}
	return keys
}
