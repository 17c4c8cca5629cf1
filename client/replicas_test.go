package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// replicaServers starts n servers of kind and returns them with their
// backend.
func replicaServers(t *testing.T, kind string, n int) ([]*testserver.Server, Backend) {
	if kind == "redis-server" {
		return testserver.Redis(t, n), Redis
	}
	return testserver.Memcached(t, n), Memcached
}

// replicaKeys returns n keys, prefixed, whose replica set in r (of size
// replicas) is want, in ring order.
func replicaKeys(r *ring.Ring, replicas int, prefix string, n int, want ...string) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		set := ring.LocateN(r, k, replicas)
		match := len(set) == len(want)
		for j := range set {
			match = match && set[j].Addr == want[j]
		}
		if match {
			keys = append(keys, k)
		}
	}
	return keys
}

// rawGet reads key from the server at addr directly, "" when absent.
func rawGet(t *testing.T, kind, addr, key string) string {
	t.Helper()
	if kind == "redis-server" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		v, err := rdb.Get(context.Background(), key).Result()
		if err == redis.Nil {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	items := metaGet(t, addr, []string{key})
	if len(items) != 1 || !items[0].Found || items[0].Flags != 0 {
		return "" // absent, or a tombstone
	}
	return string(items[0].Value)
}

// TestReplicasPausedReplica pauses one replica (SIGSTOP: it comes back with
// what it held): writes succeed on the other, deletes fail, Incr of a key
// it is first for fails; once it is back it never serves a value older
// than what was acknowledged meanwhile, read first (Options.Zone) or
// becoming the first replica of its keys when another node leaves.
func TestReplicasPausedReplica(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			ss, backend := replicaServers(t, kind, 3)
			nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr, Zone: "z1"}, {Name: "b", Addr: ss[1].Addr, Zone: "z2"}, {Name: "c", Addr: ss[2].Addr, Zone: "z3"}}
			r, err := ring.New(nodes)
			if err != nil {
				t.Fatal(err)
			}
			x := ss[0].Addr // the replica paused, read first (Zone z1)
			c, err := New(Options{Backend: backend, Nodes: nodes, Replicas: 2, Zone: "z1",
				FailureThreshold: 1, ProbeInterval: 20 * time.Millisecond,
				ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := t.Context()
			first := replicaKeys(r, 2, "f", 3, x, ss[1].Addr)  // x first in ring order
			second := replicaKeys(r, 2, "s", 2, ss[1].Addr, x) // x second: first once b leaves
			written, deleted, counter := first[0], first[1], first[2]
			for _, k := range []string{written, deleted, second[0], second[1]} {
				if err := c.Set(ctx, k, []byte("old"), time.Hour); err != nil {
					t.Fatal(err)
				}
				if got := rawGet(t, kind, x, k); got != "old" {
					t.Fatalf("%s on the replica %s = %q; want the write on every replica", k, x, got)
				}
			}
			if _, err := c.Incr(ctx, counter, 1); err != nil {
				t.Fatal(err)
			}

			resume := paused(t, ss[0])
			if err := c.Set(ctx, written, []byte("new"), time.Hour); err != nil {
				t.Fatalf("Set with a replica paused: %v; want it written to the other", err)
			}
			if h := c.Health()[0]; !h.Down || h.ReplicaMissed == 0 {
				t.Fatalf("Health of the paused replica = %+v; want held down at once, the missed write counted", h)
			}
			if err := c.Set(ctx, second[0], []byte("new"), time.Hour); err != nil {
				t.Fatal(err)
			}
			mustGet(t, c, written, "new")
			mustGet(t, c, second[1], "old")
			if err := c.Delete(ctx, deleted); !errors.Is(err, ErrNodeDown) {
				t.Fatalf("Delete with a replica down = %v; want ErrNodeDown (a surviving copy would come back)", err)
			}
			if _, err := c.Incr(ctx, counter, 1); !errors.Is(err, ErrNodeDown) {
				t.Fatalf("Incr with its first replica down = %v; want ErrNodeDown", err)
			}

			resume()
			waitFor(t, "the replica up", func() bool { return !c.Health()[0].Down })
			// Read first (Zone z1): the paused node's old values of the keys
			// written or deleted meanwhile are gone, the new ones read from
			// the other replica and copied back.
			mustGet(t, c, written, "new")
			mustMiss(t, c, deleted)
			mustGet(t, c, second[1], "old")
			if got := rawGet(t, kind, x, written); got != "new" {
				t.Fatalf("%s on the returned replica = %q; want the read's repair, %q", written, got, "new")
			}
			if v, err := c.Incr(ctx, counter, 1); err != nil || v != 2 {
				t.Fatalf("Incr back = %d, %v; want 2", v, err)
			}
			// b leaves at once, without a window: x becomes the first
			// replica of second's keys. The value written while x was
			// paused is on b alone, out of reach: a miss, never x's "old".
			if err := c.Reshard([]ring.Node{nodes[0], nodes[2]}, 0); err != nil {
				t.Fatal(err)
			}
			mustMiss(t, c, second[0])
			mustGet(t, c, second[1], "old")
		})
	}
}

