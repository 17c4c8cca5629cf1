package gutter

import (
	"slices"
	"sync"
)

// MaxHints is how many keys Hints hold; beyond, they hold the overflow
// alone, and home is flushed rather than its keys deleted.
const MaxHints = 1 << 16

// Hints are the keys written while their node missed them (through its
// gutter, or as a replica), to delete there before it serves again. The
// zero value is empty and ready. The embedded lock also orders, for the
// client, a write's hint against its probe's flip of the node up: the
// *Locked methods are for use under it.
type Hints struct {
	sync.Mutex
	keys     map[string]struct{}
	overflow bool
}

// Add records keys, or the overflow past MaxHints.
func (h *Hints) Add(keys ...string) {
	h.Lock()
	defer h.Unlock()
	h.AddLocked(keys...)
}

// AddLocked is Add with the lock held.
func (h *Hints) AddLocked(keys ...string) {
	if h.overflow {
		return
	}
	if h.keys == nil {
		h.keys = make(map[string]struct{}, len(keys))
	}
	for _, k := range keys {
		h.keys[k] = struct{}{}
	}
	if len(h.keys) > MaxHints {
		h.keys, h.overflow = nil, true
	}
}

// Take empties the hints and returns them, sorted.
func (h *Hints) Take() (keys []string, overflow bool) {
	h.Lock()
	defer h.Unlock()
	return h.TakeLocked()
}

// TakeLocked is Take with the lock held.
func (h *Hints) TakeLocked() (keys []string, overflow bool) {
	for k := range h.keys {
		keys = append(keys, k)
	}
	keys, overflow = slices.Sorted(slices.Values(keys)), h.overflow
	h.keys, h.overflow = nil, false
	return keys, overflow
}

// PutBack records again hints that could not be replayed.
func (h *Hints) PutBack(keys []string, overflow bool) {
	h.Lock()
	defer h.Unlock()
	h.PutBackLocked(keys, overflow)
}

// PutBackLocked is PutBack with the lock held.
func (h *Hints) PutBackLocked(keys []string, overflow bool) {
	if overflow {
		h.keys, h.overflow = nil, true
		return
	}
	h.AddLocked(keys...)
}
