package goredis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

var (
	_ redis.UniversalClient = (*Ring)(nil)
	_ redis.Cmdable         = (*Ring)(nil)
)

func nodesOf(servers []*testserver.Server) []ring.Node {
	var nodes []ring.Node
	for i, a := range testserver.Addrs(servers) {
		nodes = append(nodes, ring.Node{Name: fmt.Sprintf("n%d", i), Addr: a})
	}
	return nodes
}

// ringAddrs returns go-redis's RingOptions.Addrs of nodes: name to address.
func ringAddrs(nodes []ring.Node) map[string]string {
	m := make(map[string]string, len(nodes))
	for _, n := range nodes {
		m[n.Name] = n.Addr
	}
	return m
}

func newRing(t *testing.T, nodes []ring.Node, opts Options) *Ring {
	t.Helper()
	r, err := NewWithOptions(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// step is one call of the table; it returns what a user would observe.
type step struct {
	name string
	do   func(ctx context.Context, rdb redis.Cmdable, key func(string) string) string
}

// show renders a command's answer: its value and whether its error is
// redis.Nil, another error, or none.
func show(cmd redis.Cmder) string {
	switch err := cmd.Err(); {
	case errors.Is(err, redis.Nil):
		return "redis.Nil"
	case err != nil:
		return "error"
	}
	switch c := cmd.(type) {
	case *redis.DurationCmd: // a TTL: how long exactly depends on the clock
		switch d := c.Val(); {
		case d > 0:
			return "ttl>0"
		default:
			return d.String()
		}
	case *redis.MapStringStringCmd:
		var kv []string
		for k, v := range c.Val() {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		return strings.Join(kv, ",")
	}
	s := cmd.String()
	return s[strings.Index(s, ":")+1:] // the value, without the command's arguments
}

func one(name string, fn func(ctx context.Context, rdb redis.Cmdable, key func(string) string) redis.Cmder) step {
	return step{name, func(ctx context.Context, rdb redis.Cmdable, key func(string) string) string {
		return show(fn(ctx, rdb, key))
	}}
}

// steps is the table; the first prepared steps only write.
func steps() (prepared int, table []step) {
	type C = redis.Cmdable
	type X = context.Context
	type K = func(string) string
	table = []step{
		one("set a", func(ctx X, r C, k K) redis.Cmder { return r.Set(ctx, k("a"), "va", 0) }),
		one("set b ttl", func(ctx X, r C, k K) redis.Cmder { return r.Set(ctx, k("b"), "vb", time.Hour) }),
		one("set n", func(ctx X, r C, k K) redis.Cmder { return r.Set(ctx, k("n"), "40", 0) }),
		one("hset h", func(ctx X, r C, k K) redis.Cmder { return r.HSet(ctx, k("h"), "f1", "1", "f2", "2") }),
		one("hset h2", func(ctx X, r C, k K) redis.Cmder { return r.HSet(ctx, k("h2"), "x", "1") }),
		one("expire h", func(ctx X, r C, k K) redis.Cmder { return r.Expire(ctx, k("h"), time.Hour) }),
		one("set d", func(ctx X, r C, k K) redis.Cmder { return r.Set(ctx, k("d"), "vd", 0) }),
		one("set e", func(ctx X, r C, k K) redis.Cmder { return r.Set(ctx, k("e"), "ve", 0) }),
		one("set nx", func(ctx X, r C, k K) redis.Cmder { return r.Set(ctx, k("nx"), "vnx", 0) }),
	}
	prepared = len(table)
	table = append(table,
		one("get a", func(ctx X, r C, k K) redis.Cmder { return r.Get(ctx, k("a")) }),
		one("get missing", func(ctx X, r C, k K) redis.Cmder { return r.Get(ctx, k("missing")) }),
		one("ttl b", func(ctx X, r C, k K) redis.Cmder { return r.TTL(ctx, k("b")) }),
		one("ttl a", func(ctx X, r C, k K) redis.Cmder { return r.TTL(ctx, k("a")) }),
		one("pttl missing", func(ctx X, r C, k K) redis.Cmder { return r.PTTL(ctx, k("missing")) }),
		one("type h", func(ctx X, r C, k K) redis.Cmder { return r.Type(ctx, k("h")) }),
		one("hgetall h", func(ctx X, r C, k K) redis.Cmder { return r.HGetAll(ctx, k("h")) }),
		one("ttl h", func(ctx X, r C, k K) redis.Cmder { return r.TTL(ctx, k("h")) }),
		one("hget h f2", func(ctx X, r C, k K) redis.Cmder { return r.HGet(ctx, k("h"), "f2") }),
		one("hset h2 y", func(ctx X, r C, k K) redis.Cmder { return r.HSet(ctx, k("h2"), "y", "2") }),
		one("hgetall h2", func(ctx X, r C, k K) redis.Cmder { return r.HGetAll(ctx, k("h2")) }),
		one("incr n", func(ctx X, r C, k K) redis.Cmder { return r.Incr(ctx, k("n")) }),
		one("incrby n", func(ctx X, r C, k K) redis.Cmder { return r.IncrBy(ctx, k("n"), 10) }),
		one("incr new", func(ctx X, r C, k K) redis.Cmder { return r.Incr(ctx, k("counter")) }),
		one("incr a (not a number)", func(ctx X, r C, k K) redis.Cmder { return r.Incr(ctx, k("a")) }),
		one("setnx nx", func(ctx X, r C, k K) redis.Cmder { return r.SetNX(ctx, k("nx"), "other", 0) }),
		one("get nx", func(ctx X, r C, k K) redis.Cmder { return r.Get(ctx, k("nx")) }),
		one("expire d", func(ctx X, r C, k K) redis.Cmder { return r.Expire(ctx, k("d"), time.Hour) }),
		one("expire missing", func(ctx X, r C, k K) redis.Cmder { return r.Expire(ctx, k("missing"), time.Hour) }),
		one("ttl d", func(ctx X, r C, k K) redis.Cmder { return r.TTL(ctx, k("d")) }),
		one("exists a missing b a", func(ctx X, r C, k K) redis.Cmder {
			return r.Exists(ctx, k("a"), k("missing"), k("b"), k("a"))
		}),
		one("mget", func(ctx X, r C, k K) redis.Cmder {
			return r.MGet(ctx, k("a"), k("missing"), k("b"), k("h"), k("e"))
		}),
		one("mset", func(ctx X, r C, k K) redis.Cmder {
			return r.MSet(ctx, k("m1"), "1", k("m2"), "2", k("m3"), 3, k("a"), "first", k("a"), "va2")
		}),
		one("mget after mset", func(ctx X, r C, k K) redis.Cmder {
			return r.MGet(ctx, k("m1"), k("m2"), k("m3"), k("a"))
		}),
		one("del", func(ctx X, r C, k K) redis.Cmder {
			return r.Del(ctx, k("m1"), k("m2"), k("missing"), k("e"), k("e"))
		}),
		one("get e", func(ctx X, r C, k K) redis.Cmder { return r.Get(ctx, k("e")) }),
		one("unlink", func(ctx X, r C, k K) redis.Cmder { return r.Unlink(ctx, k("m3"), k("missing")) }),
		one("touch", func(ctx X, r C, k K) redis.Cmder { return r.Touch(ctx, k("a"), k("b"), k("missing")) }),
		one("do mget", func(ctx X, r C, k K) redis.Cmder {
			return r.(interface {
				Do(context.Context, ...any) *redis.Cmd
			}).Do(ctx, "MGET", k("a"), k("b"))
		}),
		step{"pipeline", func(ctx X, r C, k K) string {
			var out []string
			cmds, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, k("p1"), "1", 0)
				p.Incr(ctx, k("p1"))
				p.Get(ctx, k("p1"))
				p.MGet(ctx, k("p1"), k("a"), k("missing"))
				p.Get(ctx, k("missing"))
				p.HGetAll(ctx, k("h"))
				p.Del(ctx, k("p1"), k("b"))
				p.Exists(ctx, k("p1"), k("b"), k("a"))
				return nil
			})
			for _, c := range cmds {
				out = append(out, show(c))
			}
			return fmt.Sprint(errors.Is(err, redis.Nil), " ", strings.Join(out, " | "))
		}},
		one("get a at the end", func(ctx X, r C, k K) redis.Cmder { return r.Get(ctx, k("a")) }),
	)
	return prepared, table
}