// TestReplicasKilledNode kills one node of four with R=2: every key written
// before is still read, none is an error, and writes succeed; once the
// node is back empty, its keys are read from the other replica and copied
// back to it.
func TestReplicasKilledNode(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			ss, backend := replicaServers(t, kind, 4)
			var nodes []ring.Node
			for i, s := range ss {
				nodes = append(nodes, ring.Node{Name: fmt.Sprint("n", i), Addr: s.Addr})
			}
			c, err := New(Options{Backend: backend, Nodes: nodes, Replicas: 2, ProbeInterval: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := t.Context()
			keys := make([]string, 400)
			for i := range keys {
				keys[i] = fmt.Sprint("k", i)
				if err := c.Set(ctx, keys[i], []byte(keys[i]), time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			ss[1].Stop()
			for _, k := range keys {
				mustGet(t, c, k, k)
			}
			got, err := c.GetMulti(ctx, keys)
			if err != nil || len(got) != len(keys) {
				t.Fatalf("GetMulti with a node dead: %d of %d, %v", len(got), len(keys), err)
			}
			for _, k := range keys[:50] {
				if err := c.Set(ctx, k, []byte("v2"), time.Hour); err != nil {
					t.Fatalf("Set with a node dead: %v", err)
				}
			}
			ss[1].Restart()
			waitFor(t, "the node up", func() bool { return !c.Health()[1].Down })
			for _, k := range keys[:50] {
				mustGet(t, c, k, "v2")
			}
			r, _ := ring.New(nodes)
			on := 0
			for _, k := range keys[50:] {
				mustGet(t, c, k, k)
				if set := ring.LocateN(r, k, 2); set[0].Addr == ss[1].Addr {
					on++
					if v := rawGet(t, kind, ss[1].Addr, k); v != k {
						t.Fatalf("%s on the restarted node = %q; want the read's repair", k, v)
					}
				}
			}
			if on == 0 {
				t.Fatal("no key read first on the restarted node")
			}
		})
	}
}

// TestReplicasZoneDown: three zones of two nodes, R=3: with a whole zone
// stopped, every key is still read, by Get and by GetMulti.
func TestReplicasZoneDown(t *testing.T) {
	ss := testserver.Redis(t, 6)
	var nodes []ring.Node
	for i, s := range ss {
		nodes = append(nodes, ring.Node{Name: fmt.Sprint("n", i), Addr: s.Addr, Zone: fmt.Sprint("z", i%3)})
	}
	c, err := New(Options{Nodes: nodes, Replicas: 3, Zone: "z0", ProbeInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		if err := c.Set(ctx, keys[i], []byte(keys[i]), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	ss[0].Stop()
	ss[3].Stop() // zone z0, the process's own
	for _, k := range keys {
		mustGet(t, c, k, k)
	}
	if got, err := c.GetMulti(ctx, keys); err != nil || len(got) != len(keys) {
		t.Fatalf("GetMulti with zone z0 down: %d of %d, %v", len(got), len(keys), err)
	}
}

// TestReplicasMigration reshards 3 → 4 nodes with R=2 and a window: keys
// written before are read through the window, and a sweep brings every
// key to its new replica set, so that none is lost once the old sets are
// dropped.
func TestReplicasMigration(t *testing.T) {
	ss := testserver.Redis(t, 4)
	var nodes []ring.Node
	for i, s := range ss {
		nodes = append(nodes, ring.Node{Name: fmt.Sprint("n", i), Addr: s.Addr})
	}
	now := time.Now()
	clock := func() time.Time { return now }
	c, err := New(Options{Nodes: nodes[:3], Replicas: 2, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		if err := c.Set(ctx, keys[i], []byte(keys[i]), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Reshard(nodes, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys[:100] {
		mustGet(t, c, k, k)
	}
	st, err := c.Sweep(ctx, SweepOptions{})
	if err != nil || st.Copied == 0 {
		t.Fatalf("Sweep = %+v, %v; want the moved keys copied", st, err)
	}
	if err := c.Delete(ctx, keys[1]); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Hour) // the window is over: the old sets are dropped
	for _, k := range keys[2:] {
		mustGet(t, c, k, k)
	}
	mustMiss(t, c, keys[1])
}

// TestReplicasOptions: what Replicas does not work with is refused.
func TestReplicasOptions(t *testing.T) {
	nodes := []ring.Node{{Name: "a", Addr: "127.0.0.1:1"}, {Name: "b", Addr: "127.0.0.1:2"}}
	for _, opts := range []Options{
		{Nodes: nodes, Replicas: -1},
		{Nodes: nodes, Replicas: MaxReplicas + 1},
		{Nodes: nodes, Replicas: 2, Gutter: []ring.Node{{Addr: "127.0.0.1:3"}}},
		{Nodes: nodes, Replicas: 2, Lease: time.Second},
		{Nodes: nodes, Replicas: 2, NearCache: &NearCache{}},
		{Nodes: nodes, Replicas: 2, FailureThreshold: -1},
	} {
		if c, err := New(opts); !errors.Is(err, ErrBadOptions) {
			if c != nil {
				c.Close()
			}
			t.Errorf("New(%+v) = %v; want ErrBadOptions", opts, err)
		}
	}
}

// TestReplicasIncr: a counter runs on its first replica, and a process
// that reads another replica first (its Zone's) reads every increment,
// never a copy of an older count.
func TestReplicasIncr(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			ss, backend := replicaServers(t, kind, 2)
			nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr, Zone: "z1"}, {Name: "b", Addr: ss[1].Addr, Zone: "z2"}}
			r, err := ring.New(nodes)
			if err != nil {
				t.Fatal(err)
			}
			c, err := New(Options{Backend: backend, Nodes: nodes, Replicas: 2, Zone: "z2"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := t.Context()
			k := replicaKeys(r, 2, "n", 1, ss[0].Addr, ss[1].Addr)[0] // first replica a; b read first
			for want := int64(1); want <= 5; want++ {
				v, err := c.Incr(ctx, k, 1)
				if err != nil || v != want {
					t.Fatalf("Incr = %d, %v; want %d", v, err, want)
				}
				mustGet(t, c, k, fmt.Sprint(want)) // read on b: buried, then from a
				if got := rawGet(t, kind, ss[1].Addr, k); got != "" {
					t.Fatalf("b holds %q after the read; want the copy refused by the Incr's tombstone", got)
				}
			}
			got, err := c.GetMulti(ctx, []string{k})
			if err != nil || string(got[k]) != "5" {
				t.Fatalf("GetMulti = %q, %v; want 5", got, err)
			}
		})
	}
}

// TestReplicasGetMultiPaused: a GetMulti whose keys' first replica (the
// process's zone) is paused reads them all from the other replica.
func TestReplicasGetMultiPaused(t *testing.T) {
	ss, _ := replicaServers(t, "memcached", 3)
	nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr, Zone: "z1"}, {Name: "b", Addr: ss[1].Addr, Zone: "z2"}, {Name: "c", Addr: ss[2].Addr, Zone: "z3"}}
	c, err := New(Options{Backend: Memcached, Nodes: nodes, Replicas: 2, Zone: "z1", ProbeInterval: time.Hour,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		if err := c.Set(ctx, keys[i], []byte(keys[i]), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	paused(t, ss[0])
	got, err := c.GetMulti(ctx, keys)
	if err != nil || len(got) != len(keys) {
		t.Fatalf("GetMulti with the zone's replica paused: %d of %d, %v", len(got), len(keys), err)
	}
	for _, k := range keys {
		if string(got[k]) != k {
			t.Fatalf("GetMulti[%s] = %q", k, got[k])
		}
	}
}

// TestReplicasItems: the item updates that read the present value run on
// the first replica, and a process that reads the other first sees each
// result: a CAS with the id GetItem gave, an append, an increment.
func TestReplicasItems(t *testing.T) {
	ss, _ := replicaServers(t, "memcached", 2)
	nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr, Zone: "z1"}, {Name: "b", Addr: ss[1].Addr, Zone: "z2"}}
	r, err := ring.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Backend: Memcached, Nodes: nodes, Replicas: 2, Zone: "z2"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	keys := replicaKeys(r, 2, "i", 2, ss[0].Addr, ss[1].Addr) // first replica a; b read first
	k, ctr := keys[0], keys[1]
	if err := c.Set(ctx, k, []byte("a"), time.Hour); err != nil {
		t.Fatal(err)
	}
	it, err := c.GetItem(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	it.Value = []byte("b")
	if err := c.Store(ctx, StoreCAS, it); err != nil {
		t.Fatalf("CAS with GetItem's id: %v", err)
	}
	mustGet(t, c, k, "b")
	if err := c.Store(ctx, StoreAppend, Item{Key: k, Value: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, k, "bc")
	if err := c.Set(ctx, ctr, []byte("10"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Increment(ctx, ctr, 5); err != nil || v != 15 {
		t.Fatalf("Increment = %d, %v; want 15", v, err)
	}
	mustGet(t, c, ctr, "15")
}
