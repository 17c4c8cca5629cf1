package client

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// mcNode is a node served by Memcached through gomemcache, whose client holds
// the node's idle connections. gomemcache takes no context, so every call is
// bounded by the context here (see call). raw holds the node's connections
// for what gomemcache does not speak (meta commands, metadump; see
// memcached_raw.go), and for the reads on the hot path, Get (mcget.go) and
// the multi-gets (mcgets.go), which take the context through the
// connection's deadline. Every call's outcome goes to h (probe.go), from
// call, the fast paths beside it, or raw's begin and end.
type mcNode struct {
	mc    *memcache.Client
	raw   *rawConns
	h     *nodeHealth
	conns *mcConns   // the open connections, gomemcache's and raw's; nil beside a NewMemcacheClient
	batch *mcBatcher // Options.AutoPipeline (mcbatch.go); nil without it
}

// maxRelative is the longest TTL Memcached reads as relative seconds; a
// larger expiration is read as a Unix time.
const maxRelative = 30 * 24 * time.Hour

// mcExpiration converts a TTL to Memcached's expiration field: whole seconds
// rounded up (a sub-second TTL must not become 0, "never"), or an absolute
// Unix time past 30 days.
func mcExpiration(ttl time.Duration) int32 {
	switch {
	case ttl <= 0:
		return 0
	case ttl > maxRelative:
		return int32(time.Now().Add(ttl).Unix())
	default:
		return int32((ttl + time.Second - 1) / time.Second)
	}
}

// mcErr maps gomemcache's errors to the package's: its miss and "not
// stored", and a refused login or a value too large.
func mcErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, memcache.ErrCacheMiss):
		return ErrCacheMiss
	case errors.Is(err, memcache.ErrNotStored):
		return ErrNotStored
	}
	return authErr(mcTooLarge(err))
}

// call runs fn, returning early with the context's error when ctx is done
// first. fn then finishes in the background, bounded by the gomemcache
// client's own Timeout; a write may still land after the caller gave up.
// A context that can never be done costs nothing.
//
// The outcome of fn, a call of kind o, goes to h even when the caller gave
// up first: it is the node's, bounded by the node's own timeout.
func call[T any](ctx context.Context, h *nodeHealth, o op, fn func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if ctx.Done() == nil {
		start := h.begin()
		v, err := fn()
		h.observe(nil, o, start, err)
		return v, mcErr(err)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		start := h.begin()
		v, err := fn()
		h.observe(nil, o, start, err)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, mcErr(r.err)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// call0 is call for functions that return only an error.
func call0(ctx context.Context, h *nodeHealth, o op, fn func() error) error {
	_, err := call(ctx, h, o, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

func (n mcNode) get(ctx context.Context, key string) ([]byte, error) {
	if n.batch != nil {
		return n.batch.get(ctx, n, key)
	}
	it, err := n.raw.getItem(ctx, key) // mcget.go
	return it.value, err
}

// getMulti is one multi-get, on the node's raw connections (mcgets.go).
// With withTTL it reads each key's value, flags and remaining TTL with the
// meta command mg (memcached >= 1.6), so that a copy keeps them exactly;
// where the server has no meta commands it falls back to a multi-get, whose
// items have no ttlKnown.
func (n mcNode) getMulti(ctx context.Context, keys []string, withTTL bool) ([]item, error) {
	if withTTL && n.raw.meta() {
		items, err := n.raw.metaGet(ctx, keys)
		if err != errNoMeta {
			return items, err
		}
	}
	return n.raw.getMulti(ctx, keys)
}

// getsSend sends the multi-get of keys, for a round that reads the answer
// later (batches.gets).
func (n mcNode) getsSend(ctx context.Context, keys []string) mcGets {
	return n.raw.getsSend(ctx, keys)
}

// reserve takes a place for a multi-get on the raw connections: there is
// no limit on Memcached, as with gomemcache.
func (n mcNode) reserve() bool { return n.raw.reserve() }

// received does nothing: see splitGetter.
func (mcNode) received() {}

// sendIdle sends the multi-get of keys on an idle raw connection, if any.
func (n mcNode) sendIdle(ctx context.Context, keys []string) (mcGets, bool) {
	return n.raw.sendIdle(ctx, keys, false)
}

func (n mcNode) set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	it := &memcache.Item{Key: key, Value: value, Expiration: mcExpiration(ttl)}
	if ctx.Done() == nil { // call's fast path, without allocating the closures
		start := n.h.begin()
		err := n.mc.Set(it)
		n.h.observe(nil, opSet, start, err)
		return mcErr(err)
	}
	return call0(ctx, n.h, opSet, func() error { return n.mc.Set(it) })
}

// setMulti sends the sets one after the other on one connection's worth of
// calls: gomemcache has no pipelined set.
func (n mcNode) setMulti(ctx context.Context, items []item) error {
	return call0(ctx, n.h, opSetMulti, func() error {
		for _, it := range items {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := n.mc.Set(&memcache.Item{Key: it.key, Value: it.value, Flags: it.flags, Expiration: mcExpiration(it.ttl)}); err != nil {
				return err
			}
		}
		return nil
	})
}

func (n mcNode) add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return call0(ctx, n.h, opAdd, func() error {
		return n.mc.Add(&memcache.Item{Key: key, Value: value, Expiration: mcExpiration(ttl)})
	})
}

// addMulti pipelines its adds on a raw connection: one round trip, where
// gomemcache would take one per item.
func (n mcNode) addMulti(ctx context.Context, items []item) ([]bool, error) {
	return n.raw.addMulti(ctx, items)
}

func (n mcNode) delete(ctx context.Context, key string) error {
	err := call0(ctx, n.h, opDelete, func() error { return n.mc.Delete(key) })
	if err == ErrCacheMiss {
		return nil
	}
	return err
}

func (n mcNode) deleteMulti(ctx context.Context, keys []string) error {
	return call0(ctx, n.h, opDeleteMulti, func() error {
		for _, k := range keys {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := n.mc.Delete(k); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
				return err
			}
		}
		return nil
	})
}

// incr has Redis's semantics where Memcached allows: a missing key is
// created with the value delta and no expiry. Memcached counters are
// unsigned: a decrement stops at 0, and a missing key decremented is created
// at 0.
func (n mcNode) incr(ctx context.Context, key string, delta int64) (int64, error) {
	return call(ctx, n.h, opIncr, func() (int64, error) {
		for range 2 { // a second round when another client creates the key first
			var v uint64
			var err error
			if delta >= 0 {
				v, err = n.mc.Increment(key, uint64(delta))
			} else {
				v, err = n.mc.Decrement(key, uint64(-delta))
			}
			if !errors.Is(err, memcache.ErrCacheMiss) {
				return int64(v), err
			}
			start := max(delta, 0)
			err = n.mc.Add(&memcache.Item{Key: key, Value: strconv.AppendInt(nil, start, 10)})
			if err == nil {
				return start, nil
			}
			if !errors.Is(err, memcache.ErrNotStored) {
				return 0, err
			}
		}
		return 0, ErrNotStored
	})
}

func (n mcNode) touch(ctx context.Context, key string, ttl time.Duration) error {
	return call0(ctx, n.h, opTouch, func() error { return n.mc.Touch(key, mcExpiration(ttl)) })
}

// Close closes the idle connections, then those of calls in flight, which
// ends them and the probe's.
func (n mcNode) Close() error {
	err := n.mc.Close()
	n.raw.Close()
	n.conns.closeAll()
	n.h.close()
	return err
}
