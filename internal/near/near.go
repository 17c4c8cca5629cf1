// Package near is the store of a near cache: the copies of one node's
// values a client keeps in process memory, in front of the node, so that a
// hot key's read is a lookup that takes no lock and allocates nothing.
//
// A copy is filled in three steps, so that no read that began before a
// write publishes the value it read: Reserve before the read is sent, then
// Fulfill with the token Reserve gave, or Cancel. Delete, called once a
// write has run (or when the server says another client changed the key),
// drops the copy and the reservation, and a Fulfill of a dropped
// reservation keeps nothing.
//
// The store is bounded in entries and in estimated bytes, per shard (16
// shards from 64 entries or 64 KiB on, one below), each evicting with a
// clock (second chance: a copy read since the hand last passed is kept one
// more turn; a new copy has had no read, so a stream of copies read once
// goes through without pushing out those read often), and serves no copy
// older than MaxAge.
//
// A lookup hashes the key once (hash/maphash) and walks one chain of its
// shard's table, loading pointers only: no lock, no write but the clock's
// mark on the first read after the hand passed, and a hit counter in one of
// several stripes. Writers of a shard take its lock, and publish each
// change of a chain with one atomic store, so that a lookup sees either the
// chain before or the chain after; a table that grows is copied whole, and
// swapped: a lookup follows fewer pointers than sync.Map's trie
// (BenchmarkNearCacheStore; docs/performance.md, "Near cache").
//
//	c := near.New(near.Config{MaxEntries: 10000, MaxAge: 10 * time.Second})
//	if v, found, ok := c.Get(key); ok { ... } // a copy: found, or a miss held
//	tok := c.Reserve(key)
//	v, err := readFromNode(key)
//	c.Fulfill(key, tok, v, err == nil, 0)
package near

