package mcnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/testserver"
)

// TestTLSPipelines: pipelines of many requests over TLS (a SetMulti, a
// multi-get with TTLs, a DeleteMulti of 200 keys) complete. memcached
// serves at most reqs_per_event requests of a connection per event, and
// over TLS the rest of a pipeline waits in OpenSSL's buffer with the socket
// never readable again: sent whole, such a pipeline stalls until the read
// times out.
func TestTLSPipelines(t *testing.T) {
	ca := testserver.NewCA(t, "pipelines")
	s := testserver.SecureMemcached(t, 1, testserver.Security{TLS: ca.Issue("server")})[0]
	n := New(Config{Addr: s.Addr, TLS: ca.ClientConfig(), ReadTimeout: 2 * time.Second})
	defer n.Close()
	ctx := context.Background()
	items := make([]node.Item, 200)
	keys := make([]string, len(items))
	for i := range items {
		keys[i] = fmt.Sprintf("tls:%d", i)
		items[i] = node.Item{Key: keys[i], Value: []byte(fmt.Sprint("value ", i)), TTL: time.Hour}
	}
	if err := n.SetMulti(ctx, items); err != nil {
		t.Fatalf("SetMulti of %d items over TLS: %v", len(items), err)
	}
	got, err := n.GetMulti(ctx, keys, true)
	if err != nil {
		t.Fatalf("GetMulti with TTLs of %d keys over TLS: %v", len(keys), err)
	}
	for i, it := range got {
		if !it.Found || string(it.Value) != string(items[i].Value) || !it.TTLKnown {
			t.Fatalf("%s: %+v", keys[i], it)
		}
	}
	if err := n.DeleteMulti(ctx, keys); err != nil {
		t.Fatalf("DeleteMulti of %d keys over TLS: %v", len(keys), err)
	}
	if got, err := n.GetMulti(ctx, keys, false); err != nil || got[0].Found || got[len(got)-1].Found {
		t.Fatalf("after DeleteMulti: %v", err)
	}
}
