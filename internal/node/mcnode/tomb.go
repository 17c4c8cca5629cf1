package mcnode

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/wire/memcache"
)

// Tombstones on Memcached (node.Bury) are the key itself: an empty value
// with node.TombstoneFlags, so that memcached's own add, which the copies
// use, refuses to store over one. Every read here reports one as a miss;
// the writes that would act on it as on a value act as on a missing key:
// add, incr and a CAS find out from the server's answer (NOT_STORED, a
// value that is no number, EXISTS) and then look; replace, append,
// prepend, touch and DeleteFound look first, while tombstones may exist
// (ExpectTombstones, and this node's own Bury), since the server would
// otherwise act on the tombstone.

// tombMargin is how long a tombstone a read or a touch came across is
// kept when the command changed its TTL (gat, touch): long enough to
// outlast any copy in flight, short enough not to linger.
const tombMargin = time.Minute

// isTomb reports whether an item of value v and flags f is a tombstone.
func isTomb(v []byte, f uint32) bool { return len(v) == 0 && node.IsTombstoneFlags(f) }

// tombFlags are the flags of a tombstone of kind k.
func tombFlags(k node.TombKind) uint32 {
	if k == node.TombWritten {
		return node.WrittenTombstoneFlags
	}
	return node.TombstoneFlags
}

// isHidden reports whether an item of value v and flags f reads as a miss:
// a tombstone, or a lease's placeholder (leaseread.go).
func isHidden(v []byte, f uint32) bool { return len(v) == 0 && hiddenFlags(f) }

// hiddenFlags reports whether an empty value with flags f reads as a miss.
func hiddenFlags(f uint32) bool { return node.IsTombstoneFlags(f) || f == node.PlaceholderFlags }

// unbury turns the tombstones and placeholders among out into misses and
// returns how many.
func unbury(out []node.Answer) int {
	n := 0
	for i := range out {
		if a := &out[i]; a.Found && isHidden(a.Value, a.Flags) {
			*a = node.Answer{}
			n++
		}
	}
	return n
}

// ExpectTombstones makes the node look for tombstones until t.
func (n *Node) ExpectTombstones(t time.Time) {
	for {
		cur := n.tombsUntil.Load()
		if cur >= t.UnixNano() || n.tombsUntil.CompareAndSwap(cur, t.UnixNano()) {
			return
		}
	}
}

// tombsLikely reports whether tombstones may exist now.
func (n *Node) tombsLikely() bool { return time.Now().UnixNano() < n.tombsUntil.Load() }

// Bury replaces every key with a tombstone for ttl, in one round trip of
// pipelined mg and ms where the server has the meta commands (found: the
// key held a value, not a tombstone), and otherwise of deletes then one
// of sets (found: the key held an item).
func (n *Node) Bury(ctx context.Context, keys []string, ttl time.Duration, kind node.TombKind) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	n.ExpectTombstones(time.Now().Add(ttl))
	op := node.OpDelete
	if len(keys) > 1 {
		op = node.OpDeleteMulti
	}
	start := n.obs.Begin()
	found, err := n.bury(ctx, keys, memcache.Expiration(ttl), tombFlags(kind))
	err = nodeErr(err)
	n.obs.Done(ctx, op, start, err)
	return found, err
}

func (n *Node) bury(ctx context.Context, keys []string, exp int32, flags uint32) ([]bool, error) {
	reqs := make([]memcache.Meta, 0, 2*len(keys))
	for _, k := range keys {
		reqs = append(reqs,
			memcache.Meta{Cmd: memcache.MetaGet, Key: k, Flags: memcache.FlagsOf("sf")},
			memcache.Meta{Cmd: memcache.MetaSet, Key: k, Flags: memcache.FlagsOf("FT"),
				ClientFlags: flags, TTL: exp, Value: []byte{}})
	}
	out := make([]memcache.MetaResult, len(reqs))
	err := n.mc.Meta(ctx, reqs, out)
	found := make([]bool, len(keys))
	if errors.Is(err, memcache.ErrNoMeta) {
		if err := n.mc.DeleteMulti(ctx, keys, found); err != nil {
			return nil, err
		}
		tombs := make([]memcache.Item, len(keys))
		for i, k := range keys {
			tombs[i] = memcache.Item{Key: k, Value: []byte{}, Flags: flags, Exptime: exp}
		}
		results := make([]error, len(keys))
		if err := n.mc.StoreMulti(ctx, memcache.Set, tombs, results); err != nil {
			return nil, err
		}
		return found, errors.Join(results...)
	}
	if err != nil {
		return nil, err
	}
	for i := range keys {
		g, s := &out[2*i], &out[2*i+1]
		if s.Err != nil {
			return nil, s.Err
		}
		found[i] = g.Status == memcache.HD && !(g.Size == 0 && hiddenFlags(g.ClientFlags))
	}
	return found, nil
}

// tomb returns key's item if it is a tombstone ("gets"), for a write that
// must replace it with a CAS; ok false when the key holds a value or
// nothing.
func (n *Node) tomb(ctx context.Context, key string) (it memcache.Item, ok bool, err error) {
	it, err = n.mc.Get(ctx, key)
	switch {
	case err == memcache.ErrCacheMiss:
		return it, false, nil
	case err != nil:
		return it, false, err
	}
	return it, isTomb(it.Value, it.Flags), nil
}

