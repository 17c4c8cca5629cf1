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
				// One timeout marks a node down: faultTimeout is one a
				// healthy node never reaches on a busy machine (200 ms did).
				FailureThreshold: 1, ProbeInterval: 20 * time.Millisecond,
				ReadTimeout: faultTimeout, WriteTimeout: faultTimeout})
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
			// A write the paused replica misses is not acknowledged (another
			// process may read that replica), but lands on the other.
			if err := c.Set(ctx, written, []byte("new"), time.Hour); err == nil {
				t.Fatal("Set with a replica paused succeeded; want its failure there")
			}
			if h := c.Health()[0]; !h.Down || h.ReplicaMissed == 0 {
				t.Fatalf("Health of the paused replica = %+v; want held down at once, the missed write counted", h)
			}
			if err := c.Set(ctx, second[0], []byte("new"), time.Hour); !errors.Is(err, ErrNodeDown) {
				t.Fatalf("Set with a replica held down = %v; want ErrNodeDown", err)
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
// before is still read, none is an error, and writes succeed with FailOpen
// (without it they fail, not acknowledged, the dead replica having missed
// them); once the node is back empty, its keys are read from the other
// replica and copied back to it.
func TestReplicasKilledNode(t *testing.T) {
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) {
			ss, backend := replicaServers(t, kind, 4)
			var nodes []ring.Node
			for i, s := range ss {
				nodes = append(nodes, ring.Node{Name: fmt.Sprint("n", i), Addr: s.Addr})
			}
			c, err := New(Options{Backend: backend, Nodes: nodes, Replicas: 2, FailOpen: true, ProbeInterval: 20 * time.Millisecond})
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
	for _, kind := range []string{"redis-server", "memcached"} {
		t.Run(kind, func(t *testing.T) { testReplicasMigration(t, kind) })
	}
}

func testReplicasMigration(t *testing.T, kind string) {
	ss, backend := replicaServers(t, kind, 4)
	var nodes []ring.Node
	for i, s := range ss {
		nodes = append(nodes, ring.Node{Name: fmt.Sprint("n", i), Addr: s.Addr})
	}
	now := time.Now()
	clock := func() time.Time { return now }
	c, err := New(Options{Backend: backend, Nodes: nodes[:3], Replicas: 2, Now: clock})
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

// onlyLocate is a placement that places no replicas (not a
// ring.LocatorN): every key on its first node.
type onlyLocate struct{ nodes []ring.Node }

func (p onlyLocate) Locate(string) ring.Node { return p.nodes[0] }
func (p onlyLocate) Nodes() []ring.Node      { return p.nodes }

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
		{Nodes: nodes, Replicas: 2, MetaLeases: true},
		{Nodes: nodes, Replicas: 2, StaleWhileRevalidate: time.Second},
		{Nodes: nodes, Replicas: 2, EarlyRefresh: time.Second},
		{Replicas: 2, Topology: &TopologyOptions{}},
		{Placement: onlyLocate{nodes}, Replicas: 2},
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
		ReadTimeout: faultTimeout, WriteTimeout: faultTimeout})
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

// sharedKey returns a key whose replica set changes between old and new but
// keeps its first member.
func sharedKey(t *testing.T, old, new *ring.Ring, r int) string {
	for i := 0; i < 100000; i++ {
		k := fmt.Sprint("ctr", i)
		o, n := ring.LocateN(old, k, r), ring.LocateN(new, k, r)
		if o[0].Addr == n[0].Addr && o[1].Addr != n[1].Addr {
			return k
		}
	}
	t.Fatal("no key")
	return ""
}