import (
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config bounds a store.
type Config struct {
	// MaxEntries bounds the copies kept; 0 or less: no bound on entries.
	MaxEntries int
	// MaxBytes bounds their estimated size (EntryOverhead and the lengths
	// of the key and the value each); 0 or less: no bound on bytes. A
	// value larger than a shard's share (MaxBytes/16 from 64 KiB on) is
	// never kept.
	MaxBytes int64
	// MaxAge is the longest a copy is served after Reserve was called for
	// it; 0 or less: no bound.
	MaxAge time.Duration
}

// EntryOverhead is the estimated size of a copy beside its key and value:
// the entry, its place in its shard's table and in its clock.
const EntryOverhead = 128

const (
	// Sharding thresholds: smaller stores have one shard, so that their
	// bounds hold as a whole (go-redis's LocalCache splits the same way).
	shardCount      = 16
	shardMinEntries = 64
	shardMinBytes   = 64 << 10
	// minSlots is the table of a shard without a bound on entries, at
	// first; it doubles when its entries are twice its slots.
	minSlots   = 64
	hitStripes = 32
)

// Cache is a near cache's store. It is safe for concurrent use; its zero
// value is not: use New.
type Cache struct {
	// The lookups' side, read-only but for the hit counters: the seed, the
	// shards' tables, the clock.
	seed   maphash.Seed
	mask   uint64 // shards - 1
	shift  uint   // the hash bits past the shard's, for the slot
	tables []atomic.Pointer[table]
	maxAge int64     // nanoseconds; 0: no bound
	epoch  time.Time // the origin of the store's monotonic clock (now)

	// hits counts the lookups that found a copy, in stripes on lines of
	// their own, each hit adding to one picked at random: with one counter,
	// the cores' hits queued on its line, and a hit from 256 goroutines cost
	// half again as much (bench: BenchmarkNearCacheHit).
	hits [hitStripes]struct {
		_ [56]byte
		n atomic.Int64
	}

	shards []shard
}

// table is a shard's index: chains of entries by hash.
type table struct {
	slots []atomic.Pointer[entry]
	mask  uint64
}

// shard is the writers' side of a part of the keys: reservations, the
// clock, the sizes.
type shard struct {
	mu      sync.Mutex
	res     map[string]reservation
	clock   []*entry // the shard's entries; hand is the next to look at
	hand    int
	bytes   int64
	next    uint64 // the last token given
	misses  int64  // Reserve calls
	maxN    int    // 0: no bound
	maxSize int64  // 0: no bound
	_       [64]byte
}

// reservation is a read in flight: its token, and when it was sent.
type reservation struct {
	token uint64
	at    int64
}

// entry is one copy, immutable once in a table but for next (its chain's
// writers), used (the lookups' mark) and pos (its shard's).
type entry struct {
	hash  uint64
	next  atomic.Pointer[entry]
	key   string
	born  int64 // when its read was reserved, on the store's clock
	found bool
	used  atomic.Bool // read since the clock's hand last passed it
	value []byte
	owner uint64 // who will say when it changes (a connection), 0: nobody
	size  int64
	pos   int
}

// New returns an empty store bounded by cfg.
func New(cfg Config) *Cache {
	n := shardCount
	if cfg.MaxEntries > 0 && cfg.MaxEntries < shardMinEntries || cfg.MaxBytes > 0 && cfg.MaxBytes < shardMinBytes {
		n = 1
	}
	c := &Cache{seed: maphash.MakeSeed(), mask: uint64(n - 1), shift: uint(bits.Len(uint(n - 1))),
		tables: make([]atomic.Pointer[table], n), shards: make([]shard, n), epoch: time.Now()}
	if cfg.MaxAge > 0 {
		c.maxAge = int64(cfg.MaxAge)
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.res = map[string]reservation{}
		// Each shard's share, the remainder spread over the first ones, so
		// that the shares add up to the bounds.
		if cfg.MaxEntries > 0 {
			s.maxN = cfg.MaxEntries / n
			if i < cfg.MaxEntries%n {
				s.maxN++
			}
			s.maxN = max(s.maxN, 1)
		}
		if cfg.MaxBytes > 0 {
			s.maxSize = cfg.MaxBytes / int64(n)
			if int64(i) < cfg.MaxBytes%int64(n) {
				s.maxSize++
			}
		}
		slots := minSlots
		if s.maxN > 0 {
			slots = 1 << bits.Len(uint(s.maxN)) // more slots than entries: no growth
		}
		c.tables[i].Store(newTable(slots))
	}
	return c
}

func newTable(slots int) *table {
	return &table{slots: make([]atomic.Pointer[entry], slots), mask: uint64(slots - 1)}
}

// now reads the store's clock.
func (c *Cache) now() int64 { return int64(time.Since(c.epoch)) }

// Get returns key's copy: ok when one is held, found when the key was
// present on the node (a miss is held too: ok and not found). The value is
// the store's own: the caller must not change it.
func (c *Cache) Get(key string) (value []byte, found, ok bool) {
	e := c.lookup(key, true)
	if e == nil {
		return nil, false, false
	}
	return e.value, e.found, true
}

// GetValue is Get of a copy of a value alone: a miss held is not returned,
// nor counted as a hit.
func (c *Cache) GetValue(key string) ([]byte, bool) {
	if e := c.lookup(key, false); e != nil {
		return e.value, true
	}
	return nil, false
}

// Peek returns key's copy as Get does, as of now (one reading of the
// clock, time.Now(), for many lookups), without counting a hit: a caller
// that looks up many keys counts its hits once, with AddHits.
func (c *Cache) Peek(key string, now time.Time) (value []byte, found, ok bool) {
	e := c.find(key)
	if e == nil || c.maxAge > 0 && int64(now.Sub(c.epoch))-e.born > c.maxAge {
		return nil, false, false
	}
	e.mark()
	return e.value, e.found, true
}

// AddHits counts n hits of Peek's.
func (c *Cache) AddHits(n int64) { c.hits[rand.Uint32()%hitStripes].n.Add(n) }

// lookup returns key's copy, counted as a hit, or nil; a miss held only
// with misses.
func (c *Cache) lookup(key string, misses bool) *entry {
	e := c.find(key)
	if e == nil || !e.found && !misses || c.maxAge > 0 && c.now()-e.born > c.maxAge {
		return nil
	}
	e.mark()
	c.hits[rand.Uint32()%hitStripes].n.Add(1)
	return e
}

// find returns key's entry, whatever its age, or nil.
func (c *Cache) find(key string) *entry {
	h := maphash.String(c.seed, key)
	t := c.tables[h&c.mask].Load()
	e := t.slots[(h>>c.shift)&t.mask].Load()
	for e != nil && (e.hash != h || e.key != key) {
		e = e.next.Load()
	}
	return e
}

// mark tells the clock e was read.
func (e *entry) mark() {
	if !e.used.Load() { // a write only on the first read since the hand passed: the line stays shared
		e.used.Store(true)
	}
}

// shard returns the shard of hash h, and its number.
func (c *Cache) shard(h uint64) (*shard, int) {
	i := int(h & c.mask)
	return &c.shards[i], i
}

// Reserve registers a read of key about to be sent, and returns its token
// for Fulfill or Cancel. A later Reserve of the key replaces it: the last
// read reserved is the one kept. Each call counts a miss.
func (c *Cache) Reserve(key string) uint64 {
	s, _ := c.shard(maphash.String(c.seed, key))
	at := c.now()
	s.mu.Lock()
	s.next++
	tok := s.next
	s.res[key] = reservation{token: tok, at: at}
	s.misses++
	s.mu.Unlock()
	return tok
}

// Fulfill keeps what the read of token found (value, and found false for a
// miss), on behalf of owner, unless key was deleted since Reserve, or
// another Reserve took it over, or the copy would not fit in its shard. It
// reports whether the copy is kept. The store keeps value itself: the
// caller must not change it afterwards.
func (c *Cache) Fulfill(key string, token uint64, value []byte, found bool, owner uint64) bool {
	h := maphash.String(c.seed, key)
	s, i := c.shard(h)
	size := EntryOverhead + int64(len(key)+len(value))
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.res[key]
	if !ok || r.token != token {
		return false
	}
	delete(s.res, key)
	c.dropLocked(s, i, h, key)
	if s.maxSize > 0 && size > s.maxSize {
		return false
	}
	e := &entry{hash: h, key: strings.Clone(key), value: value, found: found, born: r.at, owner: owner, size: size, pos: len(s.clock)}
	s.clock = append(s.clock, e)
	s.bytes += size
	t := c.tables[i].Load()
	if s.maxN <= 0 && len(s.clock) > 2*len(t.slots) {
		t = c.growLocked(s, i)
	} else {
		t.insert(e, c.shift)
	}
	for s.maxN > 0 && len(s.clock) > s.maxN || s.maxSize > 0 && s.bytes > s.maxSize {
		c.evictLocked(s, i)
	}
	return true
}

// Cancel ends the reservation of token, which keeps nothing.
func (c *Cache) Cancel(key string, token uint64) {
	s, _ := c.shard(maphash.String(c.seed, key))
	s.mu.Lock()
	if r, ok := s.res[key]; ok && r.token == token {
		delete(s.res, key)
	}
	s.mu.Unlock()
}

// Delete drops key's copy and its reservation, so that a read in flight
// keeps nothing. It reports whether either was there.
func (c *Cache) Delete(key string) bool {
	h := maphash.String(c.seed, key)
	s, i := c.shard(h)
	s.mu.Lock()
	_, reserved := s.res[key]
	delete(s.res, key)
	held := c.dropLocked(s, i, h, key)
	s.mu.Unlock()
	return reserved || held
}

// EvictOwner drops every copy of owner's (a connection gone, whose changes
// nobody will report) and returns how many.
func (c *Cache) EvictOwner(owner uint64) int {
	n := 0
	if owner == 0 {
		return 0
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for j := 0; j < len(s.clock); {
			if e := s.clock[j]; e.owner == owner {
				c.removeLocked(s, i, e)
				n++
				continue // clock[j] is another entry now
			}
			j++
		}
		s.mu.Unlock()
	}
	return n
}

// Flush drops every copy and reservation, and returns how many copies.
func (c *Cache) Flush() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.clock)
		c.tables[i].Store(newTable(len(c.tables[i].Load().slots)))
		clear(s.res)
		s.clock, s.hand, s.bytes = nil, 0, 0
		s.mu.Unlock()
	}
	return n
}