func run(ctx context.Context, rdb redis.Cmdable, key func(string) string, between func()) []string {
	prepared, table := steps()
	out := make([]string, len(table))
	for i, s := range table {
		if i == prepared && between != nil {
			between()
		}
		out[i] = s.name + ": " + s.do(ctx, rdb, key)
	}
	return out
}

func compare(t *testing.T, want, got []string) {
	t.Helper()
	for i := range want {
		if want[i] != got[i] {
			t.Errorf("step %d:\n  redis.Client on one server: %s\n  drop-in:                    %s", i, want[i], got[i])
		}
	}
}

func mustRing(t *testing.T, nodes []ring.Node) *ring.Ring {
	t.Helper()
	r, err := ring.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSameAsClient runs the table against a *redis.Client on one
// redis-server and against the drop-in *redis.Ring over four: every answer
// is the same. Then again over eight resharded to six after the writes, with
// every key of the table one that moves.
func TestSameAsClient(t *testing.T) {
	ctx := context.Background()
	servers := testserver.Redis(t, 9)
	single := redis.NewClient(&redis.Options{Addr: servers[0].Addr})
	defer single.Close()
	want := run(ctx, single, func(k string) string { return k }, nil)
	t.Logf("the table has %d steps:\n%s", len(want), strings.Join(want, "\n"))

	t.Run("4 nodes", func(t *testing.T) {
		rdb := newRing(t, nodesOf(servers[1:5]), Options{})
		spread := map[string]bool{}
		key := func(k string) string { spread[rdb.Shardcache().Locate(k).Addr] = true; return k }
		compare(t, want, run(ctx, rdb, key, nil))
		if len(spread) != 4 {
			t.Errorf("the table's keys reached %d of the 4 nodes", len(spread))
		}
	})

	t.Run("8 to 6", func(t *testing.T) {
		from := nodesOf(servers[1:9])
		to := from[:6]
		rdb := newRing(t, from, Options{})
		oldRing, newRing := mustRing(t, from), mustRing(t, to)
		key := func(k string) string { // the first variant of k that moves
			for i := 0; ; i++ {
				if m := fmt.Sprintf("%s.%d", k, i); oldRing.Locate(m).Addr != newRing.Locate(m).Addr {
					return m
				}
			}
		}
		got := run(ctx, rdb, key, func() {
			if err := rdb.Reshard(to, time.Hour); err != nil {
				t.Fatal(err)
			}
		})
		compare(t, want, got)
		st := rdb.Migration()
		if !st.Active || st.FallbackHits == 0 || st.Backfills == 0 || st.DualWrites == 0 || st.DualDeletes == 0 {
			t.Errorf("the table did not run through the migration: %+v", st)
		}
	})
}

// TestMGetAcrossShards checks that MGET of 100 keys over 4 shards returns
// all 100 values, in order, where go-redis's own Ring returns only the first
// key's shard's.
func TestMGetAcrossShards(t *testing.T) {
	ctx := context.Background()
	servers := testserver.Redis(t, 4)
	rdb := newRing(t, nodesOf(servers), Options{})
	keys := make([]string, 100)
	args := make([]any, 0, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
		args = append(args, keys[i], "v"+keys[i])
	}
	if err := rdb.MSet(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	vals, err := rdb.MGet(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v != "v"+keys[i] {
			t.Fatalf("MGET value %d = %v, want %q", i, v, "v"+keys[i])
		}
	}
	perNode := map[string]int{}
	for _, k := range keys {
		perNode[rdb.Shardcache().Locate(k).Name]++
	}
	if len(perNode) != 4 {
		t.Fatalf("the keys are on %d nodes: %v", len(perNode), perNode)
	}

	plain := redis.NewRing(&redis.RingOptions{Addrs: ringAddrs(nodesOf(servers))})
	defer plain.Close()
	got := 0
	theirs, _ := plain.MGet(ctx, keys...).Result()
	for i, v := range theirs {
		if v == "v"+keys[i] {
			got++
		}
	}
	t.Logf("MGET of 100 keys over 4 shards: all 100 values (%v per node); go-redis's Ring: %d", perNode, got)
}

// TestReshardKeepsEveryKey writes strings and hashes with TTLs through the
// Ring over 8 nodes, reshards to 6, and reads every key back: one by one,
// by MGET and by HGETALL; moved keys are backfilled to their new owners,
// with their TTL.
func TestReshardKeepsEveryKey(t *testing.T) {
	ctx := context.Background()
	servers := testserver.Redis(t, 8)
	from := nodesOf(servers)
	to := from[:6]
	rdb := newRing(t, from, Options{})
	const n = 400
	strs, hashes := make([]string, n), make([]string, n/4)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range strs {
			strs[i] = fmt.Sprintf("str:%d", i)
			p.Set(ctx, strs[i], strs[i], time.Hour)
		}
		for i := range hashes {
			hashes[i] = fmt.Sprintf("hash:%d", i)
			p.HSet(ctx, hashes[i], "f", hashes[i], "g", i)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Reshard(to, time.Hour); err != nil {
		t.Fatal(err)
	}
	oldRing, newRing := mustRing(t, from), mustRing(t, to)
	moved := 0
	for _, k := range append(append([]string{}, strs...), hashes...) {
		if oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			moved++
		}
	}
	for _, k := range strs[:n/2] {
		if v, err := rdb.Get(ctx, k).Result(); err != nil || v != k {
			t.Fatalf("GET %q after the reshard = %q, %v", k, v, err)
		}
	}
	vals, err := rdb.MGet(ctx, strs[n/2:]...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v != strs[n/2+i] {
			t.Fatalf("MGET value %d after the reshard = %v", i, v)
		}
	}
	for _, k := range hashes {
		if h, err := rdb.HGetAll(ctx, k).Result(); err != nil || h["f"] != k || len(h) != 2 {
			t.Fatalf("HGETALL %q after the reshard = %v, %v", k, h, err)
		}
	}
	direct := map[string]*redis.Client{}
	for _, s := range servers[:6] {
		direct[s.Addr] = redis.NewClient(&redis.Options{Addr: s.Addr})
		defer direct[s.Addr].Close()
	}
	for _, k := range strs {
		owner := direct[newRing.Locate(k).Addr]
		if v, _ := owner.Get(ctx, k).Result(); v != k {
			t.Fatalf("%q not on its new owner", k)
		}
		if ttl := owner.PTTL(ctx, k).Val(); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("%q on its new owner has TTL %v, want its remaining hour", k, ttl)
		}
	}
	st := rdb.Migration()
	if st.FallbackHits != int64(moved) || st.Backfills != int64(moved) {
		t.Fatalf("%d keys moved; status %+v", moved, st)
	}
	t.Logf("%d of %d keys moved, all read back and backfilled", moved, n+n/4)
}

// TestShardDownKeepsPlacement stops one node and waits for go-redis's
// heartbeat to mark it down: its keys then fail, and the others' keys stay
// where they were; none is rehashed onto another node.
func TestShardDownKeepsPlacement(t *testing.T) {
	ctx := context.Background()
	servers := testserver.Redis(t, 4)
	nodes := nodesOf(servers)
	rdb := newRing(t, nodes, Options{Ring: redis.RingOptions{
		HeartbeatFrequency: 20 * time.Millisecond,
		DialerRetries:      1, // a refused dial fails at once, not after 5 attempts
		MaxRetries:         -1,
	}})
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		if err := rdb.Set(ctx, keys[i], keys[i], 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	servers[0].Stop()
	for attempt := 0; rdb.Len() == 4; attempt++ { // Len counts the shards up
		if attempt == 1000 {
			t.Fatal("the heartbeat never marked the stopped shard down")
		}
		time.Sleep(10 * time.Millisecond) // polling the heartbeat's state, bounded
	}
	for _, k := range keys {
		err := rdb.Get(ctx, k).Err()
		if rdb.Shardcache().Locate(k).Addr == servers[0].Addr {
			if err == nil || errors.Is(err, redis.Nil) {
				t.Fatalf("GET %q of the stopped node = %v, want a connection error", k, err)
			}
			if c, _ := rdb.GetShardClientForKey(k); c == nil || c.Options().Addr != servers[0].Addr {
				t.Fatalf("%q is no longer placed on its node", k)
			}
		} else if err != nil {
			t.Fatalf("GET %q of a live node = %v", k, err)
		}
	}
}

// TestCrossShardRefused checks that a multi-key command that cannot be
// split fails with ErrCrossShard when its keys span nodes, and runs when a
// hash tag keeps them together; a transaction likewise.
func TestCrossShardRefused(t *testing.T) {
	ctx := context.Background()
	servers := testserver.Redis(t, 4)
	rdb := newRing(t, nodesOf(servers), Options{})
	var a, b string
	for i := 0; b == ""; i++ {
		k := fmt.Sprintf("s%d", i)
		if a == "" {
			a = k
		} else if rdb.Shardcache().Locate(k) != rdb.Shardcache().Locate(a) {
			b = k
		}
	}
	rdb.SAdd(ctx, a, "x")
	rdb.SAdd(ctx, b, "y")
	if err := rdb.SUnion(ctx, a, b).Err(); !errors.Is(err, ErrCrossShard) || !strings.Contains(err.Error(), a) {
		t.Fatalf("SUNION across nodes = %v, want ErrCrossShard naming %q", err, a)
	}
	if err := rdb.Rename(ctx, a, b).Err(); !errors.Is(err, ErrCrossShard) {
		t.Fatalf("RENAME across nodes = %v, want ErrCrossShard", err)
	}
	rdb.SAdd(ctx, "{u}:a", "x")
	rdb.SAdd(ctx, "{u}:b", "y")
	if got, err := rdb.SUnion(ctx, "{u}:a", "{u}:b").Result(); err != nil || len(got) != 2 {
		t.Fatalf("SUNION within a hash tag = %v, %v", got, err)
	}
	cmds, _ := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "{u}:c")
		p.SUnion(ctx, a, b)
		p.SCard(ctx, a)
		return nil
	})
	if len(cmds) != 3 || !errors.Is(cmds[1].Err(), ErrCrossShard) || cmds[2].(*redis.IntCmd).Val() != 1 {
		t.Fatalf("a pipeline with SUNION across nodes: %v", cmds)
	}
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, a)
		p.Incr(ctx, b)
		return nil
	})
	if !errors.Is(err, ErrCrossShard) {
		t.Fatalf("MULTI/EXEC across nodes = %v, want ErrCrossShard", err)
	}
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{u}:c", "1", 0)
		p.Incr(ctx, "{u}:c")
		return nil
	}); err != nil {
		t.Fatalf("MULTI/EXEC within a hash tag = %v", err)
	}
}

