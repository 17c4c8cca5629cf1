// Package follow makes a client follow a fleet's topology (package
// topology): it watches a topology.Source, validates each topology and
// refuses those it cannot apply, decides when each applies (the rollout
// protocol of package topology, whose argument is in its doc), repairs
// after a topology received late, and reports where it stands. It drives
// the client only through Client: the routing state is the client's, and
// the client moves it as a Follower asks (a Move), so imports flow one way,
// client to follow.
//
// A Follower's part of the protocol:
//
//   - New waits for the source's first topology (Options.Wait) and returns
//     the Move the client starts on; a topology in the middle of its
//     migration is resumed, as client.Options.MigrateFrom does.
//   - Each later topology is validated against the last one applied
//     (topology.Validate); a refused one is logged and counted, and the
//     client keeps what it runs. One equal to the last (topology.Equal)
//     changes the version alone.
//   - A published migration runs with its own start and window, the same
//     in every process; a change without one (DNS, a bare node list)
//     starts Options.Lead after this process received it, for
//     Options.Window, with the lead added to the clock skew: the processes
//     receive one DNS change up to an interval apart, and so start it up to
//     that far apart.
//   - A topology that arrives while a migration is under way waits for its
//     end (Status.Pending).
//   - A topology received at or after its migration's start (Late) is held
//     before its start: reads go to the old placement alone and writes
//     wait, until every key the client wrote since the start (less the
//     skew) is buried on its new owner, from the write log (a few round
//     trips); then the client joins the phase of its clock. If the log no
//     longer reaches back to the start, or a new owner does not answer, the
//     follower buries what it can, logs and counts the failure, and the
//     client joins its phase all the same: the keys it could not bury may
//     read stale on their new owners.
package follow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/migration"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// Defaults of Options (client.DefaultTopologyWait and the others are the
// same values).
const (
	DefaultWait     = 10 * time.Second
	DefaultLead     = 30 * time.Second
	DefaultWindow   = time.Hour
	DefaultWriteLog = 100_000
)

// ErrNoTopology is New's error when the source gave no usable topology
// within Options.Wait; it wraps the source's last error, if any.
var ErrNoTopology = errors.New("shardcache: no topology from the source")

// ErrUnderWay is what Client.Run returns (wrapped) when the migration
// under way, or one held, must end before another starts: the topology
// then waits for its end.
var ErrUnderWay = errors.New("shardcache: a migration is under way")

// Options makes a client follow a fleet's topology: topology.FollowOptions
// (client.TopologyOptions).
type Options = topology.FollowOptions

// withDefaults returns a copy of o with the defaults applied.
func withDefaults(o *Options) *Options {
	t := *o
	if t.Wait <= 0 {
		t.Wait = DefaultWait
	}
	switch {
	case t.Skew == 0:
		t.Skew = topology.DefaultClockSkew
	case t.Skew < 0:
		t.Skew = 0
	}
	if t.Lead <= 0 {
		t.Lead = DefaultLead
	}
	if t.Window <= 0 {
		t.Window = DefaultWindow
	}
	if t.WriteLog == 0 {
		t.WriteLog = DefaultWriteLog
	}
	return &t
}

// Status is where a client stands in the topology it follows:
// topology.FollowStatus (client.TopologyStatus).
type Status = topology.FollowStatus

// Client is the client a Follower drives: the routing state it runs, and
// the one change of it the follower asks for.
type Client interface {
	// Routing returns what the client routes by now; an error (the
	// client's ErrClosed) once it is closed.
	Routing() (Routing, error)
	// Run moves the client as m says and returns the hold of m's
	// migration when m.Held is set, else nil. It fails with ErrUnderWay
	// (wrapped) while a migration is active or held.
	Run(m Move) (Hold, error)
}

// Routing is what a client routes by.
type Routing struct {
	// Placement is the placement the client runs: during a migration, the
	// one it moves to.
	Placement ring.Locator
	// Migration is the migration under way; nil when none.
	Migration *migration.Migration
	// Held is set while the migration is held before its start (Hold).
	Held bool
}

