package lease

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/shardcache/shardcache/internal/node"
)

// outcome is what a lease read's answer (node.LeaseAnswer) means for the
// load of its key.
type outcome int

const (
	held     outcome = iota // another process holds the lease: wait for its value
	won                     // the lease is ours: load (unless the value is elsewhere)
	answered                // the value, to answer
	unleased                // a tombstone: load without a lease
)

// outcomeOf returns what a means; serveStale answers a value found under
// another process's lease (its refresh under way) rather than waiting.
func outcomeOf(a node.LeaseAnswer, serveStale bool) outcome {
	switch {
	case a.Won:
		return won
	case a.Found && (!a.Held || serveStale):
		return answered
	case !a.Held:
		return unleased
	}
	return held
}

// Taker takes a round of a multi-key load's leases (the client's
// GetMultiOrLoad with Options.Lease), one round trip per owner for each
// step: with Meta by the reads themselves, otherwise, and on owners
// without lease reads, with Fleet.Acquire and then a read of the keys
// (Read). The client decides how keys are read, where else a key may be,
// and what a failure forgives.
type Taker struct {
	Fleet
	// Meta takes the leases by the reads (Gets).
	Meta bool
	// ServeStale answers a value found under another process's lease.
	ServeStale bool
	// Gets is Fleet.Gets of keys with the leases of their misses (vivify),
	// as the client applies it: failed[i] for a key whose owner could not
	// be read, err one error for the owners that failed, those the client
	// forgives left out.
	Gets func(ctx context.Context, keys []string, token string) (ans []node.LeaseAnswer, plain, failed []bool, err error)
	// Elsewhere, when set, reads keys whose lease a read won on a miss
	// where else they may be (a migration's old owners) and calls found
	// with each value there: the load's copy stops at the lease's
	// placeholder, so the value is answered instead, and its lease
	// released by the caller.
	Elsewhere func(ctx context.Context, keys []string, found func(*node.Item))
	// Read reads keys as the client's multi-get does: the values found; a
	// nil map when the client is closed.
	Read func(ctx context.Context, keys []string) (map[string][]byte, error)
	// CacheErrors counts the owners whose leases could not be taken.
	CacheErrors *atomic.Int64
}

// Take takes the leases of keys under l and reads the keys. found holds
// the values read, got[i] is set when key i's lease is l's, failed[i] when
// the key is to be loaded without a lease (its owner could not be asked,
// or holds a migration's tombstone); a key in none is another's to load.
// A nil found means the client is closed.
func (t Taker) Take(ctx context.Context, keys []string, l *Lease) (found map[string][]byte, got, failed []bool, err error) {
	got, failed = make([]bool, len(keys)), make([]bool, len(keys))
	classic := keys
	var pos []int // classic[j] is keys[pos[j]]; nil: the same
	var errs []error
	found = make(map[string][]byte, len(keys))
	if t.Meta {
		ans, plain, unread, err := t.Gets(ctx, keys, l.Token)
		errs = append(errs, err)
		var elsewhere []string // won misses, whose value may be elsewhere
		classic, pos = nil, []int{}
		for i, k := range keys {
			if plain[i] {
				classic, pos = append(classic, k), append(pos, i)
				continue
			}
			if unread[i] {
				failed[i] = true
				continue
			}
			switch a := ans[i]; outcomeOf(a, t.ServeStale) {
			case won:
				got[i] = true
				l.Meta[k] = a
				if !a.Found && t.Elsewhere != nil {
					elsewhere = append(elsewhere, k)
				}
			case answered:
				found[k] = a.Value
			case unleased:
				failed[i] = true
			}
		}
		if len(elsewhere) > 0 {
			t.Elsewhere(ctx, elsewhere, func(it *node.Item) { found[it.Key] = it.Value })
		}
	}
	if len(classic) > 0 {
		cgot, cfailed, down := t.Acquire(ctx, classic, l.Token)
		t.CacheErrors.Add(int64(down))
		// Read after the attempt, as a Waiter does.
		more, err := t.Read(ctx, classic)
		if more == nil {
			return nil, nil, nil, err
		}
		errs = append(errs, err)
		for k, v := range more {
			found[k] = v
		}
		for j := range classic {
			i := j
			if pos != nil {
				i = pos[j]
			}
			got[i], failed[i] = cgot[j], cfailed[j]
		}
	}
	return found, got, failed, errors.Join(errs...)
}
