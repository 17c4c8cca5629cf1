package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// Following a topology. With Options.Topology the client takes its nodes
// from a topology.Source rather than from Options.Nodes, and every change
// the source streams becomes a migration that every process of the fleet
// runs alike: the rollout protocol of package topology, whose argument is
// in its doc. The client's part:
//
//   - New waits for the source's first topology (TopologyOptions.Wait) and
//     starts on it; a topology in the middle of its migration is resumed,
//     as MigrateFrom does.
//   - Each later topology is validated against the last one applied
//     (topology.Validate); a refused one is logged and counted, and the
//     client keeps what it runs. One equal to the last (topology.Equal)
//     changes the version alone.
//   - A published migration runs with its own start and window, the same
//     in every process; a change without one (DNS, a bare node list)
//     starts TopologyOptions.Lead after this process received it, for
//     TopologyOptions.Window, with the lead added to the clock skew: the
//     processes receive one DNS change up to an interval apart, and so
//     start it up to that far apart.
//   - A topology that arrives while a migration is under way waits for its
//     end (Pending).
//   - A topology received at or after its migration's start (Late) is held
//     before its start: reads go to the old placement alone and writes
//     wait, until every key the client wrote since the start (less the
//     skew) is buried on its new owner, from the write log (a few round
//     trips); then the client joins the phase of its clock. If the log no
//     longer reaches back to the start, or a new owner does not answer, the
//     client buries what it can, logs and counts the failure, and joins
//     its phase all the same: the keys it could not bury may read stale on
//     their new owners.

// Defaults of TopologyOptions.
const (
	DefaultTopologyWait   = 10 * time.Second
	DefaultTopologyLead   = 30 * time.Second
	DefaultTopologyWindow = time.Hour
	DefaultWriteLog       = 100_000
)

// ErrNoTopology is New's error when the source gave no usable topology
// within TopologyOptions.Wait; it wraps the source's last error, if any.
var ErrNoTopology = errors.New("shardcache: no topology from the source")

// ErrRepairing is Sweep's error while the client holds a topology it
// received late, before its repair is over: sweep once it is.
var ErrRepairing = errors.New("shardcache: repairing after a topology received late")

// TopologyOptions makes a client follow a fleet's topology (package
// topology): Options.Nodes, Placement and MigrateFrom are left empty.
type TopologyOptions struct {
	// Source streams the topologies: topology.DNS, topofile.Source or
	// etcdsource.Source.
	Source topology.Source
	// Wait bounds how long New waits for the source's first topology.
	// Default DefaultTopologyWait.
	Wait time.Duration
	// Skew is how far apart the clocks of the fleet's processes may be
	// (package topology, "Clocks"). Default topology.DefaultClockSkew; a
	// negative Skew means none.
	Skew time.Duration
	// Lead and Window are the migration of a change that comes without
	// one: it starts Lead after this process received it and lasts
	// Window. Lead must exceed how far apart the processes may receive
	// one change (a DNS source's Interval, plus the resolvers' caching);
	// it is added to the skew, so that an update of a moved key that
	// depends on its value (Incr, Touch, an append) waits from the start
	// for about twice Skew+Lead and the network timeouts (the handover,
	// copy.go). Defaults DefaultTopologyLead and DefaultTopologyWindow.
	Lead, Window time.Duration
	// WriteLog is how many recent writes the client remembers for the
	// repair after a topology received late. Default DefaultWriteLog; a
	// negative WriteLog keeps none, and a late topology then repairs
	// nothing (a repair failure).
	WriteLog int
	// OnApply, when set, is called with each topology the client applies,
	// once it runs it, on the goroutine that follows the source: to report
	// the version the process runs (etcdsource.Registration.Set). It must
	// not call Close, which waits for that goroutine.
	OnApply func(*topology.Topology)
}

// withDefaults returns a copy with the defaults applied.
func (o *TopologyOptions) withDefaults() *TopologyOptions {
	t := *o
	if t.Wait <= 0 {
		t.Wait = DefaultTopologyWait
	}
	switch {
	case t.Skew == 0:
		t.Skew = topology.DefaultClockSkew
	case t.Skew < 0:
		t.Skew = 0
	}
	if t.Lead <= 0 {
		t.Lead = DefaultTopologyLead
	}
	if t.Window <= 0 {
		t.Window = DefaultTopologyWindow
	}
	if t.WriteLog == 0 {
		t.WriteLog = DefaultWriteLog
	}
	return &t
}

