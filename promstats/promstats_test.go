package promstats_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/promstats"
	"github.com/shardcache/shardcache/ring"
)

// fakeClock is the clients' clock, moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// series returns the values of metric name in c's exposition, by label set
// as exposed (`node="n0",op="get",result="hit"`).
func series(t *testing.T, c prometheus.Collector, name string) map[string]float64 {
	t.Helper()
	text, err := testutil.CollectAndFormat(c, expfmt.TypeTextPlain, name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		labels, value := "", line[len(name)+1:]
		if i := strings.Index(line, "} "); i >= 0 {
			labels, value = line[len(name)+1:i], line[i+2:]
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out[labels] = v
	}
	return out
}

// nonZero drops the series whose value is 0.
func nonZero(m map[string]float64) map[string]float64 {
	maps.DeleteFunc(m, func(_ string, v float64) bool { return v == 0 })
	return m
}

// TestCollector scrapes the collector after traffic on 8 real servers of
// each kind and checks that the counts are what the test did: the hits,
// misses and writes of every node, the fallbacks and backfills of an 8→6
// resharding, the errors of a stopped node, and that the nodes the
// resharding removed are no longer reported once its window is over.
func TestCollector(t *testing.T) {
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		t.Run(backend.String(), func(t *testing.T) { testCollector(t, backend) })
	}
}