// TestReshardErrors checks that a Reshard during an open window fails with
// client.ErrMigrationActive and leaves the Ring working, and that the Ring's
// shards are the new nodes once Reshard returns.
func TestReshardErrors(t *testing.T) {
	ctx := context.Background()
	servers := testserver.Redis(t, 3)
	nodes := nodesOf(servers)
	rdb := newRing(t, nodes[:2], Options{})
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Reshard(nil, time.Hour); err == nil {
		t.Fatal("Reshard to no nodes succeeded")
	}
	if err := rdb.Reshard(nodes, time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := len(rdb.GetShardClients()); n != 3 {
		t.Fatalf("%d shards after Reshard to 3 nodes", n)
	}
	if err := rdb.Reshard(nodes[:1], time.Hour); !errors.Is(err, client.ErrMigrationActive) {
		t.Fatalf("Reshard during the window = %v, want ErrMigrationActive", err)
	}
	if n := len(rdb.GetShardClients()); n != 3 {
		t.Fatalf("%d shards after a refused Reshard, want the 3 of the running migration", n)
	}
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET after a refused Reshard = %q, %v", v, err)
	}
}

// TestMigrateFromGoRedisRing moves a fleet off go-redis's own Ring without a
// cold cache: keys written by redis.NewRing read back through the drop-in
// started with ring.NewRendezvous (go-redis Ring's placement) as
// MigrateFrom, strings by GET and MGET, hashes by HGETALL.
func TestMigrateFromGoRedisRing(t *testing.T) {
	ctx := context.Background()
	servers := testserver.Redis(t, 4)
	nodes := nodesOf(servers)
	old := redis.NewRing(&redis.RingOptions{Addrs: ringAddrs(nodes)})
	defer old.Close()
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("legacy:%d", i)
		if err := old.Set(ctx, keys[i], keys[i], time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.HSet(ctx, "legacy:hash", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	rendezvous, err := ring.NewRendezvous(nodes)
	if err != nil {
		t.Fatal(err)
	}
	rdb := newRing(t, nodes, Options{MigrateFrom: &client.MigrateFrom{
		Placement: rendezvous, Start: time.Now(), Window: time.Hour,
	}})
	vals, err := rdb.MGet(ctx, keys[:100]...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v != keys[i] {
			t.Fatalf("MGET value %d = %v", i, v)
		}
	}
	for _, k := range keys[100:] {
		if v, err := rdb.Get(ctx, k).Result(); err != nil || v != k {
			t.Fatalf("GET %q = %q, %v", k, v, err)
		}
	}
	if h, err := rdb.HGetAll(ctx, "legacy:hash").Result(); err != nil || h["f"] != "v" {
		t.Fatalf("HGETALL of a legacy hash = %v, %v", h, err)
	}
	st := rdb.Migration()
	if st.FallbackHits == 0 || st.Backfills != st.FallbackHits {
		t.Fatalf("the keys did not come through the old placement: %+v", st)
	}
	t.Logf("%d keys were on another server under go-redis's rendezvous; all read back", st.FallbackHits)
}

// TestBadInput: a nil context, a padded address and an oversized value get
// typed errors, never a panic, and store nothing.
func TestBadInput(t *testing.T) {
	servers := testserver.Redis(t, 2)
	nodes := []ring.Node{{Name: "a", Addr: servers[0].Addr}, {Name: "b", Addr: servers[1].Addr}}
	if _, err := New([]ring.Node{{Addr: " " + servers[0].Addr}}); !errors.Is(err, ring.ErrBadAddr) {
		t.Errorf("New with a padded address = %v, want ring.ErrBadAddr", err)
	}
	r, err := NewWithOptions(nodes, Options{MaxValueSize: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	for name, err := range map[string]error{
		"Set":  r.Set(ctx, "big", make([]byte, 2<<10), 0).Err(),
		"MSet": r.MSet(ctx, "a", "x", "big", string(make([]byte, 2<<10))).Err(),
		"HSet": r.HSet(ctx, "h", "f", make([]byte, 2<<10)).Err(),
		"Pipeline": func() error {
			_, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "ok", "v", 0)
				p.Set(ctx, "big", make([]byte, 2<<10), 0)
				return nil
			})
			return err
		}(),
	} {
		if !errors.Is(err, client.ErrValueTooLarge) {
			t.Errorf("%s of an oversized value = %v, want client.ErrValueTooLarge", name, err)
		}
	}
	for _, k := range []string{"big", "ok", "h"} {
		if n, err := r.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Errorf("%q exists after the refused writes: %d, %v", k, n, err)
		}
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("Get with a nil context panicked: %v", p)
			}
		}()
		//lint:ignore SA1012 a nil context is the bad input under test
		if err := r.Get(nil, "k").Err(); !errors.Is(err, client.ErrNilContext) { //nolint:staticcheck
			t.Errorf("Get with a nil context = %v, want client.ErrNilContext", err)
		}
	}()
	// Every other way in with a nil context: a split MGet, a pipeline, a
	// transaction, a command by Do.
	for name, call := range map[string]func() error{
		"MGet": func() error { return r.MGet(nil, "a", "b", "c", "d").Err() }, //nolint:staticcheck
		"Pipelined": func() error {
			_, err := r.Pipelined(nil, func(p redis.Pipeliner) error { p.Get(nil, "k"); return nil }) //nolint:staticcheck
			return err
		},
		"TxPipelined": func() error {
			_, err := r.TxPipelined(nil, func(p redis.Pipeliner) error { p.Get(nil, "k"); return nil }) //nolint:staticcheck
			return err
		},
		"Do": func() error { return r.Do(nil, "get", "k").Err() }, //nolint:staticcheck
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s with a nil context panicked: %v", name, p)
				}
			}()
			if err := call(); !errors.Is(err, client.ErrNilContext) {
				t.Errorf("%s with a nil context = %v, want client.ErrNilContext", name, err)
			}
		}()
	}
}