// Move is a change of the client's placement, from Old to New: a migration
// that starts at Start and lasts Window, for clocks Skew apart. The first
// topology's Move (New's) has no Old when no migration is under way.
type Move struct {
	Old, New     ring.Locator
	Start        time.Time
	Window, Skew time.Duration
	// Held keeps the migration before its start, whatever the clocks say,
	// until its Hold is released: the topology was received late.
	Held bool
	// Gone are the addresses of Old's nodes that New does not have, for a
	// change without a migration (a DNS target gone, a pod most likely):
	// the client forgives a failure to reach them. Nil when none.
	Gone map[string]bool
	// Cutover ends the migration as soon as it starts: the nodes' names
	// and placement are the same, their addresses alone changed.
	Cutover bool
}

// Hold is a migration the client holds before its start (Move.Held): its
// reads go to the old placement alone and its writes wait, until Release.
type Hold interface {
	// Migration is the migration held.
	Migration() *migration.Migration
	// Bury leaves a written key's tombstone for each of keys on n, one of
	// their new owners, so that a copy made after the handover brings over
	// the value this process wrote on the old owner.
	Bury(ctx context.Context, n ring.Node, keys []string) error
	// Release ends the hold, if the client still runs it, and wakes the
	// writes waiting for it.
	Release()
}

// Config is what a Follower takes from the client's options.
type Config struct {
	Logger      *slog.Logger     // the follower's events: applied, refused, repaired
	Now         func() time.Time // the clock of the rollout
	Vnodes      int              // the rings' points per node (ring.WithVnodes)
	ReadTimeout time.Duration    // the least time a repair's calls are given
}

// Follower follows a topology source for its client.
type Follower struct {
	c    Client
	cfg  Config
	opts *Options
	log  *writeLog
	ch   <-chan topology.Update
	ctx  context.Context // ends with Close: the watch, a repair's calls
	stop context.CancelFunc
	done chan struct{} // closed when run ends; nil until Start

	mu      sync.Mutex // guards last, pending, lastErr, repairing
	last    *topology.Topology
	pending *topology.Topology
	lastErr string
	// repairing is the hold a repair works for; nil when none.
	repairing Hold

	applied, refused, sourceErrors, late, repaired, repairFailures atomic.Int64
}

// New starts watching o.Source for c and waits for its first usable
// topology, whose Move it returns: the client starts on it, then calls
// Start.
func New(c Client, o *Options, cfg Config) (*Follower, Move, error) {
	o = withDefaults(o)
	ctx, cancel := context.WithCancel(context.Background())
	f := &Follower{c: c, cfg: cfg, opts: o, log: newWriteLog(o.WriteLog), ch: o.Source.Watch(ctx), ctx: ctx, stop: cancel}
	wait := time.NewTimer(o.Wait)
	defer wait.Stop()
	var lastErr error
	for {
		select {
		case u, ok := <-f.ch:
			if !ok {
				cancel()
				return nil, Move{}, fmt.Errorf("%w: the source stopped (last error: %v)", ErrNoTopology, lastErr)
			}
			if u.Err == nil {
				u.Err = topology.Validate(nil, u.Topology)
			}
			if u.Err != nil {
				lastErr = u.Err
				f.sourceErrors.Add(1)
				cfg.Logger.Warn("shardcache: topology source", slog.Any("error", u.Err))
				continue
			}
			m, err := f.initial(u.Topology)
			if err != nil {
				cancel()
				return nil, Move{}, err
			}
			return f, m, nil
		case <-wait.C:
			cancel()
			if lastErr != nil {
				return nil, Move{}, fmt.Errorf("%w within %v: %w", ErrNoTopology, o.Wait, lastErr)
			}
			return nil, Move{}, fmt.Errorf("%w within %v", ErrNoTopology, o.Wait)
		}
	}
}

// initial returns the Move the client starts on from t, the first
// topology: its placement, and its migration if its window (and the skew
// after it) has not passed, resumed as MigrateFrom does.
func (f *Follower) initial(t *topology.Topology) (Move, error) {
	p, old, err := f.placements(t)
	if err != nil {
		return Move{}, err
	}
	mv := Move{New: p}
	if m := t.Migration; m != nil && f.cfg.Now().Before(m.End().Add(f.opts.Skew)) {
		mv.Old, mv.Start, mv.Window, mv.Skew = old, m.Start, m.Window, f.opts.Skew
	}
	f.last = t
	f.applied.Add(1)
	return mv, nil
}

