package client

import (
	"context"
	"errors"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// Memcached's item operations: gomemcache's own, one command each, but for
// getItem.

// getItem is a Get on the node's raw connections (mcget.go), as gomemcache's
// Get would send it.
func (n mcNode) getItem(ctx context.Context, key string) (item, error) {
	return n.raw.getItem(ctx, key)
}

func mcItem(it *memcache.Item) item {
	return item{key: it.Key, value: it.Value, found: true, flags: it.Flags, cas: it.CasID}
}

func (n mcNode) store(ctx context.Context, op StoreOp, in item) error {
	it := &memcache.Item{Key: in.key, Value: in.value, Flags: in.flags, Expiration: mcExpiration(in.ttl), CasID: in.cas}
	var fn func(*memcache.Item) error
	switch op {
	case StoreSet:
		fn = n.mc.Set
	case StoreAdd:
		fn = n.mc.Add
	case StoreReplace:
		fn = n.mc.Replace
	case StoreAppend:
		fn = n.mc.Append
	case StorePrepend:
		fn = n.mc.Prepend
	case StoreCAS:
		fn = n.mc.CompareAndSwap
	}
	kind := opOther
	switch op {
	case StoreSet:
		kind = opSet
	case StoreAdd:
		kind = opAdd
	}
	err := call0(ctx, n.h, kind, func() error { return fn(it) })
	if errors.Is(err, memcache.ErrCASConflict) {
		return ErrCASConflict
	}
	return err
}

func (n mcNode) getAndTouch(ctx context.Context, key string, ttl time.Duration) (item, error) {
	it, err := call(ctx, n.h, opGet, func() (*memcache.Item, error) { return n.mc.GetAndTouch(key, mcExpiration(ttl)) })
	if err != nil {
		return item{}, err
	}
	return mcItem(it), nil
}

func (n mcNode) incrDecr(ctx context.Context, key string, delta uint64, decr bool) (uint64, error) {
	return call(ctx, n.h, opIncr, func() (uint64, error) {
		if decr {
			return n.mc.Decrement(key, delta)
		}
		return n.mc.Increment(key, delta)
	})
}

func (n mcNode) deleteFound(ctx context.Context, key string) (bool, error) {
	err := call0(ctx, n.h, opDelete, func() error { return n.mc.Delete(key) })
	if err == ErrCacheMiss {
		return false, nil
	}
	return err == nil, err
}

func (n mcNode) flush(ctx context.Context) error {
	return call0(ctx, n.h, opOther, n.mc.FlushAll)
}

func (n mcNode) ping(ctx context.Context) error {
	return call0(ctx, n.h, opPing, n.mc.Ping)
}
