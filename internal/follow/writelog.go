package follow

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

// writeLog is the bounded record of the keys this process wrote or deleted
// recently, kept while the client follows a topology: a process that
// receives a migration after its start (topology.Late) buries on their new
// owners the keys it wrote since then, before it reads a new owner
// (Follower.repair). It is sharded so that concurrent writers seldom meet on
// one lock; each shard is a ring of the last entries, and remembers when
// the newest entry it overwrote was written, so that the log can tell
// whether it still reaches back to an instant.
type writeLog struct {
	seed   maphash.Seed
	shards [writeLogShards]logShard
}

const writeLogShards = 16

type logShard struct {
	mu      sync.Mutex
	entries []logEntry
	next    int   // where the next entry goes
	lost    int64 // UnixNano of the newest entry overwritten; 0 when none
	_       [40]byte
}

type logEntry struct {
	key string
	at  int64 // UnixNano
}

// newWriteLog returns a log of about size entries; nil for size < 1.
func newWriteLog(size int) *writeLog {
	if size < 1 {
		return nil
	}
	l := &writeLog{seed: maphash.MakeSeed()}
	per := max(size/writeLogShards, 1)
	for i := range l.shards {
		l.shards[i].entries = make([]logEntry, 0, per)
	}
	return l
}

// add records that key was written at at. A nil log records nothing.
func (l *writeLog) add(key string, at time.Time) {
	if l == nil {
		return
	}
	s := &l.shards[maphash.String(l.seed, key)%writeLogShards]
	e := logEntry{key, at.UnixNano()}
	s.mu.Lock()
	if len(s.entries) < cap(s.entries) {
		s.entries = append(s.entries, e)
	} else {
		s.lost = max(s.lost, s.entries[s.next].at)
		s.entries[s.next] = e
		s.next = (s.next + 1) % len(s.entries)
	}
	s.mu.Unlock()
}

// addAll records keys, written at at.
func (l *writeLog) addAll(keys []string, at time.Time) {
	if l == nil {
		return
	}
	for _, k := range keys {
		l.add(k, at)
	}
}

// since returns the distinct keys written at or after t, sorted, and
// whether the log reaches back that far: complete is false when an entry
// written at or after t was overwritten.
func (l *writeLog) since(t time.Time) (keys []string, complete bool) {
	if l == nil {
		return nil, false
	}
	from := t.UnixNano()
	complete = true
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		if s.lost >= from {
			complete = false
		}
		for _, e := range s.entries {
			if e.at >= from {
				keys = append(keys, e.key)
			}
		}
		s.mu.Unlock()
	}
	slices.Sort(keys)
	return slices.Compact(keys), complete
}