// TopologyStatus is what TopologyInfo reports.
type TopologyStatus struct {
	// Following is set when the client follows a source.
	Following bool
	// Version is the version of the topology the client runs.
	Version int64
	// Phase is where the client stands in that topology's rollout.
	Phase topology.Phase
	// Pending is the version of a topology waiting for the migration under
	// way to end; 0 when none waits.
	Pending int64
	// Applied counts the topologies applied (the first included),
	// Refused those Validate refused, SourceErrors the errors the source
	// reported.
	Applied, Refused, SourceErrors int64
	// Late counts the topologies received after their start; Repairing is
	// set while the client holds one before its start. Repaired counts the
	// keys the repairs buried on their new owners, RepairFailures the
	// repairs that could not complete (the write log did not reach back to
	// the start, or a new owner did not answer): the keys not buried may
	// read stale on their new owners.
	Late           int64
	Repairing      bool
	Repaired       int64
	RepairFailures int64
	// LastError is the last refusal or source error, empty when none.
	LastError string
}

// follower follows a topology source for its client.
type follower struct {
	c    *Client
	opts *TopologyOptions
	log  *writeLog
	ch   <-chan topology.Update
	ctx  context.Context // ends with close: the watch, a repair's calls
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex // guards last, pending, lastErr, repairing
	last    *topology.Topology
	pending *topology.Topology
	lastErr string
	// repairing is the held state a repair works for; nil when none.
	repairing *state

	applied, refused, sourceErrors, late, repaired, repairFailures atomic.Int64
}

// newFollower starts watching o.Source and waits for its first usable
// topology, which it returns.
func (c *Client) newFollower(o *TopologyOptions) (*follower, *topology.Topology, error) {
	if o.Source == nil {
		return nil, nil, fmt.Errorf("%w: Topology without a Source", ErrBadOptions)
	}
	if len(c.opts.Nodes) > 0 || c.opts.Placement != nil || c.opts.MigrateFrom != nil || c.opts.Equalize != 0 {
		return nil, nil, fmt.Errorf("%w: give Topology or Nodes, Placement, MigrateFrom and Equalize, not both (the topology says how to place)", ErrBadOptions)
	}
	o = o.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{c: c, opts: o, log: newWriteLog(o.WriteLog), ch: o.Source.Watch(ctx), ctx: ctx, stop: cancel, done: make(chan struct{})}
	wait := time.NewTimer(o.Wait)
	defer wait.Stop()
	var lastErr error
	for {
		select {
		case u, ok := <-f.ch:
			if !ok {
				cancel()
				return nil, nil, fmt.Errorf("%w: the source stopped (last error: %v)", ErrNoTopology, lastErr)
			}
			if u.Err == nil {
				u.Err = topology.Validate(nil, u.Topology)
			}
			if u.Err != nil {
				lastErr = u.Err
				f.sourceErrors.Add(1)
				c.opts.Logger.Warn("shardcache: topology source", slog.Any("error", u.Err))
				continue
			}
			return f, u.Topology, nil
		case <-wait.C:
			cancel()
			if lastErr != nil {
				return nil, nil, fmt.Errorf("%w within %v: %w", ErrNoTopology, o.Wait, lastErr)
			}
			return nil, nil, fmt.Errorf("%w within %v", ErrNoTopology, o.Wait)
		}
	}
}

// initial returns the state the client starts in from t, the first
// topology: its placement, and its migration if its window (and the skew
// after it) has not passed, resumed as MigrateFrom does.
func (f *follower) initial(t *topology.Topology) (*state, error) {
	c := f.c
	p, old, err := f.placements(t)
	if err != nil {
		return nil, err
	}
	own, err := c.pools.Acquire(p.Nodes())
	if err != nil {
		return nil, err
	}
	st := &state{placement: p, own: own, conns: own}
	if m := t.Migration; m != nil && c.opts.Now().Before(m.End().Add(f.opts.Skew)) {
		oldConns, err := c.pools.Acquire(old.Nodes())
		if err != nil {
			return nil, err
		}
		if st, err = c.migrate(old, oldConns, p, own, m.Start, m.Window, f.opts.Skew); err != nil {
			return nil, err
		}
		st.announced = true
	}
	f.last = t
	f.applied.Add(1)
	return st, nil
}

