package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/follow"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// Following a topology (Options.Topology) is package internal/follow's
// job: watching the source, refusing what it cannot apply, deciding when
// each topology applies (the rollout protocol; the client's part of it is
// that package's doc), repairing, reporting. This file is the client's
// side of the seam: the routing state, moved as the follower asks.

// Defaults of TopologyOptions.
const (
	DefaultTopologyWait   = follow.DefaultWait
	DefaultTopologyLead   = follow.DefaultLead
	DefaultTopologyWindow = follow.DefaultWindow
	DefaultWriteLog       = follow.DefaultWriteLog
)

// ErrNoTopology is New's error when the source gave no usable topology
// within TopologyOptions.Wait; it wraps the source's last error, if any.
var ErrNoTopology = follow.ErrNoTopology

// ErrRepairing is Sweep's error while the client holds a topology it
// received late, before its repair is over: sweep once it is.
var ErrRepairing = errors.New("shardcache: repairing after a topology received late")

// TopologyOptions makes a client follow a fleet's topology (package
// topology): Options.Nodes, Placement and MigrateFrom are left empty. Its
// fields are topology.FollowOptions's.
type TopologyOptions = topology.FollowOptions

// TopologyStatus is where a client stands in the topology it follows, as
// TopologyInfo reports it: topology.FollowStatus.
type TopologyStatus = topology.FollowStatus

// TopologyInfo returns where the client stands in the topology it follows;
// Following is false without Options.Topology.
func (c *Client) TopologyInfo() TopologyStatus { return c.follower.Status() }

// newFollower starts following o's source and returns the follower and
// the state of the source's first topology.
func (c *Client) newFollower(o *TopologyOptions) (*follow.Follower, *state, error) {
	if o.Source == nil {
		return nil, nil, fmt.Errorf("%w: Topology without a Source", ErrBadOptions)
	}
	if len(c.opts.Nodes) > 0 || c.opts.Placement != nil || c.opts.MigrateFrom != nil || c.opts.Equalize != 0 {
		return nil, nil, fmt.Errorf("%w: give Topology or Nodes, Placement, MigrateFrom and Equalize, not both (the topology says how to place)", ErrBadOptions)
	}
	f, first, err := follow.New((*followed)(c), o, follow.Config{Logger: c.opts.Logger, Now: c.opts.Now, Vnodes: c.opts.Vnodes, ReadTimeout: c.opts.ReadTimeout})
	if err != nil {
		return nil, nil, err
	}
	st, err := c.firstState(first)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// firstState returns the state of the first topology's move: its
// placement, and the migration under way, resumed as MigrateFrom does.
func (c *Client) firstState(m follow.Move) (*state, error) {
	own, err := c.pools.Acquire(m.New.Nodes())
	if err != nil {
		return nil, err
	}
	st := &state{placement: m.New, own: own, conns: own}
	if m.Old != nil {
		oldConns, err := c.pools.Acquire(m.Old.Nodes())
		if err != nil {
			return nil, err
		}
		if st, err = c.migrate(m.Old, oldConns, m.New, own, m.Start, m.Window, m.Skew); err != nil {
			return nil, err
		}
		st.announced = true
	}
	return st, nil
}

// followed is the client as its follower sees it (follow.Client).
type followed Client

// Routing returns the placement the client runs and its migration.
func (f *followed) Routing() (follow.Routing, error) {
	st := (*Client)(f).state.Load()
	if st == nil {
		return follow.Routing{}, ErrClosed
	}
	return follow.Routing{Placement: st.placement, Migration: st.mig, Held: st.hold}, nil
}

// Run moves the client as m says: a migration that starts at m.Start and
// lasts m.Window, for clocks m.Skew apart, held before its start when
// m.Held is set.
func (f *followed) Run(m follow.Move) (follow.Hold, error) {
	c := (*Client)(f)
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state.Load()
	if st == nil {
		return nil, ErrClosed
	}
	now := c.opts.Now()
	if st.mig != nil {
		if st.mig.Active(now) || st.hold {
			return nil, fmt.Errorf("%w: it ends at %v", follow.ErrUnderWay, st.mig.End().Format(time.RFC3339))
		}
		st = c.retireLocked(st)
	}
	// Both placements' nodes are acquired before the current ones are
	// released, so that a node in all of them keeps its pool.
	own, err := c.pools.Acquire(m.New.Nodes())
	if err != nil {
		return nil, err
	}
	oldConns, err := c.pools.Acquire(m.Old.Nodes())
	if err != nil {
		c.pools.Release(m.New.Nodes())
		return nil, err
	}
	next, err := c.migrate(m.Old, oldConns, m.New, own, m.Start, m.Window, m.Skew)
	if err != nil {
		c.pools.Release(m.New.Nodes())
		c.pools.Release(m.Old.Nodes())
		return nil, err
	}
	next.hold, next.announced, next.gone = m.Held, true, m.Gone
	if m.Held {
		next.released = make(chan struct{})
	}
	c.state.Store(next)
	c.releaseLocked(st.placement.Nodes())
	if m.Cutover {
		next = c.retireLocked(next)
	}
	if !m.Held {
		return nil, nil
	}
	return &held{c: c, st: next}, nil
}

// held is a state the client holds before its migration's start, until
// the follower's repair releases it (follow.Hold).
type held struct {
	c  *Client
	st *state
}

// Migration returns the migration held.
func (h *held) Migration() *migration.Migration { return h.st.mig }

// Bury leaves a write's tombstone of each of keys on n: the value this
// process wrote is on the old owner, and a copy made after the handover
// brings it over (copy.go).
func (h *held) Bury(ctx context.Context, n ring.Node, keys []string) error {
	if _, err := h.c.bury(ctx, h.st.conn(n), keys, tombTTL(h.st, h.c.opts.Now()), node.TombWritten); err != nil {
		return nodeErr("repair", n, keys, err)
	}
	return nil
}

// Release ends the hold, if the state is still the client's, and wakes
// the writes waiting for it.
func (h *held) Release() {
	c, st := h.c, h.st
	c.mu.Lock()
	if c.state.Load() == st {
		next := *st
		next.hold, next.released = false, nil
		c.state.Store(&next)
	}
	close(st.released)
	c.mu.Unlock()
	c.retireIfOver()
}
