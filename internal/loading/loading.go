// Package loading is the plumbing of the client's read-through loads
// (GetOrLoad, GetMultiOrLoad and the background refreshes): the negative
// entry that caches the database's "no such row", the limiter of loader
// calls (Options.LoadLimit), the calls of a loader that turn its panic
// into an error, and the group of background reloads that Close stops.
// The client decides when to load, what to store, under which lease, and
// what to count.
//
//	lim := loading.NewLimiter(100, 100, 0, time.Now)
//	if err := lim.Admit(ctx, time.Now(), key); err != nil { ... } // errors.Is(err, loading.ErrThrottled)
//	v, err := loading.Call(ctx, key, loader) // a panic is ErrPanic
package loading

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"
)

var (
	// ErrThrottled means the limiter had no token for a load within the
	// caller's deadline and its MaxWait (client.ErrLoadThrottled).
	ErrThrottled = errors.New("shardcache: load throttled")
	// ErrPanic means a loader panicked; the panic's value is in the
	// message (client.ErrLoadPanic).
	ErrPanic = errors.New("shardcache: loader panicked")
)

// Negative is the value that stands for "the database has no such row" in
// the cache (client.ErrNotFound). NUL bytes make it a value no application
// stores by chance.
const Negative = "\x00shardcache:not-found\x00"

// IsNegative reports whether a cached value is a negative entry.
func IsNegative(v []byte) bool { return len(v) == len(Negative) && string(v) == Negative }

// Limiter caps loader calls per second, so that a miss storm cannot take
// the database down. It reads the clock it is given, as the client's
// migration windows do.
type Limiter struct {
	lim     *rate.Limiter
	maxWait time.Duration
	now     func() time.Time
}

// NewLimiter returns a limiter of perSecond loader calls, burst of them at
// once after a quiet period, each waiting at most maxWait for its token
// beside the caller's deadline (0: the deadline alone; negative: never
// wait), on the clock now. The caller checks perSecond > 0 and burst ≥ 1.
func NewLimiter(perSecond float64, burst int, maxWait time.Duration, now func() time.Time) *Limiter {
	return &Limiter{lim: rate.NewLimiter(rate.Limit(perSecond), burst), maxWait: maxWait, now: now}
}

// Admit takes a token for one loader call of key at now, the limiter's
// clock's reading, waiting for it within ctx's deadline and the limiter's
// MaxWait, or returns ErrThrottled at once when it would come later (or
// when ctx ends first).
func (l *Limiter) Admit(ctx context.Context, now time.Time, key string) error {
	res := l.lim.ReserveN(now, 1)
	delay := res.DelayFrom(now)
	if delay == 0 {
		return nil
	}
	budget := time.Duration(1<<63 - 1)
	if dl, ok := ctx.Deadline(); ok {
		budget = time.Until(dl) // contexts run on the wall clock
	}
	if w := l.maxWait; w != 0 {
		budget = min(budget, max(w, 0))
	}
	if delay > budget {
		res.CancelAt(now)
		return fmt.Errorf("%w: key %q: next token in %v", ErrThrottled, key, delay)
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		res.CancelAt(l.now())
		return fmt.Errorf("%w: key %q: %w", ErrThrottled, key, ctx.Err())
	}
}

// Call calls load, turning a panic into ErrPanic: singleflight would
// re-panic it on a goroutine of its own, where no caller could recover it.
func Call(ctx context.Context, key string, load func(context.Context) ([]byte, error)) (v []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("%w: key %q: %v", ErrPanic, key, p)
		}
	}()
	return load(ctx)
}

// CallBatch is Call for a loader of keys, one or more: a panic is
// ErrPanic, returned (a refresh calls load on a goroutine of its own).
func CallBatch(ctx context.Context, keys []string, load func(context.Context, []string) (map[string][]byte, error)) (m map[string][]byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("%w: %d keys from %q: %v", ErrPanic, len(keys), keys[0], p)
		}
	}()
	return load(ctx, keys)
}
