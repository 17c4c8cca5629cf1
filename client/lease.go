package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/murmur3"
)

// Leases: one load per key across the fleet (Options.Lease), after "Scaling
// Memcache at Facebook" (NSDI 2013). Singleflight stops a stampede in one
// process; a fleet of processes would still send one load each. With leases,
// the process that misses first takes a lease on the key, in the cache
// itself, on the key's owner: a lease key holding a random token, set only if
// absent (Redis SET NX PX, Memcached add) and expiring after Options.Lease.
// The others find the lease taken and re-read the key every
// Options.LeaseRetry until the value lands, or the lease is gone (released
// after a failed load, or expired with its holder) and they take it.
//
// The value is stored only if the lease is still held, and Delete (and
// DeleteMulti) clear the lease before they delete the key, so a Delete during
// a load means the value loaded before it is not stored: the stale set the
// paper's leases prevent. A value loaded under a lease that expired is not
// stored either. A lease taken then finds the key present if the value
// landed meanwhile: a store sets the value before it clears the lease.
//
// On Redis the store is one Lua script: if the lease holds our token, SET
// the value and DEL the lease, atomically. Memcached's text protocol has no
// conditional store on another key, so the store is set, then check the
// lease, then delete the value again if the lease was lost: a reader can see
// such a value for that one round trip before it is withdrawn. Nor has it a
// compare-and-delete: releasing a lease reads it and deletes it if it holds
// our token, so a lease that expired and was taken by another process in
// between can be deleted (at worst, one more load), and a lease lasts whole
// seconds, at least one. During a migration the copy to the old owner is
// written first and deleted again if the lease was lost, so a Delete that
// clears the lease, then the old owner, then the new owner leaves neither.
//
// Every process sharing the cache must agree on Lease: a Delete from a
// process without leases does not clear them. Processes that disagree on the
// placement (half-way through a rollout) take their leases on different
// nodes and may load once each.

// leaser is what a node needs for leases; redisNode and mcNode implement it.
type leaser interface {
	// acquireLease sets lkey to token for ttl if lkey is absent, and
	// reports whether it did.
	acquireLease(ctx context.Context, lkey, token string, ttl time.Duration) (bool, error)
	// storeLeased stores value under key with ttl if lkey still holds token,
	// and deletes lkey; it reports whether the value was stored (and kept).
	storeLeased(ctx context.Context, key string, value []byte, ttl time.Duration, lkey, token string) (bool, error)
	// releaseLease deletes lkey if it holds token.
	releaseLease(ctx context.Context, lkey, token string) error
}

// lease is a lease this process holds on a key, on the key's owner.
type lease struct {
	key   string // the lease key
	token string // what the lease key holds while it is ours
}

// leasePrefix starts every lease key.
const leasePrefix = "shardcache:lease:"

// leaseKey returns the key of key's lease: "shardcache:lease:" and the key,
// or, when that would be longer than Options.MaxKeyLength, "shardcache:lease:#"
// and 32 hex digits of the key's 128-bit murmur3 hash.
func (c *Client) leaseKey(key string) string {
	if len(leasePrefix)+len(key) <= c.opts.MaxKeyLength {
		return leasePrefix + key
	}
	h1, h2 := murmur3.StringSum128(key)
	return fmt.Sprintf("%s#%016x%016x", leasePrefix, h1, h2)
}

// leaser returns the lease capability of key's owner.
func leaserOf(r route) (leaser, error) {
	if l, ok := r.st.conn(r.New).(leaser); ok {
		return l, nil
	}
	return nil, ErrUnknownNode
}

// leaseOrValue takes the lease on key, or waits for the value that the
// holder of the lease loads. It returns the value when it is in the cache
// (hit), or the lease to load under. A nil lease without a hit means the
// lease could not be taken for a failure of the cache: the load goes on
// without one.
func (c *Client) leaseOrValue(ctx context.Context, r route, key string) (l *lease, v []byte, hit bool, err error) {
	ln, lerr := leaserOf(r)
	cand := &lease{key: c.leaseKey(key), token: rand.Text()}
	var retry *time.Timer
	for waited := false; ; waited = true {
		if c.state.Load() == nil {
			return nil, nil, false, ErrClosed // no load for a closed client
		}
		var got bool
		if lerr == nil {
			got, lerr = ln.acquireLease(ctx, cand.key, cand.token, c.opts.Lease)
		}
		// Read after the attempt: a store sets the value before it clears
		// the lease, so a lease just taken finds a value that just landed.
		v, err := c.get(ctx, r, key)
		switch {
		case err == nil:
			if got {
				c.releaseLease(ctx, r, cand)
			}
			return nil, v, true, nil
		case err == ErrClosed:
			return nil, nil, false, err
		case err != ErrCacheMiss:
			c.loads.cacheErrors.Add(1)
		}
		if got {
			return cand, nil, false, nil
		}
		if lerr != nil {
			c.loads.cacheErrors.Add(1)
			return nil, nil, false, nil
		}
		if !waited {
			c.loads.leaseWaits.Add(1)
		}
		if retry == nil {
			retry = time.NewTimer(c.opts.LeaseRetry)
			defer retry.Stop()
		} else {
			retry.Reset(c.opts.LeaseRetry)
		}
		<-retry.C
	}
}