// placements builds t's new placement and, with a migration, the one it
// moves from, as t says (topology.Placements: its tolerances, its kind),
// with Options.Vnodes.
func (f *follower) placements(t *topology.Topology) (p, old ring.Locator, err error) {
	o, n, err := t.Placements(f.c.opts.Vnodes)
	if err != nil {
		return nil, nil, fmt.Errorf("shardcache: the topology's placement: %w", err)
	}
	return n, o, nil
}

// run follows the source until close, applying each topology, and each
// pending one when the migration it waits for ends.
func (f *follower) run(first *topology.Topology) {
	defer close(f.done)
	f.report(first)
	var retry *time.Timer
	var retryC <-chan time.Time
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		select {
		case u, ok := <-f.ch:
			if !ok {
				return
			}
			if u.Err != nil {
				f.sourceErrors.Add(1)
				f.setErr(u.Err)
				f.c.opts.Logger.Warn("shardcache: topology source", slog.Any("error", u.Err))
				continue
			}
			f.apply(u.Topology)
		case <-retryC:
			f.mu.Lock()
			t := f.pending
			f.pending = nil
			f.mu.Unlock()
			if t != nil {
				f.apply(t)
			}
		}
		if retry != nil {
			retry.Stop()
			retry, retryC = nil, nil
		}
		if d, ok := f.pendingWait(); ok {
			retry = time.NewTimer(d)
			retryC = retry.C
		}
	}
}

// pendingWait returns how long until a pending topology may be applied.
func (f *follower) pendingWait() (time.Duration, bool) {
	f.mu.Lock()
	waiting := f.pending != nil
	f.mu.Unlock()
	st := f.c.state.Load()
	if !waiting || st == nil {
		return 0, false
	}
	if st.mig == nil {
		return 0, true
	}
	return max(st.mig.End().Add(st.mig.Skew()).Sub(f.c.opts.Now()), 0) + time.Millisecond, true
}

// apply validates t against the last topology applied and applies it.
func (f *follower) apply(t *topology.Topology) {
	c := f.c
	now := c.opts.Now()
	f.mu.Lock()
	last := f.last
	f.mu.Unlock()
	if err := topology.Validate(last, t); err != nil {
		f.refuse(t, err)
		return
	}
	if t.Equal(last) {
		f.keep(t)
		return
	}
	p, old, err := f.placements(t)
	if err != nil {
		f.refuse(t, err)
		return
	}
	start, window, skew := now, f.opts.Window, f.opts.Skew
	late, cutover := false, false
	var gone map[string]bool
	if m := t.Migration; m != nil {
		start, window, late = m.Start, m.Window, t.Late(now)
	} else if old, err = f.readdressed(p); err != nil {
		f.refuse(t, err)
		return
	} else if samePlacement(old, p) {
		if cur := c.state.Load(); cur != nil && old == cur.placement {
			f.keep(t) // nothing moves, nothing changes address
			return
		}
		start, window, skew, cutover = now, 0, 0, true // addresses alone changed: at once
	} else {
		start, skew = now.Add(f.opts.Lead), skew+f.opts.Lead
		gone = removed(old, p)
	}
	st, err := c.follow(old, p, start, window, skew, late, gone, cutover)
	switch {
	case errors.Is(err, ErrMigrationActive):
		f.mu.Lock()
		f.pending = t
		f.mu.Unlock()
		c.opts.Logger.Info("shardcache: topology waits for the migration under way", slog.Int64("version", t.Version))
		return
	case err != nil:
		f.refuse(t, err)
		return
	}
	f.applied.Add(1)
	if late {
		f.late.Add(1)
	}
	f.mu.Lock()
	f.last = t
	if late {
		f.repairing = st
	}
	f.mu.Unlock()
	c.opts.Logger.Info("shardcache: topology applied", slog.Int64("version", t.Version), slog.Time("start", start),
		slog.Duration("window", window), slog.Bool("late", late))
	if late && st.mig != nil {
		f.repair(st)
	}
	f.report(t)
}

// removed returns the addresses of old's nodes that p does not have, nil
// when none.
func removed(old, p ring.Locator) map[string]bool {
	in := make(map[string]bool, len(p.Nodes()))
	for _, n := range p.Nodes() {
		in[n.Addr] = true
	}
	var gone map[string]bool
	for _, n := range old.Nodes() {
		if !in[n.Addr] {
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[n.Addr] = true
		}
	}
	return gone
}