// placements builds t's new placement and, with a migration, the one it
// moves from, as t says (topology.Placements: its tolerances, its kind),
// with Config.Vnodes.
func (f *Follower) placements(t *topology.Topology) (p, old ring.Locator, err error) {
	o, n, err := t.Placements(f.cfg.Vnodes)
	if err != nil {
		return nil, nil, fmt.Errorf("shardcache: the topology's placement: %w", err)
	}
	return n, o, nil
}

// Start follows the source, once the client runs New's Move, until Close.
func (f *Follower) Start() {
	f.done = make(chan struct{})
	f.mu.Lock()
	first := f.last
	f.mu.Unlock()
	go f.run(first)
}

// Close stops following and waits for the goroutine Start started to end.
func (f *Follower) Close() {
	f.stop()
	if f.done != nil {
		<-f.done
	}
}

// Wrote records a write of key in the write log. A nil Follower records
// nothing.
func (f *Follower) Wrote(key string) {
	if f != nil {
		f.log.add(key, f.cfg.Now())
	}
}

// WroteAll records writes of keys, as Wrote does.
func (f *Follower) WroteAll(keys []string) {
	if f != nil {
		f.log.addAll(keys, f.cfg.Now())
	}
}

// run follows the source until Close, applying each topology, and each
// pending one when the migration it waits for ends.
func (f *Follower) run(first *topology.Topology) {
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
				f.cfg.Logger.Warn("shardcache: topology source", slog.Any("error", u.Err))
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
func (f *Follower) pendingWait() (time.Duration, bool) {
	f.mu.Lock()
	waiting := f.pending != nil
	f.mu.Unlock()
	r, err := f.c.Routing()
	if !waiting || err != nil {
		return 0, false
	}
	if r.Migration == nil {
		return 0, true
	}
	return max(r.Migration.End().Add(r.Migration.Skew()).Sub(f.cfg.Now()), 0) + time.Millisecond, true
}

// apply validates t against the last topology applied and applies it.
func (f *Follower) apply(t *topology.Topology) {
	now := f.cfg.Now()
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
	mv := Move{New: p, Start: now, Window: f.opts.Window, Skew: f.opts.Skew}
	if m := t.Migration; m != nil {
		mv.Old, mv.Start, mv.Window, mv.Held = old, m.Start, m.Window, t.Late(now)
	} else if mv.Old, err = f.readdressed(p); err != nil {
		f.refuse(t, err)
		return
	} else if samePlacement(mv.Old, p) {
		if cur, err := f.c.Routing(); err == nil && mv.Old == cur.Placement {
			f.keep(t) // nothing moves, nothing changes address
			return
		}
		mv.Window, mv.Skew, mv.Cutover = 0, 0, true // addresses alone changed: at once
	} else {
		mv.Start, mv.Skew = now.Add(f.opts.Lead), mv.Skew+f.opts.Lead
		mv.Gone = removed(mv.Old, p)
	}
	h, err := f.c.Run(mv)
	switch {
	case errors.Is(err, ErrUnderWay):
		f.mu.Lock()
		f.pending = t
		f.mu.Unlock()
		f.cfg.Logger.Info("shardcache: topology waits for the migration under way", slog.Int64("version", t.Version))
		return
	case err != nil:
		f.refuse(t, err)
		return
	}
	f.applied.Add(1)
	if mv.Held {
		f.late.Add(1)
	}
	f.mu.Lock()
	f.last = t
	if mv.Held {
		f.repairing = h
	}
	f.mu.Unlock()
	f.cfg.Logger.Info("shardcache: topology applied", slog.Int64("version", t.Version), slog.Time("start", mv.Start),
		slog.Duration("window", mv.Window), slog.Bool("late", mv.Held))
	if mv.Held && h.Migration() != nil {
		f.repair(h)
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
func (f *Follower) keep(t *topology.Topology) {
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
func (f *Follower) refuse(t *topology.Topology, err error) {
	f.refused.Add(1)
	f.setErr(err)
	f.cfg.Logger.Error("shardcache: topology refused; the client keeps the last one", slog.Int64("version", t.Version), slog.Any("error", err))
}

func (f *Follower) setErr(err error) {
	f.mu.Lock()
	f.lastErr = err.Error()
	f.mu.Unlock()
}

func (f *Follower) report(t *topology.Topology) {
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
func (f *Follower) readdressed(p ring.Locator) (ring.Locator, error) {
	r, err := f.c.Routing()
	if err != nil {
		return nil, err
	}
	addr := make(map[string]string, len(p.Nodes()))
	for _, n := range p.Nodes() {
		addr[n.Name] = n.Addr
	}
	cur := r.Placement.Nodes()
	nodes := make([]ring.Node, len(cur))
	changed := false
	for i, n := range cur {
		nodes[i] = n
		if a, ok := addr[n.Name]; ok && a != n.Addr {
			nodes[i].Addr, changed = a, true
		}
	}
	if !changed {
		return r.Placement, nil
	}
	if _, ok := r.Placement.(*ring.Ring); !ok {
		return r.Placement, nil // not placed by name: a migration as any other
	}
	f.mu.Lock()
	equalize := f.last.Equalize
	f.mu.Unlock()
	return topology.Ring(nodes, f.cfg.Vnodes, equalize)
}

// repair buries, on their new owners, the keys this process wrote since
// h's migration started (less the skew), then releases h. When the write
// log does not reach back that far, or a new owner cannot be reached, it
// buries what it can, counts and logs the failure, and releases all the
// same: the keys it could not bury may read stale on their new owners, for
// this process too (the writes that wait for the hold could not wait for
// the window's end).
func (f *Follower) repair(h Hold) {
	defer f.release(h)
	m := h.Migration()
	keys, complete := f.log.since(m.Start().Add(-m.Skew()))
	byOwner := map[ring.Node][]string{}
	for _, k := range keys {
		if n, o := m.New().Locate(k), m.Old().Locate(k); n.Addr != o.Addr {
			byOwner[n] = append(byOwner[n], k)
		}
	}
	ctx, cancel := context.WithTimeout(f.ctx, max(m.End().Sub(f.cfg.Now()), f.cfg.ReadTimeout))
	defer cancel()
	buried := 0
	var failure error
	for n, ks := range byOwner {
		for i := 0; i < len(ks); i += repairBatch {
			batch := ks[i:min(i+repairBatch, len(ks))]
			if err := h.Bury(ctx, n, batch); err != nil {
				failure = err
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
		f.cfg.Logger.Error("shardcache: repair after a late topology incomplete: keys written since the start and not buried may read stale on their new owners",
			slog.Int("buried", buried), slog.Any("error", failure))
		return
	}
	f.cfg.Logger.Info("shardcache: repair after a late topology done", slog.Int("buried", buried))
}

// repairBatch is how many tombstones a repair sends a node at once.
const repairBatch = 512

// release releases h and then marks the repair over.
func (f *Follower) release(h Hold) {
	h.Release()
	f.mu.Lock()
	if f.repairing == h {
		f.repairing = nil
	}
	f.mu.Unlock()
}

// Status returns where the client stands in the topology it follows; the
// zero Status (Following false) for a nil Follower.
func (f *Follower) Status() Status {
	if f == nil {
		return Status{}
	}
	f.mu.Lock()
	s := Status{Following: true, LastError: f.lastErr, Repairing: f.repairing != nil}
	last := f.last
	if last != nil {
		s.Version = last.Version
	}
	if f.pending != nil {
		s.Pending = f.pending.Version
	}
	f.mu.Unlock()
	switch r, err := f.c.Routing(); {
	case err == nil && r.Migration != nil:
		// A held migration routes as just before its start.
		switch now := f.cfg.Now(); {
		case r.Held || now.Before(r.Migration.Start()):
			s.Phase = topology.Before
		case now.Before(r.Migration.End()):
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