func testCollector(t *testing.T, backend client.Backend) {
	var servers []*testserver.Server
	if backend == client.Redis {
		servers = testserver.Redis(t, 8)
	} else {
		servers = testserver.Memcached(t, 8)
	}
	var from []ring.Node
	for i, s := range servers {
		from = append(from, ring.Node{Name: "n" + strconv.Itoa(i), Addr: s.Addr})
	}
	to := from[:6]
	clock := &fakeClock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	c, err := client.New(client.Options{Backend: backend, Nodes: from, Now: clock.Now, ProbeInterval: time.Hour,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	coll := promstats.New(c, nil)
	if problems, err := testutil.CollectAndLint(coll); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	ctx := context.Background()

	// What the test did, as requests_total should count it.
	did := map[string]float64{}
	count := func(node, op, result string) { did[fmt.Sprintf("node=%q,op=%q,result=%q", node, op, result)]++ }
	get := func(key string) {
		node := c.Locate(key).Name
		_, err := c.Get(ctx, key)
		var ne net.Error
		switch {
		case err == nil:
			count(node, "get", "hit")
		case err == client.ErrCacheMiss:
			count(node, "get", "miss")
		case errors.Is(err, client.ErrNodeDown):
			count(node, "get", "down")
		case errors.Is(err, syscall.ECONNREFUSED):
			count(node, "get", "refused")
		case errors.As(err, &ne) && ne.Timeout():
			count(node, "get", "timeout")
		default:
			count(node, "get", "error")
		}
	}
	// fallback is a Get during the window of a key that moved: a miss on
	// its new owner, then a read of its old one (the migration counters).
	fallback := func(key string, found bool) {
		_, err := c.Get(ctx, key)
		if (err == nil) != found || err != nil && err != client.ErrCacheMiss {
			t.Fatalf("Get(%s) during the window: %v; want found %v", key, err, found)
		}
		count(c.Locate(key).Name, "get", "miss")
	}
	set := func(key string) {
		if err := c.Set(ctx, key, []byte("v"), time.Hour); err != nil {
			t.Fatal(err)
		}
		count(c.Locate(key).Name, "set", "ok")
	}
	oldRing, _ := ring.New(from)
	newRing, _ := ring.New(to)
	var moved, stay []string
	for i := 0; len(moved) < 40 || len(stay) < 40; i++ {
		k := "k" + strconv.Itoa(i)
		if oldRing.Locate(k).Addr != newRing.Locate(k).Addr {
			moved = append(moved, k)
		} else if newRing.Locate(k).Name != "n0" {
			stay = append(stay, k)
		}
	}
	moved, stay = moved[:40], stay[:40]

	// Before the resharding: 30 moved and 20 staying keys written, the 20
	// read back (hits), 10 others read (misses).
	for _, k := range slices.Concat(moved[:30], stay[:20]) {
		set(k)
	}
	for _, k := range stay[:30] {
		get(k)
	}

	// 8→6: the 30 moved keys miss on their new owners and are found on their
	// old ones and backfilled; 10 moved keys never written miss on both.
	if err := c.Reshard(to, time.Hour); err != nil {
		t.Fatal(err)
	}
	for i, k := range moved {
		fallback(k, i < 30)
	}
	for _, k := range moved[:30] {
		get(k) // hits on the new owners now
	}
	want := `
# HELP shardcache_migration_active 1 while a migration's window is open: reads fall back to old owners, writes reach both.
# TYPE shardcache_migration_active gauge
shardcache_migration_active 1
# HELP shardcache_migration_backfills_total migration.Snapshot.Backfills, summed over every migration of the client.
# TYPE shardcache_migration_backfills_total counter
shardcache_migration_backfills_total 30
# HELP shardcache_migration_fallback_hits_total migration.Snapshot.FallbackHits, summed over every migration of the client.
# TYPE shardcache_migration_fallback_hits_total counter
shardcache_migration_fallback_hits_total 30
# HELP shardcache_migration_fallback_misses_total migration.Snapshot.FallbackMisses, summed over every migration of the client.
# TYPE shardcache_migration_fallback_misses_total counter
shardcache_migration_fallback_misses_total 10
# HELP shardcache_migration_new_hits_total migration.Snapshot.NewHits, summed over every migration of the client.
# TYPE shardcache_migration_new_hits_total counter
shardcache_migration_new_hits_total 30
# HELP shardcache_migrations_total Migrations the client started.
# TYPE shardcache_migrations_total counter
shardcache_migrations_total 1
`
	if err := testutil.CollectAndCompare(coll, strings.NewReader(want),
		"shardcache_migration_active", "shardcache_migration_backfills_total", "shardcache_migration_fallback_hits_total",
		"shardcache_migration_fallback_misses_total", "shardcache_migration_new_hits_total", "shardcache_migrations_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(coll, promstats.NodeUp); n != 8 {
		t.Fatalf("%d nodes reported during the window; want 8", n)
	}
	inOld := nonZero(series(t, coll, promstats.NodeInPlacement))
	if len(inOld) != 14 || inOld[`node="n7",placement="old"`] != 1 || inOld[`node="n7",placement="current"`] != 0 {
		t.Fatalf("placements %v; want n0-n5 in both, n6 and n7 in the old one", inOld)
	}

	// n0 stopped: three connection failures mark it down (the default
	// FailureThreshold), the next call fails at once.
	servers[0].Stop()
	onN0 := []string{}
	for i := 0; len(onN0) < 4; i++ {
		if k := "down" + strconv.Itoa(i); c.Locate(k).Name == "n0" {
			onN0 = append(onN0, k)
		}
	}
	for _, k := range onN0 {
		get(k)
	}
	if did[`node="n0",op="get",result="down"`] != 1 {
		t.Fatalf("the test saw %v; want the fourth call on n0 to fail as down", did)
	}
	up := series(t, coll, promstats.NodeUp)
	if up[fmt.Sprintf(`addr=%q,node="n0"`, servers[0].Addr)] != 0 || up[fmt.Sprintf(`addr=%q,node="n1"`, servers[1].Addr)] != 1 {
		t.Fatalf("node_up %v; want n0 down, n1 up", up)
	}

	// Every get and set the test made, node by node, result by result.
	got := nonZero(series(t, coll, promstats.RequestsTotal))
	maps.DeleteFunc(got, func(k string, _ float64) bool {
		return !strings.Contains(k, `op="get",`) && !strings.Contains(k, `op="set",`)
	})
	if !maps.Equal(got, did) {
		t.Errorf("requests_total for get and set:\n%v\nthe test did:\n%v", sorted(got), sorted(did))
	}
	// The keys of those gets, and those the fallbacks found on old owners.
	keys := series(t, coll, promstats.KeysReadTotal)
	var oldHits float64
	for k, v := range keys {
		if strings.Contains(k, `op="get_multi"`) && strings.Contains(k, `result="hit"`) {
			oldHits += v
		}
	}
	if oldHits < 30 {
		t.Errorf("keys found by get_multi %v; want the 30 fallback hits at least", oldHits)
	}
	if n := testutil.CollectAndCount(coll, promstats.RequestDurationSeconds); n == 0 {
		t.Error("no latency histogram")
	}

	// The window over: n6 and n7 are no longer reported.
	clock.advance(time.Hour)
	get(stay[0])
	up = series(t, coll, promstats.NodeUp)
	names := []string{}
	for k := range up {
		names = append(names, k[strings.Index(k, "node="):])
	}
	slices.Sort(names)
	if want := []string{`node="n0"`, `node="n1"`, `node="n2"`, `node="n3"`, `node="n4"`, `node="n5"`}; !slices.Equal(names, want) {
		t.Fatalf("after the window, node_up for %v; want %v", names, want)
	}
	for k := range series(t, coll, promstats.RequestsTotal) {
		if strings.Contains(k, `node="n6"`) || strings.Contains(k, `node="n7"`) {
			t.Fatalf("requests_total still reports a removed node: %s", k)
		}
	}
	if v := series(t, coll, promstats.MigrationActive)[""]; v != 0 {
		t.Fatalf("migration_active %v after the window", v)
	}
	if problems, err := testutil.CollectAndLint(coll); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}

	// GetOrLoad: a hit, and a miss that loads once.
	loads := 0
	loader := func(context.Context) ([]byte, error) { loads++; return []byte("loaded"), nil }
	for _, k := range []string{stay[0], stay[35]} {
		if _, err := c.GetOrLoad(ctx, k, time.Hour, loader); err != nil {
			t.Fatal(err)
		}
	}
	want = `
# HELP shardcache_getorload_hits_total client.LoadStats.Hits: what GetOrLoad and GetMultiOrLoad did.
# TYPE shardcache_getorload_hits_total counter
shardcache_getorload_hits_total 1
# HELP shardcache_getorload_loads_total client.LoadStats.Loads: what GetOrLoad and GetMultiOrLoad did.
# TYPE shardcache_getorload_loads_total counter
shardcache_getorload_loads_total 1
# HELP shardcache_getorload_misses_total client.LoadStats.Misses: what GetOrLoad and GetMultiOrLoad did.
# TYPE shardcache_getorload_misses_total counter
shardcache_getorload_misses_total 1
`
	if err := testutil.CollectAndCompare(coll, strings.NewReader(want), "shardcache_getorload_hits_total",
		"shardcache_getorload_loads_total", "shardcache_getorload_misses_total"); err != nil || loads != 1 {
		t.Fatalf("GetOrLoad, one hit and one load (the loader ran %d times): %v", loads, err)
	}
}

func sorted(m map[string]float64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "  %s %v\n", k, m[k])
	}
	return b.String()
}