// overTomb stores it in place of key's tombstone t, with t's CAS id:
// ErrNotStored if the tombstone changed or went meanwhile.
func (n *Node) overTomb(ctx context.Context, t memcache.Item, it memcache.Item) error {
	it.CAS = t.CAS
	switch err := n.mc.Store(ctx, memcache.CAS, it); err {
	case memcache.ErrCASConflict, memcache.ErrCacheMiss:
		return memcache.ErrNotStored
	default:
		return err
	}
}

// overWritten stores a copy refused by its add in place of the key's
// tombstone if that is one of kind TombWritten, with its CAS id: the copy
// read the old owner after the write that left it (node.Item.OverWritten).
// ErrNotStored when the key holds a value or a Delete's tombstone, or
// changed meanwhile.
func (n *Node) overWritten(ctx context.Context, it node.Item) error {
	t, ok, err := n.tomb(ctx, it.Key)
	switch {
	case err != nil:
		return err
	case !ok || t.Flags != node.WrittenTombstoneFlags:
		return memcache.ErrNotStored
	}
	return n.overTomb(ctx, t, memcache.Item{Key: it.Key, Value: it.Value, Flags: it.Flags, Exptime: memcache.Expiration(it.TTL)})
}

// addOverTomb is add that also stores over a tombstone: add first, and
// only on NOT_STORED a look at what holds the key.
func (n *Node) addOverTomb(ctx context.Context, it memcache.Item) error {
	for range 3 {
		err := n.mc.Store(ctx, memcache.Add, it)
		if err != memcache.ErrNotStored {
			return err
		}
		t, ok, err := n.tomb(ctx, it.Key)
		if err != nil || !ok {
			if err == nil {
				err = memcache.ErrNotStored // a value
			}
			return err
		}
		if err := n.overTomb(ctx, t, it); err != memcache.ErrNotStored {
			return err
		}
		// the tombstone changed or went: add again
	}
	return memcache.ErrNotStored
}

// storeChecked runs replace, append or prepend, first making sure the
// key holds a value, not a tombstone, when tombstones may exist; a
// replace then swaps with the CAS id it read, so that a Bury in between
// is not overwritten.
func (n *Node) storeChecked(ctx context.Context, op memcache.StoreOp, it memcache.Item) error {
	if !n.tombsLikely() {
		return n.mc.Store(ctx, op, it)
	}
	for range 3 {
		cur, err := n.mc.Get(ctx, it.Key)
		if err == memcache.ErrCacheMiss || err == nil && isTomb(cur.Value, cur.Flags) {
			return memcache.ErrNotStored
		}
		if err != nil {
			return err
		}
		if op != memcache.Replace {
			return n.mc.Store(ctx, op, it)
		}
		it.CAS = cur.CAS
		switch err := n.mc.Store(ctx, memcache.CAS, it); err {
		case memcache.ErrCacheMiss:
			return memcache.ErrNotStored
		case memcache.ErrCASConflict: // changed meanwhile: look again
		default:
			return err
		}
	}
	return memcache.ErrNotStored
}

// casChecked is a CAS store that reports a tombstone as a missing key
// (ErrCacheMiss) rather than a conflict.
func (n *Node) casChecked(ctx context.Context, it memcache.Item) error {
	err := n.mc.Store(ctx, memcache.CAS, it)
	if err != memcache.ErrCASConflict {
		return err
	}
	if _, ok, terr := n.tomb(ctx, it.Key); terr == nil && ok {
		return memcache.ErrCacheMiss
	}
	return err
}

// touchChecked is touch that reports a tombstone as a miss while
// tombstones may exist: mg with T where the server has it (one round
// trip), else gat; a tombstone touched is given tombMargin back.
func (n *Node) touchChecked(ctx context.Context, key string, exp int32) error {
	if !n.tombsLikely() {
		return n.mc.Touch(ctx, key, exp)
	}
	r, err := n.mc.MetaOne(ctx, memcache.Meta{Cmd: memcache.MetaGet, Key: key, Flags: memcache.FlagsOf("sfT"), TTL: exp})
	var tomb bool
	switch {
	case errors.Is(err, memcache.ErrNoMeta):
		it, err := n.mc.GetAndTouch(ctx, key, exp)
		if err != nil {
			return err
		}
		tomb = isTomb(it.Value, it.Flags)
	case err != nil:
		return err
	case r.Status == memcache.EN:
		return memcache.ErrCacheMiss
	default:
		tomb = r.Size == 0 && node.IsTombstoneFlags(r.ClientFlags)
	}
	if !tomb {
		return nil
	}
	n.keepTomb(ctx, key)
	return memcache.ErrCacheMiss
}

// keepTomb gives back a bounded life to a tombstone whose TTL a touch or a
// gat changed (to none, perhaps).
func (n *Node) keepTomb(ctx context.Context, key string) {
	_ = n.mc.Touch(ctx, key, memcache.Expiration(tombMargin))
}

// incrChecked is IncrDecr that reports a tombstone as a missing key: the
// server refuses to count an empty value, and only then is the key looked
// at. It returns the tombstone, for Incr to replace.
func (n *Node) incrChecked(ctx context.Context, key string, delta uint64, decr bool) (uint64, *memcache.Item, error) {
	v, err := n.mc.IncrDecr(ctx, key, delta, decr)
	var se *memcache.ServerError
	if err == nil || !errors.As(err, &se) {
		return v, nil, err
	}
	t, ok, terr := n.tomb(ctx, key)
	if terr != nil || !ok {
		return 0, nil, err
	}
	return 0, &t, memcache.ErrCacheMiss
}

// counter is the text of a counter's value.
func counter(v int64) []byte { return strconv.AppendInt(nil, v, 10) }