// storeLeased stores a loaded value under lease l (see the ordering above).
func (c *Client) storeLeased(ctx context.Context, r route, l *lease, key string, v []byte, ttl time.Duration) {
	if r.Dual {
		c.copyToOld(r, func(n node) error { return n.set(ctx, key, v, ttl) })
	}
	ln, err := leaserOf(r)
	stored := false
	if err == nil {
		stored, err = ln.storeLeased(ctx, key, v, ttl, l.key, l.token)
	}
	if err != nil {
		c.loads.cacheErrors.Add(1)
	} else if !stored {
		c.loads.leasesLost.Add(1)
	}
	if !stored && r.Dual {
		if err := r.st.conn(r.Old).delete(ctx, key); err != nil {
			c.loads.cacheErrors.Add(1)
		}
	}
}

// releaseLease gives up lease l, if any, after a load that stored nothing.
func (c *Client) releaseLease(ctx context.Context, r route, l *lease) {
	if l == nil {
		return
	}
	ln, err := leaserOf(r)
	if err == nil {
		err = ln.releaseLease(ctx, l.key, l.token)
	}
	if err != nil {
		c.loads.cacheErrors.Add(1) // it expires after Options.Lease
	}
}

// clearLease deletes key's lease, whoever holds it, for Delete: a load under
// it will not store its value.
func (c *Client) clearLease(ctx context.Context, r route, key string) error {
	return fail("delete", r.New, key, r.st.conn(r.New).delete(ctx, c.leaseKey(key)))
}

// clearLeases is clearLease for DeleteMulti: one round trip per owner, in
// parallel.
func (c *Client) clearLeases(ctx context.Context, keys []string) error {
	st, _ := c.load()
	if st == nil {
		return ErrClosed
	}
	bs := newBatches(st)
	for i, k := range keys {
		bs.addKey(st.placement.Locate(k), c.leaseKey(k), i)
	}
	bs.run(func(b *batch) error { return b.conn.deleteMulti(ctx, b.keys) })
	var errs []error
	for _, b := range bs.list {
		if b.err != nil {
			errs = append(errs, nodeErr("delete_multi", b.node, b.keys, b.err))
		}
	}
	return errors.Join(errs...)
}

// Redis: one script stores under a lease, another releases it; each runs
// atomically on the server.
var (
	// KEYS: the key, the lease key. ARGV: the token, the value, the TTL in
	// milliseconds (0: no expiry).
	storeLeasedScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
if tonumber(ARGV[3]) > 0 then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
	redis.call('SET', KEYS[1], ARGV[2])
end
return 1`)
	// KEYS: the lease key. ARGV: the token.
	releaseLeaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0`)
)

func (n redisNode) acquireLease(ctx context.Context, lkey, token string, ttl time.Duration) (bool, error) {
	ok, err := n.rdb.SetNX(ctx, lkey, token, redisTTL(ttl)).Result()
	return ok, redisErr(ctx, err)
}

func (n redisNode) storeLeased(ctx context.Context, key string, value []byte, ttl time.Duration, lkey, token string) (bool, error) {
	ms := redisTTL(ttl).Milliseconds()
	stored, err := storeLeasedScript.Run(ctx, n.rdb, []string{key, lkey}, token, value, ms).Int()
	return stored == 1, redisErr(ctx, err)
}

func (n redisNode) releaseLease(ctx context.Context, lkey, token string) error {
	return redisErr(ctx, releaseLeaseScript.Run(ctx, n.rdb, []string{lkey}, token).Err())
}

func (n mcNode) acquireLease(ctx context.Context, lkey, token string, ttl time.Duration) (bool, error) {
	err := n.add(ctx, lkey, []byte(token), ttl)
	if err == ErrNotStored {
		return false, nil
	}
	return err == nil, err
}

// storeLeased sets the value, then checks the lease, and deletes the value
// again if the lease was lost: Memcached cannot make the set conditional on
// another key.
func (n mcNode) storeLeased(ctx context.Context, key string, value []byte, ttl time.Duration, lkey, token string) (bool, error) {
	return call(ctx, func() (bool, error) {
		if err := n.mc.Set(&memcache.Item{Key: key, Value: value, Expiration: mcExpiration(ttl)}); err != nil {
			return false, err
		}
		it, err := n.mc.Get(lkey)
		if err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return false, err
		}
		if err != nil || string(it.Value) != token {
			if err := n.mc.Delete(key); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
				return false, err
			}
			return false, nil
		}
		if err := n.mc.Delete(lkey); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return true, err
		}
		return true, nil
	})
}

func (n mcNode) releaseLease(ctx context.Context, lkey, token string) error {
	return call0(ctx, func() error {
		it, err := n.mc.Get(lkey)
		if err != nil || string(it.Value) != token {
			if errors.Is(err, memcache.ErrCacheMiss) {
				return nil
			}
			return err
		}
		if err := n.mc.Delete(lkey); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return err
		}
		return nil
	})
}
