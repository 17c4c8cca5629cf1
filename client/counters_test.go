package client

import (
	"errors"
	"testing"
	"time"

	"github.com/shardcache/shardcache/ring"
)

// TestIncrTouchDuringMigration checks the operations that depend on a moved
// key's value, with AsyncBackfill on: Incr continues the counter from its
// old owner's value, and the copy keeps its lack of expiry; Touch sets the
// TTL of a key only the old owner had; and when the old owner cannot be
// read, Incr says so instead of restarting the counter from delta.
func TestIncrTouchDuringMigration(t *testing.T) {
	forEachCluster(t, 8, func(t *testing.T, cl *cluster) {
		ctx := t.Context()
		clock := newFakeClock()
		from, to := cl.nodes(0, 1, 2, 3, 4, 5, 6, 7), cl.nodes(0, 1, 2, 3, 4, 5)
		c := cl.client(t, Options{Nodes: from, Now: clock.Now, AsyncBackfill: true})
		keys := dualKeys(t, cl.kind, from, to, 40)
		counter, touched := keys[0], keys[1]
		var unreachable string // a moved counter whose old owner will be stopped
		for _, k := range keys[2:] {
			if c.Locate(k).Addr == cl.addrs[7] {
				unreachable = k
				break
			}
		}
		for _, k := range []string{counter, unreachable} {
			if v, err := c.Incr(ctx, k, 41); err != nil || v != 41 {
				t.Fatalf("Incr(%q, 41) = %d, %v", k, v, err)
			}
		}
		if err := c.Set(ctx, touched, []byte("t"), time.Hour); err != nil {
			t.Fatal(err)
		}

		// The case: a short window, nothing read, then Incr.
		if err := c.Reshard(to, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Incr(ctx, counter, 1); err != nil || v != 42 {
			t.Fatalf("Incr of a moved counter with AsyncBackfill = %d, %v; want 42", v, err)
		}
		if err := c.Touch(ctx, touched, 2*time.Hour); err != nil {
			t.Fatalf("Touch of a key only the old owner has: %v", err)
		}
		// A memcached without the meta commands tells no TTL, to a copy
		// nor to readOwners: the copy takes migration.BackfillTTL's.
		if cl.kind != "memcached-classic" {
			got := readOwners(t, c, map[string]*kept{counter: {kind: "counter"}, touched: {kind: "string"}})
			if g := got[counter]; !g.found || g.value != "42" || g.ttl != 0 {
				t.Fatalf("counter on its new owner: %+v; want 42 without expiry", g)
			}
			if g := got[touched]; !g.found || g.value != "t" || g.ttl < 2*time.Hour-time.Minute || g.ttl > 2*time.Hour {
				t.Fatalf("touched key on its new owner: %+v; want a TTL of 2h", g)
			}
		}
		if h := cl.holders(t, counter); len(h) != 1 || h[0] != c.Locate(counter).Addr {
			t.Fatalf("counter held by %v; want its new owner alone", h)
		}

		cl.stop(7)
		v, err := c.Incr(ctx, unreachable, 1)
		var ne *NodeError
		if !errors.As(err, &ne) || ne.Node.Addr != cl.addrs[7] {
			t.Fatalf("Incr of a counter whose old owner is down = %d, %v; want its NodeError", v, err)
		}
		if h := cl.holders(t, unreachable); len(h) != 0 {
			t.Fatalf("Incr restarted the counter from delta: on %v", h)
		}
	})
}

// TestBackfillKeepsNoExpiry checks that a key without expiry copied by a
// read keeps no expiry on both backends, and a key with a TTL keeps it.
func TestBackfillKeepsNoExpiry(t *testing.T) {
	forEachCluster(t, 2, func(t *testing.T, cl *cluster) {
		if cl.kind == "memcached-classic" {
			t.Skip("a memcached without the meta commands tells no TTL: a copy takes migration.BackfillTTL's")
		}
		ctx := t.Context()
		c := cl.client(t, Options{Nodes: cl.nodes(0)})
		if err := c.Set(ctx, "forever", []byte("f"), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, "hour", []byte("h"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := c.Reshard([]ring.Node{cl.nodes(1)[0]}, time.Minute); err != nil {
			t.Fatal(err)
		}
		mustGet(t, c, "forever", "f")
		mustGet(t, c, "hour", "h")
		got := readOwners(t, c, map[string]*kept{"forever": {kind: "string"}, "hour": {kind: "string"}})
		if g := got["forever"]; !g.found || g.ttl != 0 {
			t.Fatalf("key without expiry copied by a read: %+v", g)
		}
		if g := got["hour"]; !g.found || g.ttl < time.Hour-time.Minute || g.ttl > time.Hour {
			t.Fatalf("key with a TTL of 1h copied by a read: %+v", g)
		}
	})
}
