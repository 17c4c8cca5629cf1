package migration_test

import (
	"fmt"
	"time"

	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

func Example() {
	eight := make([]ring.Node, 8)
	for i := range eight {
		eight[i] = ring.Node{Name: fmt.Sprintf("cache-%d", i), Addr: fmt.Sprintf("10.0.0.%d:6379", i+1)}
	}
	old, _ := ring.New(eight)
	cur, _ := ring.New(eight[:6]) // two nodes retired
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	m, _ := migration.New(old, cur, start, time.Hour) // the rollout and a sweep; without a sweep, the longest TTL

	r := m.Route("user:4", start.Add(10*time.Minute))
	fmt.Printf("read %s first; fall back to %s: %v\n", r.New.Name, r.Old.Name, r.Dual)
	fmt.Printf("after the window, dual: %v\n", m.Route("user:4", m.End()).Dual)
	fmt.Printf("keys that move: %.0f%%\n", 100*m.Status(start).Moved)
	// Output:
	// read cache-4 first; fall back to cache-7: true
	// after the window, dual: false
	// keys that move: 25%
}