// keep records t as the last topology, one that changes nothing the client
// runs (a new version of the same placement).
func (f *follower) keep(t *topology.Topology) {
	f.mu.Lock()
	f.last = t
	f.mu.Unlock()
	f.report(t)
}

// samePlacement reports whether two placements put every key on the same
// node by name: two rings of the same nodes, weights and points, whatever
// their addresses.
func samePlacement(a, b ring.Locator) bool {
	ra, ok1 := a.(*ring.Ring)
	rb, ok2 := b.(*ring.Ring)
	if !ok1 || !ok2 {
		return false
	}
	return ring.Moved(ra, rb) == 0
}

// refuse counts and logs a topology that cannot be applied.
func (f *follower) refuse(t *topology.Topology, err error) {
	f.refused.Add(1)
	f.setErr(err)
	f.c.opts.Logger.Error("shardcache: topology refused; the client keeps the last one", slog.Int64("version", t.Version), slog.Any("error", err))
}

func (f *follower) setErr(err error) {
	f.mu.Lock()
	f.lastErr = err.Error()
	f.mu.Unlock()
}

func (f *follower) report(t *topology.Topology) {
	if f.opts.OnApply != nil {
		f.opts.OnApply(t)
	}
}

// readdressed returns the placement the client runs with the addresses of
// p's nodes of the same name: what a change without a migration moves
// from. A node that comes back under its name at a new address (a pod
// restarted, named by its SRV target) starts empty there, and its old
// address is gone: its keys change servers at once, without a window whose
// dual writes would fail on the old address, and without moving on the
// ring, which places by name.
func (f *follower) readdressed(p ring.Locator) (ring.Locator, error) {
	st := f.c.state.Load()
	if st == nil {
		return nil, ErrClosed
	}
	addr := make(map[string]string, len(p.Nodes()))
	for _, n := range p.Nodes() {
		addr[n.Name] = n.Addr
	}
	cur := st.placement.Nodes()
	nodes := make([]ring.Node, len(cur))
	changed := false
	for i, n := range cur {
		nodes[i] = n
		if a, ok := addr[n.Name]; ok && a != n.Addr {
			nodes[i].Addr, changed = a, true
		}
	}
	if !changed {
		return st.placement, nil
	}
	if _, ok := st.placement.(*ring.Ring); !ok {
		return st.placement, nil // not placed by name: a migration as any other
	}
	f.mu.Lock()
	equalize := f.last.Equalize
	f.mu.Unlock()
	return topology.Ring(nodes, f.c.opts.Vnodes, equalize)
}

// follow moves the client from old to p:
// a migration that starts at start and lasts window, for clocks skew
// apart, held before its start when held is set. It returns the new state.
func (c *Client) follow(old, p ring.Locator, start time.Time, window, skew time.Duration, held bool, gone map[string]bool, cutover bool) (*state, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state.Load()
	if st == nil {
		return nil, ErrClosed
	}
	now := c.opts.Now()
	if st.mig != nil {
		if st.mig.Active(now) || st.hold {
			return nil, fmt.Errorf("%w: it ends at %v", ErrMigrationActive, st.mig.End().Format(time.RFC3339))
		}
		st = c.retireLocked(st)
	}
	// Both placements' nodes are acquired before the current ones are
	// released, so that a node in all of them keeps its pool.
	own, err := c.pools.Acquire(p.Nodes())
	if err != nil {
		return nil, err
	}
	oldConns, err := c.pools.Acquire(old.Nodes())
	if err != nil {
		c.pools.Release(p.Nodes())
		return nil, err
	}
	next, err := c.migrate(old, oldConns, p, own, start, window, skew)
	if err != nil {
		c.pools.Release(p.Nodes())
		c.pools.Release(old.Nodes())
		return nil, err
	}
	next.hold, next.announced, next.gone = held, true, gone
	if held {
		next.released = make(chan struct{})
	}
	c.state.Store(next)
	c.releaseLocked(st.placement.Nodes())
	if cutover {
		next = c.retireLocked(next)
	}
	return next, nil
}

