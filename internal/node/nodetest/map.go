package nodetest

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/shardcache/shardcache/internal/node"
)

// Map is a node.Node over a map, for the examples and tests of the
// packages that wrap nodes: Get, GetMulti (every TTL known), Send, Set, SetMulti, Add,
// AddMulti, Delete, DeleteMulti, Incr, and node.Leaser's StoreLeased and ReleaseLeases; the other
// calls panic (the embedded Node is nil). TTLs are kept, not enforced. Use NewMap.
type Map struct {
	node.Node
	mu  sync.Mutex
	kv  map[string][]byte
	ttl map[string]time.Duration
}

// NewMap returns an empty Map.
func NewMap() *Map {
	return &Map{kv: map[string][]byte{}, ttl: map[string]time.Duration{}}
}

// Value returns key's value, nil if absent.
func (m *Map) Value(key string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kv[key]
}

// TTL returns the TTL key was last written with.
func (m *Map) TTL(key string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ttl[key]
}

// Get returns key's value, or node.ErrCacheMiss.
func (m *Map) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.kv[key]; ok {
		return v, nil
	}
	return nil, node.ErrCacheMiss
}

// GetMulti returns an Item per key, with its TTL.
func (m *Map) GetMulti(ctx context.Context, keys []string, _ bool) ([]node.Item, error) {
	out := make([]node.Item, len(keys))
	for i, k := range keys {
		v, err := m.Get(ctx, k)
		out[i] = node.Item{Key: k, Value: v, Found: err == nil, TTL: m.TTL(k), TTLKnown: true}
	}
	return out, nil
}

// Send reads keys at once; the Pending hands their answers over.
func (m *Map) Send(ctx context.Context, keys []string) node.Pending {
	its, _ := m.GetMulti(ctx, keys, false)
	return answers(its)
}

// answers is a multi-get already read.
type answers []node.Item

func (a answers) Recv(out []node.Answer) error {
	for i := range a {
		out[i] = node.Answer{Value: a[i].Value, Found: a[i].Found}
	}
	return nil
}

// SetMulti stores every item, with its TTL.
func (m *Map) SetMulti(ctx context.Context, items []node.Item) error {
	for _, it := range items {
		_ = m.Set(ctx, it.Key, it.Value, it.TTL)
	}
	return nil
}

// Set stores value under key, with its TTL.
func (m *Map) Set(_ context.Context, key string, value []byte, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kv[key], m.ttl[key] = value, ttl
	return nil
}

// Add stores value under key if absent, else node.ErrNotStored.
func (m *Map) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	stored, _ := m.AddMulti(ctx, []node.Item{{Key: key, Value: value, TTL: ttl}})
	if !stored[0] {
		return node.ErrNotStored
	}
	return nil
}

// AddMulti stores each item whose key is absent.
func (m *Map) AddMulti(_ context.Context, items []node.Item) ([]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	stored := make([]bool, len(items))
	for i, it := range items {
		if _, ok := m.kv[it.Key]; !ok {
			m.kv[it.Key], m.ttl[it.Key], stored[i] = it.Value, it.TTL, true
		}
	}
	return stored, nil
}

// Delete removes key.
func (m *Map) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.kv, key)
	delete(m.ttl, key)
	return nil
}

// DeleteMulti removes every key.
func (m *Map) DeleteMulti(ctx context.Context, keys []string) error {
	for _, k := range keys {
		_ = m.Delete(ctx, k)
	}
	return nil
}

// StoreLeased stores each item whose lease key, lkeys[i], holds token and
// whose key is absent, and deletes that lease key, as Redis's script does
// (node.Leaser).
func (m *Map) StoreLeased(_ context.Context, items []node.Item, lkeys []string, token string) ([]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	stored := make([]bool, len(items))
	for i, it := range items {
		if v, ok := m.kv[lkeys[i]]; !ok || string(v) != token {
			continue
		}
		delete(m.kv, lkeys[i])
		delete(m.ttl, lkeys[i])
		if _, ok := m.kv[it.Key]; !ok {
			m.kv[it.Key], m.ttl[it.Key], stored[i] = it.Value, it.TTL, true
		}
	}
	return stored, nil
}

// ReleaseLeases deletes each lease key that holds token (node.Leaser).
func (m *Map) ReleaseLeases(_ context.Context, lkeys []string, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, lk := range lkeys {
		if v, ok := m.kv[lk]; ok && string(v) == token {
			delete(m.kv, lk)
			delete(m.ttl, lk)
		}
	}
	return nil
}

// Incr adds delta to key's decimal value, a missing key counting as 0, as
// Redis's INCRBY does.
func (m *Map) Incr(_ context.Context, key string, delta int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, _ := strconv.ParseInt(string(m.kv[key]), 10, 64)
	v += delta
	m.kv[key] = []byte(strconv.FormatInt(v, 10))
	return v, nil
}

// Clear empties the map, as a server restarted empty.
func (m *Map) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.kv)
	clear(m.ttl)
}
