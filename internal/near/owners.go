package near

import "time"

// Owners are the stores one multi-key read looks keys up in, by their
// node's address, and its hits in each, added to each store's statistics
// once (Count) rather than once a key. The first eight are found by a scan,
// which a placement's own address strings make a comparison of pointers,
// rather than a map lookup per key. The zero value is empty and ready.
type Owners struct {
	list [8]Owner
	n    int
	more map[string]*Owner // past the first eight
}

// Owner is one store of Owners, and the hits found there.
type Owner struct {
	addr  string
	store *Cache // nil: none to read (no such node, or held down)
	hits  int64
}

// Of returns the owner at addr, nil when it has no store to read:
// lookup(addr), asked once an address, tells its store, or nil.
func (os *Owners) Of(addr string, lookup func(addr string) *Cache) *Owner {
	for i := range os.list[:os.n] {
		if o := &os.list[i]; o.addr == addr {
			return o.usable()
		}
	}
	if o := os.more[addr]; o != nil {
		return o.usable()
	}
	store := lookup(addr)
	if os.n < len(os.list) {
		os.list[os.n] = Owner{addr: addr, store: store}
		os.n++
		return os.list[os.n-1].usable()
	}
	if os.more == nil {
		os.more = map[string]*Owner{}
	}
	o := &Owner{addr: addr, store: store}
	os.more[addr] = o
	return o.usable()
}

func (o *Owner) usable() *Owner {
	if o.store == nil {
		return nil
	}
	return o
}

// Peek is the store's Peek: key's copy as of now, no hit counted.
func (o *Owner) Peek(key string, now time.Time) (value []byte, found, ok bool) {
	return o.store.Peek(key, now)
}

// Hit counts a key answered from the store, for Count.
func (o *Owner) Hit() { o.hits++ }

// Count adds each store's hits to its statistics.
func (os *Owners) Count() {
	for i := range os.list[:os.n] {
		if o := &os.list[i]; o.hits > 0 {
			o.store.AddHits(o.hits)
		}
	}
	for _, o := range os.more {
		if o.hits > 0 {
			o.store.AddHits(o.hits)
		}
	}
}
