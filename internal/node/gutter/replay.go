package gutter

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/shardcache/shardcache/internal/node"
)

// hintChunk is how many hinted keys one round trip deletes.
const hintChunk = 1000

// comePasses bounds ComeUp's replays without the lock: writes may keep
// landing on the gutter while it replays.
const comePasses = 8

// Health is what a Return needs of the node's observer (the client's
// *health.Observer): its breaker, its log, and the bound of its calls.
type Health interface {
	// Down reports whether the breaker holds the node down.
	Down() bool
	// Success records an answer, and reports whether it marks the node up.
	Success() bool
	// MarkedUp logs that the node was just marked up.
	MarkedUp()
	// HoldDown marks the node down now, for the probe to replay again.
	HoldDown(why string, cause error)
	// Warn logs msg with the node's attributes, then attrs.
	Warn(msg string, attrs ...any)
	// Timeout bounds a call the replay makes.
	Timeout() time.Duration
}

// Return is the way back of a node the client held down and that missed
// writes meanwhile (through its gutter, or as a replica): its hints
// replayed as deletes at home (a flush past MaxHints) and on its gutter
// before its breaker flips it up, and a key written an instant before
// that flip deleted at home by the writer itself. The client decides when
// a node is held down, and when its probe may replay.
type Return struct {
	// Home is the node's own client.
	Home node.Node
	// Gutter is its gutter, whose copies of the hinted keys are deleted
	// too; nil without one (a replica).
	Gutter *Node
	// Hints are the keys the node missed; their lock orders a write's
	// hint against the flip up.
	Hints *Hints
	// Health is the node's observer: its breaker, its log, and the bound
	// of a late key's delete (Timeout).
	Health Health
	// Tomb, above 0, buries a late key for that long rather than deleting
	// it (a replica's: a read's repair that read another replica before
	// the write cannot land after it).
	Tomb time.Duration
}

// ComeUp is the probe's last step once the node answers again
// (the client's health.Observer.ComeUp): it replays the hints without their lock while
// there are many, then the last of them under it and marks the node up
// with it: a write through the gutter that lands meanwhile waits for that
// one round trip, then finds the node up and deletes its key at home
// itself (Wrote). A replay that fails leaves the node down for the next
// probe.
func (r Return) ComeUp(ctx context.Context) {
	if r.Gutter != nil {
		// Every process's writes through the gutter, this one's too
		// (a process killed since included): deleted at home first.
		if err := r.Gutter.ApplyLog(ctx, r.Home); err != nil {
			r.Health.Warn("shardcache: node answers, held down: the gutter's log of the writes it missed not applied",
				slog.Any("cause", err))
			return
		}
	}
	for range comePasses {
		keys, overflow := r.Hints.Take()
		if len(keys) == 0 && !overflow {
			break
		}
		if err := r.replay(ctx, keys, overflow); err != nil {
			r.Hints.PutBack(keys, overflow)
			r.notReplayed(len(keys), overflow, err)
			return
		}
	}
	r.Hints.Lock()
	keys, overflow := r.Hints.TakeLocked()
	err := r.replay(ctx, keys, overflow)
	up := false
	if err != nil {
		r.Hints.PutBackLocked(keys, overflow)
	} else {
		up = r.Health.Success()
	}
	r.Hints.Unlock()
	switch {
	case err != nil:
		r.notReplayed(len(keys), overflow, err)
	case up:
		r.Health.MarkedUp()
	}
}

// notReplayed logs a probe's replay that failed: the node answers, and is
// held down.
func (r Return) notReplayed(keys int, flush bool, err error) {
	r.Health.Warn("shardcache: node answers, held down: the writes it missed not replayed",
		slog.Int("keys", keys), slog.Bool("flush", flush), slog.Any("cause", err))
}

// replay deletes hinted keys at home (flushes it on overflow), then on
// its gutter if it has one, so that a later outage does not read its
// copies again (a gutter that cannot be reached keeps them until its
// TTL).
func (r Return) replay(ctx context.Context, keys []string, overflow bool) error {
	if overflow {
		return node.ItemsOf(r.Home).Flush(ctx)
	}
	for chunk := range slices.Chunk(keys, hintChunk) {
		if err := r.Home.DeleteMulti(ctx, chunk); err != nil {
			return err
		}
		if r.Gutter != nil {
			r.Gutter.Forget(ctx, chunk)
		}
	}
	return nil
}

// Wrote records keys written while the node missed them: as hints while
// it is down, under the lock the probe flips it up under, or, if it came
// back meanwhile (its probe replayed the hints before this write's),
// deleted at home now, past the caller's context; a delete that fails
// holds the node down again for the probe.
func (r Return) Wrote(ctx context.Context, keys ...string) {
	if len(keys) == 0 {
		return
	}
	r.Hints.Lock()
	r.Hints.AddLocked(keys...)
	down := r.Health.Down()
	var late []string
	var overflow bool
	if !down {
		late, overflow = r.Hints.TakeLocked()
	}
	r.Hints.Unlock()
	if down {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.Health.Timeout())
	defer cancel()
	var err error
	if r.Tomb > 0 && !overflow {
		_, err = r.Home.Bury(dctx, late, r.Tomb, node.TombDeleted)
	} else {
		err = r.replay(dctx, late, overflow)
	}
	if err != nil {
		r.Hints.PutBack(late, overflow)
		r.Health.HoldDown("a hint not replayed", err)
	}
}
