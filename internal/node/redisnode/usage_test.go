package redisnode

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/testserver"
)

// opRecorder is an Observer that records the kind and outcome of every call.
type opRecorder struct {
	mu   sync.Mutex
	ops  []node.Op
	errs []error
}

func (r *opRecorder) Begin() time.Time { return time.Now() }
func (r *opRecorder) Done(_ context.Context, op node.Op, _ time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops, r.errs = append(r.ops, op), append(r.errs, err)
}
func (r *opRecorder) Keys(node.Op, int, int) {}

func (r *opRecorder) take() ([]node.Op, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops, errs := r.ops, r.errs
	r.ops, r.errs = nil, nil
	return ops, errs
}

// TestUsage reads a real Redis's usage through the node, in database 2,
// and checks it against the server's own INFO, read on a client of its
// own: the limit and policy, the keys of the node's database (not those of
// database 0), evictions, hits and misses exactly, the memory within what
// one more connection takes.
func TestUsage(t *testing.T) {
	s := testserver.RedisArgs(t, 1, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")[0]
	rec := &opRecorder{}
	n, err := New(Config{Addr: s.Addr, DB: 2, Observer: rec, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	direct := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer direct.Close()
	ctx := context.Background()
	for i := range 5 {
		if err := direct.Set(ctx, "db0:"+strconv.Itoa(i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	value := []byte(strings.Repeat("v", 10_000))
	const keys = 1000 // 10 MB: more than the 4 MB the server has
	for i := range keys {
		if err := n.Set(ctx, "k:"+strconv.Itoa(i), value, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"k:" + strconv.Itoa(keys-1), "absent:1", "absent:2"} {
		_, _ = n.Get(ctx, k)
	}
	rec.take()

	// The server may go on evicting after the last write (its eviction
	// is spread over cron ticks when it runs out of time, as on a busy
	// machine): its own INFO is read before the node's Usage and after
	// it, and the node's evictions and keys must lie between the two.
	before := readInfo(t, direct)
	got, err := n.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ops, errs := rec.take(); len(ops) != 1 || ops[0] != node.OpOther || errs[0] != nil {
		t.Errorf("Usage observed as %v %v, want one OpOther call", ops, errs)
	}
	info := readInfo(t, direct)
	num := func(name string) int64 { return info.num(t, name) }
	items, itemsBefore := info.items(t, "db2"), before.items(t, "db2")
	evicted, evictedBefore := num("evicted_keys"), before.num(t, "evicted_keys")
	if got.Items < items || got.Items > itemsBefore || got.Evictions < evictedBefore || got.Evictions > evicted {
		t.Errorf("Usage: %d keys, %d evictions; the server says %d to %d keys, %d to %d evictions",
			got.Items, got.Evictions, itemsBefore, items, evictedBefore, evicted)
	}
	want := node.Usage{
		Items: got.Items, Bytes: got.Bytes, BaseBytes: num("used_memory_startup"), Limit: 4 << 20,
		SystemMemory: num("total_system_memory"), Evictions: got.Evictions,
		Hits: num("keyspace_hits"), Misses: num("keyspace_misses"), Policy: "allkeys-lru",
	}
	if got != want {
		t.Errorf("Usage = %+v\nthe server says %+v", got, want)
	}
	if used := num("used_memory"); got.Bytes < used-used/10 || got.Bytes > used+used/10 {
		t.Errorf("Usage: %d bytes used, the server says %d", got.Bytes, used)
	}
	if got.Evictions == 0 || got.Items == 0 || got.Items >= keys || got.Hits != 1 || got.Misses != 2 || got.Bytes > got.Limit {
		t.Errorf("Usage = %+v: want evictions, some of the %d keys, 1 hit, 2 misses, at most the limit used", got, keys)
	}
}

// TestUsageDown: a server that does not answer is a connection failure,
// observed.
func TestUsageDown(t *testing.T) {
	s := testserver.Redis(t, 1)[0]
	rec := &opRecorder{}
	n, err := New(Config{Addr: s.Addr, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s.Stop()
	if _, err := n.Usage(context.Background()); !node.Unreachable(err) {
		t.Fatalf("Usage of a stopped server: %v, want a connection failure", err)
	}
	if ops, errs := rec.take(); len(ops) != 1 || ops[0] != node.OpOther || errs[0] == nil {
		t.Errorf("observed %v %v, want the failed OpOther call", ops, errs)
	}
}

// TestUsageOf: INFO's fields as a Usage; an empty database (no keyspace
// line) holds no keys; a field that is not a number is an error that names
// it; the optional fields may be missing (Redis before 3.2).
func TestUsageOf(t *testing.T) {
	info := map[string]string{}
	parseInfo("# Memory\r\nused_memory:2000\r\nused_memory_startup:900\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n"+
		"# Stats\r\nevicted_keys:3\r\nkeyspace_hits:4\r\nkeyspace_misses:5\r\n# Keyspace\r\ndb1:keys=7,expires=1,avg_ttl=10\r\n", info)
	u, err := usageOf(info, 1)
	want := node.Usage{Items: 7, Bytes: 2000, BaseBytes: 900, Evictions: 3, Hits: 4, Misses: 5, Policy: "noeviction"}
	if err != nil || u != want {
		t.Errorf("usageOf = %+v, %v; want %+v", u, err, want)
	}
	if u, err := usageOf(info, 0); err != nil || u.Items != 0 {
		t.Errorf("db0, absent: %+v, %v; want no keys", u, err)
	}
	for _, bad := range []struct{ field, value string }{
		{"used_memory", "lots"}, {"maxmemory", ""}, {"db1", "keys=x"}, {"db1", "expires=1"},
	} {
		broken := map[string]string{}
		for k, v := range info {
			broken[k] = v
		}
		broken[bad.field] = bad.value
		if _, err := usageOf(broken, 1); err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("%s %q: %v, want an error naming it", bad.field, bad.value, err)
		}
	}
	delete(info, "evicted_keys")
	if _, err := usageOf(info, 1); err == nil || !strings.Contains(err.Error(), "evicted_keys") {
		t.Errorf("no evicted_keys: %v, want an error naming it", err)
	}
}

// serverInfo is a Redis server's INFO memory, stats and keyspace, by field.
type serverInfo map[string]string

// readInfo reads c's server's INFO memory, stats and keyspace.
func readInfo(t *testing.T, c *redis.Client) serverInfo {
	t.Helper()
	info := serverInfo{}
	for _, section := range []string{"memory", "stats", "keyspace"} {
		parseInfo(c.Info(context.Background(), section).Val(), info)
	}
	return info
}

// num returns the integer field name.
func (info serverInfo) num(t *testing.T, name string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(info[name], 10, 64)
	if err != nil {
		t.Fatalf("INFO %s %q", name, info[name])
	}
	return v
}

// items returns the keys of database db ("db2").
func (info serverInfo) items(t *testing.T, db string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(strings.TrimPrefix(strings.Split(info[db], ",")[0], "keys="), 10, 64)
	if err != nil {
		t.Fatalf("INFO keyspace %s %q", db, info[db])
	}
	return v
}