// Stats is what a store answered and holds.
type Stats struct {
	// Hits counts the lookups that found a copy, Misses the reservations:
	// the reads that went to the node for want of one.
	Hits, Misses int64
	// Entries and Bytes are the copies held now, and their estimated size.
	Entries int
	Bytes   int64
}

// Stats returns the store's counts.
func (c *Cache) Stats() Stats {
	var st Stats
	for i := range c.hits {
		st.Hits += c.hits[i].n.Load()
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		st.Misses += s.misses
		st.Entries += len(s.clock)
		st.Bytes += s.bytes
		s.mu.Unlock()
	}
	return st
}

// insert puts e first in its chain: a lookup sees the chain with it, or
// without.
func (t *table) insert(e *entry, shift uint) {
	slot := &t.slots[(e.hash>>shift)&t.mask]
	e.next.Store(slot.Load())
	slot.Store(e)
}

// dropLocked removes key's copy from shard s (number i), if it has one, and
// reports whether it had.
func (c *Cache) dropLocked(s *shard, i int, h uint64, key string) bool {
	t := c.tables[i].Load()
	for e := t.slots[(h>>c.shift)&t.mask].Load(); e != nil; e = e.next.Load() {
		if e.hash == h && e.key == key {
			c.removeLocked(s, i, e)
			return true
		}
	}
	return false
}