// repair buries, on their new owners, the keys this process wrote since
// st's migration started (less the skew), then releases st's hold. When
// the write log does not reach back that far, or a new owner cannot be
// reached, it buries what it can, counts and logs the failure, and
// releases all the same: the keys it could not bury may read stale on
// their new owners, for this process too (the writes that wait for the
// hold could not wait for the window's end).
func (f *follower) repair(st *state) {
	c := f.c
	defer f.release(st)
	keys, complete := f.log.since(st.mig.Start().Add(-st.mig.Skew()))
	byOwner := map[ring.Node][]string{}
	for _, k := range keys {
		if n, o := st.mig.New().Locate(k), st.mig.Old().Locate(k); n.Addr != o.Addr {
			byOwner[n] = append(byOwner[n], k)
		}
	}
	ctx, cancel := context.WithTimeout(f.ctx, max(st.mig.End().Sub(c.opts.Now()), c.opts.ReadTimeout))
	defer cancel()
	buried := 0
	var failure error
	for n, ks := range byOwner {
		for i := 0; i < len(ks); i += repairBatch {
			batch := ks[i:min(i+repairBatch, len(ks))]
			// A write's tombstone: the value this process wrote is on the
			// old owner, and a copy made after the handover brings it over
			// (copy.go).
			if _, err := c.bury(ctx, st.conn(n), batch, tombTTL(st, c.opts.Now()), node.TombWritten); err != nil {
				failure = nodeErr("repair", n, batch, err)
				break
			}
			buried += len(batch)
		}
	}
	f.repaired.Add(int64(buried))
	if !complete && failure == nil {
		failure = fmt.Errorf("the write log (%d entries) does not reach back to the start", f.opts.WriteLog)
	}
	if failure != nil {
		f.repairFailures.Add(1)
		f.setErr(failure)
		c.opts.Logger.Error("shardcache: repair after a late topology incomplete: keys written since the start and not buried may read stale on their new owners",
			slog.Int("buried", buried), slog.Any("error", failure))
		return
	}
	c.opts.Logger.Info("shardcache: repair after a late topology done", slog.Int("buried", buried))
}

// repairBatch is how many tombstones a repair sends a node at once.
const repairBatch = 512

// release ends st's hold, if st is still the client's state, and wakes
// the writes waiting for it.
func (f *follower) release(st *state) {
	c := f.c
	c.mu.Lock()
	if c.state.Load() == st {
		next := *st
		next.hold, next.released = false, nil
		c.state.Store(&next)
	}
	close(st.released)
	c.mu.Unlock()
	f.mu.Lock()
	if f.repairing == st {
		f.repairing = nil
	}
	f.mu.Unlock()
	c.retireIfOver()
}

// close stops following and waits for the goroutine to end.
func (f *follower) close() {
	f.stop()
	<-f.done
}

// TopologyInfo returns where the client stands in the topology it follows;
// Following is false without Options.Topology.
func (c *Client) TopologyInfo() TopologyStatus {
	f := c.follower
	if f == nil {
		return TopologyStatus{}
	}
	f.mu.Lock()
	s := TopologyStatus{Following: true, LastError: f.lastErr, Repairing: f.repairing != nil}
	last := f.last
	if last != nil {
		s.Version = last.Version
	}
	if f.pending != nil {
		s.Pending = f.pending.Version
	}
	f.mu.Unlock()
	switch st := c.state.Load(); {
	case st != nil && st.mig != nil:
		switch now := st.at(c.opts.Now()); {
		case now.Before(st.mig.Start()):
			s.Phase = topology.Before
		case now.Before(st.mig.End()):
			s.Phase = topology.During
		default:
			s.Phase = topology.After
		}
	case last != nil && last.Migration != nil:
		s.Phase = topology.After // its migration retired
	}
	s.Applied, s.Refused, s.SourceErrors = f.applied.Load(), f.refused.Load(), f.sourceErrors.Load()
	s.Late, s.Repaired, s.RepairFailures = f.late.Load(), f.repaired.Load(), f.repairFailures.Load()
	return s
}

// wrote records a write of key in the write log, when the client follows
// a topology.
func (c *Client) wrote(key string) {
	if f := c.follower; f != nil {
		f.log.add(key, c.opts.Now())
	}
}

// wroteAll records writes of keys, as wrote does.
func (c *Client) wroteAll(keys []string) {
	if f := c.follower; f != nil {
		f.log.addAll(keys, c.opts.Now())
	}
}
