package lease

import (
	"context"
	"crypto/rand"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/ring"
)

// Waiter is how one key's load waits for the key's lease or its value
// (the client's GetOrLoad with Options.Lease): it takes the lease, or
// re-reads the key until the value the lease's holder loads lands, or the
// lease comes free and it takes it. The client decides when a load takes
// a lease, on which node, and reads the key as its Get does (Get).
type Waiter struct {
	Config
	// Conns gives the node clients; Owner is the node of the key's lease,
	// the one its reads ask first.
	Conns fanout.Conns
	Owner ring.Node
	// Every is the wait between looks at a lease another process holds
	// (the client's Options.LeaseRetry).
	Every time.Duration
	// Meta takes the lease by the read itself (node.LeaseReader), one
	// round trip; an owner without lease reads takes it with an add.
	Meta bool
	// ServeStale, with Meta, answers a value found under another process's
	// lease (its refresh under way) rather than waiting for the reload.
	ServeStale bool
	// Fallback, with Meta: the key may be on an old owner (a migration's),
	// so a lease won on a miss reads it with Get before the load.
	Fallback bool
	// Get reads the key as the client's reads do (its near cache, its
	// fallback to an old owner): its value, or node.ErrCacheMiss.
	Get func(ctx context.Context) ([]byte, error)
	// Release gives up l, a lease taken when the value was there after all.
	Release func(ctx context.Context, l *Lease)
	// Closed reports that the client was closed: the wait ends with
	// node.ErrClosed, and nothing is loaded.
	Closed func() bool
	// Waits counts a wait for another process's load, once per key;
	// CacheErrors each failure of the cache, after which the load goes on.
	Waits, CacheErrors *atomic.Int64
}

// Got is what a wait ends with: the value when the cache has it (Hit),
// read by a read that began at At, or the lease to load under. Neither
// means the lease could not be taken for a failure of the cache: the load
// goes on without one.
type Got struct {
	Lease *Lease
	Value []byte
	Hit   bool
	At    time.Time
}

// Wait takes key's lease, or waits for the value that the lease's holder
// loads, or for the lease to come free. ctx should have no end: the load's
// outlives the callers waiting for it.
func (w Waiter) Wait(ctx context.Context, key string) (Got, error) {
	if w.Meta {
		return w.byRead(ctx, key)
	}
	return w.byAdd(ctx, key)
}

// byRead is Wait with the lease taken by the read (node.LeaseReader), one
// round trip: the owner's add of a placeholder and its read on Memcached,
// a script on Redis. An owner without lease reads takes byAdd's.
func (w Waiter) byRead(ctx context.Context, key string) (Got, error) {
	lr := Reader(w.Conns.Conn(w.Owner))
	if lr == nil {
		return w.byAdd(ctx, key)
	}
	token := rand.Text()
	rd := w.Read([]string{key}, token, true, 0)
	retry := Retry{Every: w.Every}
	defer retry.Stop()
	for attempt := 0; ; attempt++ {
		if w.Closed() {
			return Got{}, node.ErrClosed
		}
		at := time.Now()
		ans, err := lr.LeaseGet(ctx, []string{key}, rd)
		switch {
		case err == node.ErrUnsupported:
			return w.byAdd(ctx, key)
		case err != nil:
			w.CacheErrors.Add(1)
			return Got{At: at}, nil // loaded without a lease
		}
		switch a := ans[0]; outcomeOf(a, w.ServeStale) {
		case won:
			l := Won(token, key, a)
			if !a.Found && w.Fallback {
				// The value may be on the old owner: read it there (the
				// copy to the new owner stops at the placeholder).
				if v, err := w.Get(ctx); err == nil {
					w.Release(ctx, l)
					return Got{Value: v, Hit: true, At: at}, nil
				}
			}
			return Got{Lease: l, At: at}, nil
		case answered:
			return Got{Value: a.Value, Hit: true, At: at}, nil
		case unleased:
			return Got{At: at}, nil // a tombstone: loaded without a lease
		}
		if attempt == 0 {
			w.Waits.Add(1)
		}
		retry.Backoff(ctx, attempt)
	}
}

// byAdd is Wait with the lease taken by an add of its lease key, for
// Term, and the key read after each attempt.
func (w Waiter) byAdd(ctx context.Context, key string) (Got, error) {
	cand := &Lease{Token: rand.Text()}
	lkey := w.Key(key)
	var lerr error
	retry := Retry{Every: w.Every}
	defer retry.Stop()
	for waited := false; ; waited = true {
		if w.Closed() {
			return Got{}, node.ErrClosed // no load for a closed client
		}
		got := false
		if lerr == nil {
			switch lerr = w.Conns.Conn(w.Owner).Add(ctx, lkey, []byte(cand.Token), w.Term); lerr {
			case nil:
				got = true
			case node.ErrNotStored:
				lerr = nil
			}
		}
		// Read after the attempt: a store sets the value before it clears
		// the lease, so a lease just taken finds a value that just landed.
		at := time.Now()
		v, err := w.Get(ctx)
		switch {
		case err == nil:
			if got {
				w.Release(ctx, cand)
			}
			return Got{Value: v, Hit: true, At: at}, nil
		case err != node.ErrCacheMiss:
			w.CacheErrors.Add(1)
		}
		if got {
			return Got{Lease: cand, At: at}, nil
		}
		if lerr != nil {
			w.CacheErrors.Add(1)
			return Got{At: at}, nil
		}
		if !waited {
			w.Waits.Add(1)
		}
		retry.Wait(ctx)
	}
}