// removeLocked takes e out of its chain, bypassing it with one store (a
// lookup at e goes on past it: its next is left as it was), and out of the
// clock, whose last entry takes its place.
func (c *Cache) removeLocked(s *shard, i int, e *entry) {
	t := c.tables[i].Load()
	link := &t.slots[(e.hash>>c.shift)&t.mask]
	for p := link.Load(); p != e; p = link.Load() {
		link = &p.next
	}
	link.Store(e.next.Load())
	last := len(s.clock) - 1
	moved := s.clock[last]
	s.clock[e.pos], moved.pos = moved, e.pos
	s.clock[last] = nil
	s.clock = s.clock[:last]
	s.bytes -= e.size
}

// growLocked swaps shard i's table for one of twice its slots, with every
// entry of the clock in it. Entries are copied, not moved: a lookup still
// walking the old table's chains must find them as they were.
func (c *Cache) growLocked(s *shard, i int) *table {
	t := newTable(2 * len(c.tables[i].Load().slots))
	for j, e := range s.clock {
		e2 := &entry{hash: e.hash, key: e.key, value: e.value, found: e.found, born: e.born, owner: e.owner, size: e.size, pos: j}
		e2.used.Store(e.used.Load())
		s.clock[j] = e2
		t.insert(e2, c.shift)
	}
	c.tables[i].Store(t)
	return t
}

// evictLocked removes the first entry the hand finds unread since it last
// passed, clearing the marks of those it passes.
func (c *Cache) evictLocked(s *shard, i int) {
	for {
		if s.hand >= len(s.clock) {
			s.hand = 0
		}
		e := s.clock[s.hand]
		if e.used.Load() {
			e.used.Store(false)
			s.hand++
			continue
		}
		c.removeLocked(s, i, e) // the last entry moves to the hand: it is looked at next
		return
	}
}
