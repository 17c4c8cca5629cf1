package lease

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/ring"
)

// Fleet is where the leases of keys live at one instant of a client's
// routing: key k's lease on node Owner(k), whose client Conns gives (the
// client's routing state, which hands out a stand-in for a node held
// down). Each call sends one round trip per owner for each step, the
// owners in parallel.
type Fleet struct {
	Config
	Conns fanout.Conns               // the node clients
	Owner func(key string) ring.Node // the node of key's lease
}

// group returns keys in batches by owner, each key as key(k) (itself, or
// its lease key).
func (f Fleet) group(keys []string, key func(string) string) *fanout.Batches {
	bs := fanout.New(f.Conns)
	for i, k := range keys {
		bs.AddKey(f.Owner(k), key(k), i)
	}
	return bs
}

// same is the key itself, for group.
func same(k string) string { return k }

// Acquire takes the leases of keys with token, with an add of each lease
// key (node.Node.AddMulti) for Term: got[i] when key i's lease is ours,
// failed[i] when its owner could not be asked. errs counts the owners that
// failed.
func (f Fleet) Acquire(ctx context.Context, keys []string, token string) (got, failed []bool, errs int) {
	got, failed = make([]bool, len(keys)), make([]bool, len(keys))
	bs := fanout.New(f.Conns)
	for i, k := range keys {
		bs.Add(f.Owner(k), node.Item{Key: f.Key(k), Value: []byte(token), TTL: f.Term}, i, false)
	}
	bs.Run(func(b *fanout.Batch) (err error) {
		stored, err := b.Conn.AddMulti(ctx, b.Items)
		for j, ok := range stored {
			got[b.Idx[j]] = ok
		}
		return err
	})
	for _, b := range bs.List {
		if b.Err != nil {
			errs++
			for _, i := range b.Idx {
				failed[i] = true
			}
		}
	}
	return got, failed, errs
}

// Gets reads keys on their owners with the leases that vivify and refresh
// take (Config.Read, node.LeaseReader): ans[i] is key i's answer; plain[i]
// when its owner has no lease reads (a Memcached without the meta
// commands, a node held down), failed[i] when it could not be read, down
// then holding the batches that failed, with their errors.
func (f Fleet) Gets(ctx context.Context, keys []string, token string, vivify bool, refresh time.Duration) (ans []node.LeaseAnswer, plain, failed []bool, down []*fanout.Batch) {
	ans, plain, failed = make([]node.LeaseAnswer, len(keys)), make([]bool, len(keys)), make([]bool, len(keys))
	bs := f.group(keys, same)
	bs.Run(func(b *fanout.Batch) error {
		lr := Reader(b.Conn)
		if lr == nil {
			return node.ErrUnsupported
		}
		got, err := lr.LeaseGet(ctx, b.Keys, f.Read(b.Keys, token, vivify, refresh))
		for j, a := range got {
			ans[b.Idx[j]] = a
		}
		return err
	})
	for _, b := range bs.List {
		switch {
		case b.Err == nil:
		case b.Err == node.ErrUnsupported:
			for _, i := range b.Idx {
				plain[i] = true
			}
		default:
			for _, i := range b.Idx {
				failed[i] = true
			}
			down = append(down, b)
		}
	}
	return ans, plain, failed, down
}

// Release gives up l's leases of keys, after loads that store nothing:
// those won by reads through node.LeaseReader, the others with
// node.Leaser's ReleaseLeases. errs counts the round trips that failed
// (those leases expire after Term).
func (f Fleet) Release(ctx context.Context, keys []string, l *Lease) (errs int) {
	metas, keyed := fanout.New(f.Conns), fanout.New(f.Conns) // leases won by reads, lease keys
	for i, k := range keys {
		if l.has(k) {
			metas.AddKey(f.Owner(k), k, i)
		} else {
			keyed.AddKey(f.Owner(k), f.Key(k), i)
		}
	}
	keyed.Run(func(b *fanout.Batch) error { return node.LeaserOf(b.Conn).ReleaseLeases(ctx, b.Keys, l.Token) })
	metas.Run(func(b *fanout.Batch) error {
		lr := Reader(b.Conn)
		if lr == nil {
			return node.ErrUnsupported
		}
		return lr.LeaseRelease(ctx, b.Keys, l.answers(b.Keys), f.Read(b.Keys, l.Token, false, 0))
	})
	for _, b := range slices.Concat(keyed.List, metas.List) {
		if b.Err != nil {
			errs++
		}
	}
	return errs
}

// Clear deletes the leases of keys, whoever holds them, so that the loads
// under them store nothing (a Delete's), and returns the batches that
// failed, whose Keys are lease keys.
func (f Fleet) Clear(ctx context.Context, keys []string) (down []*fanout.Batch) {
	bs := f.group(keys, f.Key)
	bs.Run(func(b *fanout.Batch) error { return b.Conn.DeleteMulti(ctx, b.Keys) })
	for _, b := range bs.List {
		if b.Err != nil {
			down = append(down, b)
		}
	}
	return down
}

// Store stores the items of b, a write batch of their keys' owner, each
// only if l's lease of its key still holds, and ends those leases: the
// leases won by reads with node.LeaseReader's LeaseStore, the others with
// node.Leaser's StoreLeased. kept[b.Idx[j]] is set for each item stored.
func (c Config) Store(ctx context.Context, b *fanout.Batch, l *Lease, kept []bool) error {
	// Each key by the kind of lease it holds: one kind per node, but a
	// topology applied since the leases were taken may have brought keys
	// of two together.
	var errs []error
	for meta, part := range b.Split(l.has) {
		var stored []bool
		var err error
		switch {
		case part == nil:
			continue
		case meta == 1:
			stored, err = c.storeMeta(ctx, part, l)
		default:
			stored, err = node.LeaserOf(b.Conn).StoreLeased(ctx, part.Items, c.Keys(part.Keys), l.Token)
		}
		for j, s := range stored {
			kept[part.Idx[j]] = s
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// storeMeta stores a batch's items under leases won by reads.
func (c Config) storeMeta(ctx context.Context, b *fanout.Batch, l *Lease) ([]bool, error) {
	lr := Reader(b.Conn)
	if lr == nil {
		return make([]bool, len(b.Items)), node.ErrUnsupported
	}
	return lr.LeaseStore(ctx, b.Items, l.answers(b.Keys), c.Read(b.Keys, l.Token, false, 0))
}