// TestReplicasIncrMigrationSharedMember: Incr during a migration whose old
// and new replica sets share a member counts on: the old set's delete
// after the increment skips the member the new set incremented.
func TestReplicasIncrMigrationSharedMember(t *testing.T) {
	ss := testserver.Redis(t, 4)
	var nodes []ring.Node
	for i, s := range ss {
		nodes = append(nodes, ring.Node{Name: fmt.Sprint("n", i), Addr: s.Addr})
	}
	now := time.Now()
	c, err := New(Options{Nodes: nodes[:3], Replicas: 2, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ro, _ := ring.New(nodes[:3])
	rn, _ := ring.New(nodes)
	k := sharedKey(t, ro, rn, 2)
	if err := c.Reshard(nodes, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for want := int64(1); want <= 3; want++ {
		v, err := c.Incr(ctx, k, 1)
		if err != nil || v != want {
			t.Fatalf("Incr #%d during the migration = %d, %v; want %d", want, v, err, want)
		}
	}
}

// TestReplicasAddSecondReplica: Add over a key that only the second
// replica holds (the first lost it: evicted, or its hint replayed) is
// ErrNotStored, as Get finds the value.
func TestReplicasAddSecondReplica(t *testing.T) {
	ss := testserver.Redis(t, 2)
	nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr, Zone: "z1"}, {Name: "b", Addr: ss[1].Addr, Zone: "z2"}}
	r, _ := ring.New(nodes)
	c, err := New(Options{Nodes: nodes, Replicas: 2, Zone: "z2"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	k := replicaKeys(r, 2, "lock", 1, ss[0].Addr, ss[1].Addr)[0]
	if err := c.Add(ctx, k, []byte("owner1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: ss[0].Addr})
	defer rdb.Close()
	rdb.Del(ctx, k) // a evicts it
	mustGet(t, c, k, "owner1")
	if err := c.Add(ctx, k, []byte("owner2"), time.Hour); err != ErrNotStored {
		v, _ := c.Get(ctx, k)
		t.Fatalf("Add over a key Get returns = %v (now %q); want ErrNotStored", err, v)
	}
}

// TestReplicasCASAcrossReplicas: GetItem reads the CAS id of the replica a
// StoreCAS runs on, the first in ring order, even when the process's
// Zone reads another first and the servers' CAS counters differ.
func TestReplicasCASAcrossReplicas(t *testing.T) {
	ss := testserver.Memcached(t, 3)
	nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr, Zone: "z1"}, {Name: "b", Addr: ss[1].Addr, Zone: "z2"}, {Name: "c", Addr: ss[2].Addr, Zone: "z3"}}
	r, _ := ring.New(nodes)
	c, err := New(Options{Backend: Memcached, Nodes: nodes, Replicas: 2, Zone: "z2"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	// Writes to keys of set {b, c} advance b's CAS counter only.
	for _, k := range replicaKeys(r, 2, "other", 5, ss[1].Addr, ss[2].Addr) {
		if err := c.Set(ctx, k, []byte("x"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	k := replicaKeys(r, 2, "cas", 1, ss[0].Addr, ss[1].Addr)[0] // ring[0] a, read first b
	if err := c.Set(ctx, k, []byte("v1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	it, err := c.GetItem(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	it.Value = []byte("v2")
	if err := c.Store(ctx, StoreCAS, it); err != nil {
		t.Fatalf("CAS right after GetItem, nothing written between = %v; want nil", err)
	}
}

// TestReplicasGetAndTouch: GetAndTouch touches every replica, burying
// none: a read must not drop a copy.
func TestReplicasGetAndTouch(t *testing.T) {
	ss := testserver.Memcached(t, 2)
	nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr}, {Name: "b", Addr: ss[1].Addr}}
	r, _ := ring.New(nodes)
	c, err := New(Options{Backend: Memcached, Nodes: nodes, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	k := replicaKeys(r, 2, "gat", 1, ss[0].Addr, ss[1].Addr)[0]
	if err := c.Set(ctx, k, []byte("v"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetAndTouch(ctx, k, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := rawGet(t, "memcached", ss[1].Addr, k); got != "v" {
		t.Fatalf("b after a GetAndTouch = %q; want the value, touched (a read must not drop a replica)", got)
	}
}

// TestReplicasFailOpenAllDown: with FailOpen and every replica held
// down, a Set is dropped but hinted on each, so the paused replicas do not
// serve the older value once back.
func TestReplicasFailOpenAllDown(t *testing.T) {
	ss := testserver.Redis(t, 2)
	nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr}, {Name: "b", Addr: ss[1].Addr}}
	c, err := New(Options{Nodes: nodes, Replicas: 2, FailOpen: true, FailureThreshold: 1,
		ProbeInterval: 20 * time.Millisecond, ReadTimeout: faultTimeout, WriteTimeout: faultTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	if err := c.Set(ctx, "k", []byte("v1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	ra, rb := paused(t, ss[0]), paused(t, ss[1])
	_ = c.Set(ctx, "k", []byte("probe"), time.Hour) // both time out: both held down, hinted
	waitFor(t, "both down", func() bool { h := c.Health(); return h[0].Down && h[1].Down })
	ra()
	rb()
	waitFor(t, "both up", func() bool { h := c.Health(); return !h[0].Down && !h[1].Down })
	if err := c.Set(ctx, "k", []byte("v1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if rawGet(t, "redis-server", ss[0].Addr, "k") != "v1" || rawGet(t, "redis-server", ss[1].Addr, "k") != "v1" {
		t.Fatal("v1 not on both")
	}
	ra, rb = paused(t, ss[0]), paused(t, ss[1])
	_, _ = c.Get(ctx, "k") // fails on both: down again
	_, _ = c.Get(ctx, "k")
	waitFor(t, "both down", func() bool { h := c.Health(); return h[0].Down && h[1].Down })
	if err := c.Set(ctx, "k", []byte("v2"), time.Hour); err != nil {
		t.Fatalf("Set, FailOpen, all down = %v", err)
	}
	ra()
	rb()
	waitFor(t, "both up", func() bool { h := c.Health(); return !h[0].Down && !h[1].Down })
	if v, err := c.Get(ctx, "k"); err == nil {
		t.Fatalf("Get after an acknowledged Set v2 = %q; want v2 or a miss, never older", v)
	}
}

// TestReplicasMultiWritesReplicaDown: SetMulti, Touch and DeleteMulti with
// a replica held down fail with ErrNodeDown but reach the other replicas
// (the keys hinted on the one down), and once it is back none of its old
// values is read.
func TestReplicasMultiWritesReplicaDown(t *testing.T) {
	ss, _ := replicaServers(t, "redis-server", 3)
	nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr}, {Name: "b", Addr: ss[1].Addr}, {Name: "c", Addr: ss[2].Addr}}
	c, err := New(Options{Nodes: nodes, Replicas: 2, FailureThreshold: 1, ProbeInterval: 20 * time.Millisecond,
		ReadTimeout: faultTimeout, WriteTimeout: faultTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	old, next := map[string][]byte{}, map[string][]byte{}
	var keys []string
	for i := range 60 {
		k := fmt.Sprint("m", i)
		keys = append(keys, k)
		old[k], next[k] = []byte("old"), []byte("new")
	}
	if err := c.SetMulti(ctx, old, time.Hour); err != nil {
		t.Fatal(err)
	}
	resume := paused(t, ss[0])
	_ = c.Set(ctx, keys[0], []byte("old"), time.Hour) // times out on a: held down
	waitFor(t, "a held down", func() bool { return c.Health()[0].Down })
	if err := c.SetMulti(ctx, next, time.Hour); !errors.Is(err, ErrNodeDown) {
		t.Fatalf("SetMulti with a replica down = %v; want ErrNodeDown", err)
	}
	mustGet(t, c, keys[2], "new") // from the other replica
	r, err := ring.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	touched := keys[2]
	for _, k := range keys[2:] {
		if set := ring.LocateN(r, k, 2); set[0].Addr == ss[0].Addr || set[1].Addr == ss[0].Addr {
			touched = k
			break
		}
	}
	if err := c.Touch(ctx, touched, 2*time.Hour); !errors.Is(err, ErrNodeDown) {
		t.Fatalf("Touch with a replica down = %v; want ErrNodeDown", err)
	}
	if err := c.DeleteMulti(ctx, keys[:2]); !errors.Is(err, ErrNodeDown) && !onlyOthers(r, keys[:2], ss[0].Addr) {
		t.Fatalf("DeleteMulti with a replica down = %v; want ErrNodeDown", err)
	}
	resume()
	waitFor(t, "a up", func() bool { return !c.Health()[0].Down })
	got, err := c.GetMulti(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys[2:] {
		if string(got[k]) != "new" {
			t.Fatalf("%s after a's return = %q; want new", k, got[k])
		}
	}
	for _, k := range keys[:2] {
		if v, ok := got[k]; ok {
			t.Fatalf("%s, deleted while a was down, reads %q", k, v)
		}
	}
}

// onlyOthers reports whether no key of keys has the node at addr among its
// two replicas in r.
func onlyOthers(r *ring.Ring, keys []string, addr string) bool {
	for _, k := range keys {
		for _, n := range ring.LocateN(r, k, 2) {
			if n.Addr == addr {
				return false
			}
		}
	}
	return true
}
