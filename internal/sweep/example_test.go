package sweep_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/internal/sweep"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
)

// store is a node that lists its keys: a map with node.Sweeper's calls
// (Restore adds, never over a key present). The other calls panic.
type store struct {
	node.Node
	mu sync.Mutex
	kv map[string][]byte
	// dumpErr, when set, fails every Dump.
	dumpErr error
}

func newStore(kv map[string]string) *store {
	s := &store{kv: map[string][]byte{}}
	for k, v := range kv {
		s.kv[k] = []byte(v)
	}
	return s
}

func (s *store) value(k string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.kv[k])
}

var _ node.Sweeper = (*store)(nil)

func (s *store) Scan(ctx context.Context, o node.ScanOptions, fn func([]node.Item) error) error {
	s.mu.Lock()
	var keys []string
	for k := range s.kv {
		if strings.HasPrefix(k, o.Prefix) {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	slices.Sort(keys)
	for page := range slices.Chunk(keys, o.PageSize()) {
		items := make([]node.Item, len(page))
		for i, k := range page {
			items[i].Key = k
		}
		if err := fn(items); err != nil {
			return err
		}
	}
	return nil
}

func (s *store) Dump(_ context.Context, keys []node.Item) ([]node.Item, error) {
	if s.dumpErr != nil {
		return nil, s.dumpErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]node.Item, len(keys))
	for i, it := range keys {
		v, ok := s.kv[it.Key]
		out[i] = node.Item{Key: it.Key, Value: v, Found: ok}
	}
	return out, nil
}

func (s *store) Restore(_ context.Context, items []node.Item) ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stored := make([]bool, len(items))
	for i, it := range items {
		if _, ok := s.kv[it.Key]; !ok {
			s.kv[it.Key], stored[i] = it.Value, true
		}
	}
	return stored, nil
}

func (s *store) Exists(context.Context, []string) ([]bool, error) { return nil, node.ErrUnsupported }

func (s *store) Size(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.kv)), nil
}

// byPrefix places keys by their first letter: "b..." on b when b is one
// of its nodes, every other key on a.
type byPrefix []ring.Node

func (p byPrefix) Locate(key string) ring.Node {
	if strings.HasPrefix(key, "b") && len(p) > 1 {
		return p[1]
	}
	return p[0]
}

func (p byPrefix) Nodes() []ring.Node { return p }

var (
	a, b = ring.Node{Name: "a", Addr: "a:1"}, ring.Node{Name: "b", Addr: "b:1"}
	t0   = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// migrating returns a migration from a alone to a and b, an hour long,
// and a clock a second into it.
func migrating() (*migration.Migration, func() time.Time) {
	mig, err := migration.New(byPrefix{a}, byPrefix{a, b}, t0, time.Hour)
	if err != nil {
		panic(err)
	}
	return mig, func() time.Time { return t0.Add(time.Second) }
}

// Node b joins a's placement: the sweep of a copies b's keys to it,
// except those b holds already (a copy made before, or a newer write).
func Example() {
	ctx := context.Background()
	old := newStore(map[string]string{"a:1": "stays", "b:1": "moves", "b:2": "copied before", "b:3": "old"})
	joined := newStore(map[string]string{"b:2": "copied before", "b:3": "written since"})
	mig, now := migrating()

	sw := sweep.New(sweep.Config{Migration: mig, Conns: nodetest.Conns{"a:1": old, "b:1": joined}, Now: now, Rate: -1})
	sw.Estimate(ctx, []ring.Node{a})
	if err := sw.Node(ctx, a); err != nil {
		fmt.Println(err)
	}
	sw.Done()
	fmt.Printf("%+v\n", sw.Status())
	fmt.Printf("on b: b:1 %q, b:3 %q\n", joined.value("b:1"), joined.value("b:3"))
	// Output:
	// {Nodes:1 NodesDone:1 Keys:4 Rate:-1 Scanned:4 Copied:1 AlreadyCopied:1 SkippedNewer:1 SkippedUnmoved:1 Gone:0 Failed:0}
	// on b: b:1 "moves", b:3 "written since"
}