// TestOnePoolPerNode: under 64 callers mixing Get, Set, a split MGet and a
// pipeline, each server sees no more connections from the Ring than
// go-redis's own Ring would open (RingOptions.PoolSize, and
// PipelinePoolSize more for pipelines, unless it is negative), counted by
// the server itself: the client that splits MGet and applies a migration
// shares the Ring's shard clients rather than pooling its own. The same
// holds during a window, when the client also reads the old owners.
func TestOnePoolPerNode(t *testing.T) {
	const poolSize = 4
	for _, tc := range []struct {
		name      string
		pipelines int // RingOptions.PipelinePoolSize
		bound     int64
	}{
		{"pipelines in the pool", -1, poolSize},
		{"go-redis's pipeline pool", 0, poolSize + redis.DefaultPipelinePoolSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers := testserver.Redis(t, 3)
			nodes := nodesOf(servers)
			r := newRing(t, nodes[:2], Options{Ring: redis.RingOptions{PoolSize: poolSize, PipelinePoolSize: tc.pipelines}})
			ctx := t.Context()
			keys := make([]string, 40)
			for i := range keys {
				keys[i] = fmt.Sprintf("pool:%d", i)
			}
			load := func() {
				var wg sync.WaitGroup
				for g := range 64 {
					wg.Go(func() {
						for i := range 20 {
							k := keys[(g+i)%len(keys)]
							var err error
							switch (g + i) % 4 {
							case 0:
								err = r.Set(ctx, k, "v"+k, time.Hour).Err()
							case 1:
								err = r.Get(ctx, k).Err()
							case 2:
								err = r.MGet(ctx, keys...).Err()
							default:
								_, err = r.Pipelined(ctx, func(p redis.Pipeliner) error {
									p.Get(ctx, k)
									p.Incr(ctx, k+":n")
									return nil
								})
							}
							if err != nil && err != redis.Nil {
								t.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
			check := func(phase string) {
				t.Helper()
				counters := make([]*testserver.ConnCounter, len(servers))
				for i, s := range servers {
					counters[i] = s.CountConns(t)
				}
				load()
				for i, cc := range counters {
					if peak, _ := cc.Stop(); peak > tc.bound {
						t.Errorf("%s: %s saw %d connections at once from the Ring; go-redis's would open %d at most", phase, nodes[i].Addr, peak, tc.bound)
					}
				}
			}
			check("steady")
			if err := r.Reshard(nodes, time.Hour); err != nil {
				t.Fatal(err)
			}
			check("window")
			if got := r.Migration(); got.FallbackHits+got.FallbackMisses == 0 {
				t.Error("the window's reads never asked an old owner: the test does not test it")
			}
		})
	}
}

// shardsOf returns the addresses of r's shards, sorted.
func shardsOf(r *Ring) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	addrs := slices.Collect(maps.Keys(r.shards))
	slices.Sort(addrs)
	return addrs
}

// TestWindowEndNarrowsShards: during a window the Ring keeps the old
// nodes' shards, and once the client has released them (after the window)
// it drops them by itself, without traffic, and keeps answering on the new
// nodes.
func TestWindowEndNarrowsShards(t *testing.T) {
	servers := testserver.Redis(t, 3)
	nodes := nodesOf(servers)
	// Short timeouts: the client releases a node it dropped twice their sum
	// after the window.
	short := redis.RingOptions{DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}
	r := newRing(t, nodes[:2], Options{Ring: short})
	ctx := t.Context()
	if err := r.Reshard(nodes[1:], 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := shardsOf(r); len(got) != 3 || r.Ring.Len() != 3 {
		t.Fatalf("during the window the Ring's shards are %v (Len %d); want both placements' 3", got, r.Ring.Len())
	}
	if err := r.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{nodes[1].Addr, nodes[2].Addr}
	slices.Sort(want)
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Equal(shardsOf(r), want) {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the window the Ring's shards are %v; want %v", shardsOf(r), want)
		}
		time.Sleep(10 * time.Millisecond) // polling the client's own release, which nothing else signals
	}
	if n := r.Ring.Len(); n != 2 {
		t.Errorf("the Ring counts %d shards after the window; want 2", n)
	}
	if v, err := r.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("Get after the window = %q, %v; want the value written in it", v, err)
	}
}

// TestReshardRefusedKeepsWindow: a Reshard refused while a window is open
// changes nothing: the window's old owners still answer the keys not read
// over yet.
func TestReshardRefusedKeepsWindow(t *testing.T) {
	servers := testserver.Redis(t, 3)
	nodes := nodesOf(servers)
	r := newRing(t, nodes, Options{})
	ctx := t.Context()
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = fmt.Sprintf("kept:%d", i)
		if err := r.Set(ctx, keys[i], "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Reshard(nodes[:2], time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := r.Reshard(nodes[:1], time.Hour); !errors.Is(err, client.ErrMigrationActive) {
		t.Fatalf("a Reshard in an open window = %v; want client.ErrMigrationActive", err)
	}
	for _, k := range keys {
		if v, err := r.Get(ctx, k).Result(); err != nil || v != "v" {
			t.Errorf("Get(%q) after the refused Reshard = %q, %v; want the value", k, v, err)
		}
	}
}

// TestNodeReadded: a node dropped and added back at once (two Reshards of
// no window) serves again, though the client still held its old client for
// the calls that may have been under way.
func TestNodeReadded(t *testing.T) {
	servers := testserver.Redis(t, 3)
	nodes := nodesOf(servers)
	r := newRing(t, nodes, Options{})
	ctx := t.Context()
	for _, to := range [][]ring.Node{nodes[:2], nodes} {
		if err := r.Reshard(to, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		k := fmt.Sprintf("back:%d", i)
		if err := r.Shardcache().Set(ctx, k, []byte("v"), 0); err != nil {
			t.Errorf("Set(%q) after the node came back: %v", k, err)
		}
		if err := r.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Errorf("the Ring's Set(%q) after the node came back: %v", k, err)
		}
	}
}

// TestShardsDuringReshard: while a Reshard widens the shards, before the
// client switches, every key still finds its shard, a node renamed or
// removed in the next placement included (a shard is named by its
// address); and a node a Reshard adds is a shard of the Ring before the
// client sets it up, so the two share its pool.
func TestShardsDuringReshard(t *testing.T) {
	servers := testserver.Redis(t, 4)
	nodes := nodesOf(servers)
	r := newRing(t, nodes[:3], Options{})
	if err := r.Reshard(nodes, 0); err != nil {
		t.Fatal(err)
	}
	if len(r.orphans) != 0 {
		t.Fatalf("the client made %d go-redis clients of its own: the added node was no shard yet", len(r.orphans))
	}
	for i := range 50 {
		if err := r.Set(t.Context(), fmt.Sprintf("added:%d", i), "v", 0).Err(); err != nil {
			t.Errorf("Set after a node was added: %v", err)
		}
	}
	nodes = nodes[:3]
	renamed := []ring.Node{{Name: "x", Addr: nodes[0].Addr}, nodes[1]} // nodes[2] removed, nodes[0] renamed
	r.reshard.Lock()
	r.setAddrs(shardAddrs(renamed, shardsOf(r)))
	r.reshard.Unlock()
	for i := range 50 {
		if err := r.Set(t.Context(), fmt.Sprintf("mid:%d", i), "v", 0).Err(); err != nil {
			t.Errorf("Set in the middle of a Reshard: %v", err)
		}
	}
}

// TestNewFailsCleanly: a NewWithOptions whose client fails after setting up
// its nodes (a MigrateFrom refused) returns the error, and panics nowhere
// while the nodes are released.
func TestNewFailsCleanly(t *testing.T) {
	servers := testserver.Redis(t, 2)
	dup := []ring.Node{{Name: "z", Addr: "127.0.0.1:1"}, {Name: "z", Addr: "127.0.0.1:2"}}
	r, err := NewWithOptions(nodesOf(servers), Options{MigrateFrom: &client.MigrateFrom{Nodes: dup, Start: time.Now(), Window: time.Hour}})
	if !errors.Is(err, ring.ErrDuplicateName) {
		t.Errorf("NewWithOptions with a bad MigrateFrom = %v, %v; want ring.ErrDuplicateName", r, err)
	}
}

// TestShardcacheReshardNoPanic: a Reshard through Shardcache() (not the
// Ring's) moves keys to a node the Ring has no shard for: their commands
// fail, as a shard down's, and nothing panics.
func TestShardcacheReshardNoPanic(t *testing.T) {
	servers := testserver.Redis(t, 3)
	nodes := nodesOf(servers)
	r := newRing(t, nodes[:2], Options{})
	if err := r.Shardcache().Reshard(nodes, 0); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := range 50 {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("Set after a Reshard through Shardcache() panicked: %v", p)
				}
			}()
			if err := r.Set(t.Context(), fmt.Sprintf("misused:%d", i), "v", 0).Err(); err != nil {
				failed++
			}
		}()
	}
	if failed == 0 {
		t.Error("no key landed on the node the Ring lacks: the test does not test it")
	}
}

// TestStatsCountRingCommands: Shardcache().Stats() counts the Ring's own
// commands on a node (they run on the shards the client shares), those sent
// on context.Background() left out, as the package doc says.
func TestStatsCountRingCommands(t *testing.T) {
	servers := testserver.Redis(t, 1)
	r := newRing(t, nodesOf(servers), Options{})
	gets := func() (n int64) {
		for _, ns := range r.Shardcache().Stats().Nodes {
			for _, op := range ns.Ops {
				if op.Op == "get" {
					n += op.Calls()
				}
			}
		}
		return n
	}
	before := gets()
	for range 3 {
		r.Get(t.Context(), "counted")
	}
	r.Get(context.Background(), "uncounted")
	if got := gets() - before; got != 3 {
		t.Errorf("Stats counted %d of the Ring's Gets; want the 3 not sent on context.Background()", got)
	}
}
