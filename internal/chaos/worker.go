package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// WorkerEnv is the environment variable in which the harness hands a worker
// process its WorkerConfig, as JSON.
const WorkerEnv = "SHARDCACHE_CHAOS_WORKER"

// Sweep and Reshard are the events of a sweep run by a worker, and of a
// Reshard it called (WorkerConfig.SelfReshard), recorded beside the faults.
const (
	Sweep   FaultKind = "sweep"
	Reshard FaultKind = "reshard"
)

// Bug is a broken system under test of the harness's own, to show that the
// checker catches what it must before the client's seeded-bug builds exist.
type Bug string

// Bugs.
const (
	// NoBug runs the client as it is.
	NoBug Bug = ""
	// NoDualDelete sends the deletes of values made during a migration's
	// window through a second client on the new placement alone, as a
	// process that skipped the dual delete would: the old owner keeps the
	// value, and a read that misses the new owner finds it there.
	NoDualDelete Bug = "no-dual-delete"
)

// Mix is the weight of each kind of operation; the zero Mix is DefaultMix.
type Mix struct {
	Set, Get, Delete, Incr, GetMulti, GetOrLoad int
}

// DefaultMix is 20% sets, 7% deletes, 8% increments, the rest reads.
var DefaultMix = Mix{Set: 20, Get: 45, Delete: 7, Incr: 8, GetMulti: 10, GetOrLoad: 10}

// ClientConfig is the client options a worker varies.
type ClientConfig struct {
	AsyncBackfill    bool
	FailOpen         bool
	FailureThreshold int
	ProbeInterval    time.Duration
	// Timeout is each network step's (dial, read, write).
	Timeout time.Duration
	Lease   time.Duration
	// MetaLeases takes GetOrLoad's leases in its reads (client.Options).
	MetaLeases bool
	// Replicas keeps every key on that many nodes (client.Options.Replicas,
	// which refuses Lease and MetaLeases). 0 or 1: one.
	Replicas int
}

// WorkerConfig is one client process's part of a run.
type WorkerConfig struct {
	Proc, Incarnation int
	Backend           string // "redis" or "memcached"
	// Old and New are the placements before and after the reshard; without
	// one (ReshardAt 0) the run uses New throughout.
	Old, New []ring.Node
	// Start and End bound the run, wall-clock nanoseconds.
	Start, End int64
	// ReshardAt is when the migration from Old to New starts, for Window:
	// every process is given the same MigrateFrom, so none lags.
	ReshardAt int64
	Window    time.Duration
	// Goroutines run operations over Keys values ("k00"...) and Counters
	// counters ("c0"...), in the proportions of Mix.
	Goroutines, Keys, Counters int
	Mix                        Mix
	Seed                       uint64
	Client                     ClientConfig
	// OpTimeout bounds each call.
	OpTimeout time.Duration
	// Sweep makes this process run client.Sweep once the migration starts.
	Sweep bool
	Bug   Bug
	// SelfReshard makes the process start on Old alone and call
	// client.Reshard(New, Window) itself at ReshardAt, as a process told of
	// a change on its own does: without a shared start, each process's
	// ReshardAt is its own. The rollout protocol's counterexample.
	SelfReshard bool
	// Follow, when set, makes the process follow a topology published in
	// etcd instead (Old, New and ReshardAt unused).
	Follow *FollowConfig
	// History is the file the worker writes.
	History string
}

// reshardGuard is how long before ReshardAt the calls through the old
// placement must have returned, so that none is under way when the new
// one takes over.
const reshardGuard = 20 * time.Millisecond

// worker is one process's run.
type worker struct {
	cfg      WorkerConfig
	rec      *Recorder
	old, cur *client.Client // before and from ReshardAt
	newOnly  *client.Client // NoDualDelete's client of New alone
	keys     []string
	counters []string
	loadSeq  atomic.Uint64
	loads    sync.Map // value -> OpID of the Load that made it
	ops      atomic.Int64
}

// RunWorker runs one worker process's operations until cfg.End, recording
// them with rec.
func RunWorker(ctx context.Context, cfg WorkerConfig, rec *Recorder) error {
	w := &worker{cfg: cfg, rec: rec}
	for i := range cfg.Keys {
		w.keys = append(w.keys, fmt.Sprintf("k%02d", i))
	}
	for i := range cfg.Counters {
		w.counters = append(w.counters, fmt.Sprintf("c%d", i))
	}
	if cfg.Mix == (Mix{}) {
		w.cfg.Mix = DefaultMix
	}
	ctx, cancel := context.WithDeadline(ctx, time.Unix(0, cfg.End))
	defer cancel()
	var wg sync.WaitGroup
	switch {
	case cfg.Follow != nil:
		migs := make(chan *topology.Topology, 1)
		closeAll, err := w.follow(ctx, migs)
		if err != nil {
			return err
		}
		defer closeAll()
		if cfg.Sweep {
			wg.Go(func() { w.sweepFollowed(ctx, migs) })
		}
	case cfg.SelfReshard:
		var err error
		if w.cur, err = client.New(w.options(cfg.Old)); err != nil {
			return err
		}
		defer w.cur.Close()
		wg.Go(func() { w.reshard(ctx) })
	default:
		closeAll, err := w.fixed()
		if err != nil {
			return err
		}
		defer closeAll()
		if cfg.Sweep && cfg.ReshardAt != 0 {
			wg.Go(func() { w.sweepAt(ctx, time.Unix(0, cfg.ReshardAt).Add(500*time.Millisecond)) })
		}
	}
	for g := range cfg.Goroutines {
		wg.Go(func() { w.loop(ctx, g) })
	}
	wg.Wait()
	w.rec.Stats(w.stats())
	return w.rec.Err()
}

// fixed builds the clients of a run given its placements: every process is
// given the same MigrateFrom.
func (w *worker) fixed() (func(), error) {
	cfg := w.cfg
	var err error
	var closers []*client.Client
	closeAll := func() {
		for _, c := range closers {
			c.Close()
		}
	}
	opts := w.options(cfg.New)
	if cfg.ReshardAt != 0 {
		opts.MigrateFrom = &client.MigrateFrom{Nodes: cfg.Old, Start: time.Unix(0, cfg.ReshardAt), Window: cfg.Window}
		if time.Now().UnixNano() < cfg.ReshardAt {
			if w.old, err = client.New(w.options(cfg.Old)); err != nil {
				return nil, err
			}
			closers = append(closers, w.old)
		}
	}
	if w.cur, err = client.New(opts); err != nil {
		closeAll()
		return nil, err
	}
	closers = append(closers, w.cur)
	if cfg.Bug == NoDualDelete {
		if w.newOnly, err = client.New(w.options(cfg.New)); err != nil {
			closeAll()
			return nil, err
		}
		closers = append(closers, w.newOnly)
	}
	return closeAll, nil
}

// reshard calls Reshard at ReshardAt, recorded as an event.
func (w *worker) reshard(ctx context.Context) {
	if !waitUntil(ctx, time.Unix(0, w.cfg.ReshardAt)) {
		return
	}
	start := time.Now().UnixNano()
	detail := fmt.Sprintf("to %d nodes, window %v", len(w.cfg.New), w.cfg.Window)
	if err := w.cur.Reshard(w.cfg.New, w.cfg.Window); err != nil {
		detail += " error: " + err.Error()
	}
	w.rec.Fault(Fault{Kind: Reshard, Target: fmt.Sprintf("p%d", w.cfg.Proc), Detail: detail, Start: start, End: time.Now().UnixNano()})
}

// waitUntil waits for at, false if ctx ends first.
func waitUntil(ctx context.Context, at time.Time) bool {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// options are the client's options over nodes (none when the client
// follows a topology).
func (w *worker) options(nodes []ring.Node) client.Options {
	c := w.cfg.Client
	b := client.Redis
	if w.cfg.Backend == "memcached" {
		b = client.Memcached
	}
	return client.Options{
		Backend: b, Nodes: nodes,
		DialTimeout: c.Timeout, ReadTimeout: c.Timeout, WriteTimeout: c.Timeout,
		AsyncBackfill: c.AsyncBackfill, FailOpen: c.FailOpen,
		FailureThreshold: c.FailureThreshold, ProbeInterval: c.ProbeInterval,
		Lease: c.Lease, MetaLeases: c.MetaLeases, Replicas: c.Replicas, PoolSize: 4 * max(1, w.cfg.Goroutines),
	}
}

// loop runs one goroutine's operations.
func (w *worker) loop(ctx context.Context, g int) {
	rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.cfg.Proc)<<32|uint64(w.cfg.Incarnation)<<16|uint64(g)))
	for seq := uint64(1); ctx.Err() == nil; seq++ {
		c, deadline := w.route(ctx)
		if c == nil {
			continue
		}
		octx, cancel := context.WithDeadline(ctx, deadline)
		w.one(octx, c, rng, OpID{Proc: w.cfg.Proc, Incarnation: w.cfg.Incarnation, Goroutine: g, Seq: seq})
		cancel()
		w.ops.Add(1)
	}
}

// route returns the client for a call starting now and its deadline: the
// old placement's before the reshard, its calls cut off reshardGuard before
// it; nil while waiting for the reshard.
func (w *worker) route(ctx context.Context) (*client.Client, time.Time) {
	now := time.Now()
	deadline := now.Add(w.cfg.OpTimeout)
	if w.old == nil || now.UnixNano() >= w.cfg.ReshardAt {
		return w.cur, deadline
	}
	cut := time.Unix(0, w.cfg.ReshardAt).Add(-reshardGuard)
	if now.Before(cut.Add(-time.Millisecond)) {
		return w.old, minTime(deadline, cut)
	}
	t := time.NewTimer(time.Until(time.Unix(0, w.cfg.ReshardAt)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, time.Time{}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// one runs one operation and records it.
func (w *worker) one(ctx context.Context, c *client.Client, rng *rand.Rand, id OpID) {
	m := w.cfg.Mix
	n := rng.IntN(m.Set + m.Get + m.Delete + m.Incr + m.GetMulti + m.GetOrLoad)
	anyKey := func() string {
		i := rng.IntN(len(w.keys) + len(w.counters))
		if i < len(w.keys) {
			return w.keys[i]
		}
		return w.counters[i-len(w.keys)]
	}
	value := func() string { return w.keys[rng.IntN(len(w.keys))] }
	switch {
	case n < m.Set:
		k := value()
		v := Value(id)
		w.rec.Invoke(id, Set, []string{k}, v)
		w.done(id, c.Set(ctx, k, []byte(v), 0), nil)
	case n < m.Set+m.Get:
		k := anyKey()
		w.rec.Invoke(id, Get, []string{k}, "")
		v, err := c.Get(ctx, k)
		w.done(id, err, v)
	case n < m.Set+m.Get+m.Delete:
		k := anyKey()
		if w.newOnly != nil && k[0] == 'k' && c == w.cur && c.Migrating() {
			c = w.newOnly
		}
		w.rec.Invoke(id, Delete, []string{k}, "")
		w.done(id, c.Delete(ctx, k), nil)
	case n < m.Set+m.Get+m.Delete+m.Incr:
		if len(w.counters) == 0 {
			return
		}
		k := w.counters[rng.IntN(len(w.counters))]
		w.rec.Invoke(id, Incr, []string{k}, "")
		v, err := c.Incr(ctx, k, 1)
		w.done(id, err, []byte(strconv.FormatInt(v, 10)))
	case n < m.Set+m.Get+m.Delete+m.Incr+m.GetMulti:
		perm := rng.Perm(len(w.keys))
		keys := make([]string, min(4, len(perm)))
		for i := range keys {
			keys[i] = w.keys[perm[i]]
		}
		w.rec.Invoke(id, GetMulti, keys, "")
		vals, err := c.GetMulti(ctx, keys)
		hits := make(map[string]string, len(vals))
		for k, v := range vals {
			hits[k] = string(v)
		}
		st := OK
		if err != nil {
			st = Failed
		}
		w.rec.Complete(id, st, nil, hits, err)
	default:
		k := value()
		w.rec.Invoke(id, GetOrLoad, []string{k}, "")
		v, err := c.GetOrLoad(ctx, k, 0, func(context.Context) ([]byte, error) {
			lid := OpID{Proc: w.cfg.Proc, Incarnation: w.cfg.Incarnation, Goroutine: -1, Seq: w.loadSeq.Add(1)}
			lv := Value(lid)
			w.rec.Invoke(lid, Load, []string{k}, lv)
			w.loads.Store(lv, lid)
			return []byte(lv), nil
		})
		if err == nil {
			if lid, ok := w.loads.LoadAndDelete(string(v)); ok {
				w.rec.Complete(lid.(OpID), Maybe, nil, nil, nil)
			}
		}
		w.done(id, err, v)
	}
}

// done records the end of a call: a read's value when v is not nil.
func (w *worker) done(id OpID, err error, v []byte) {
	switch {
	case errors.Is(err, client.ErrCacheMiss):
		w.rec.Complete(id, Miss, nil, nil, nil)
	case err != nil:
		w.rec.Complete(id, Failed, nil, nil, err)
	case v != nil:
		s := string(v)
		w.rec.Complete(id, OK, &s, nil, nil)
	default:
		w.rec.Complete(id, OK, nil, nil, nil)
	}
}

// sweepAt runs one Sweep at at, recorded as an event.
func (w *worker) sweepAt(ctx context.Context, at time.Time) {
	if !waitUntil(ctx, at) {
		return
	}
	start := time.Now().UnixNano()
	st, err := w.cur.Sweep(ctx, client.SweepOptions{})
	detail := fmt.Sprintf("%+v", st)
	if err != nil {
		detail += " error: " + err.Error()
	}
	w.rec.Fault(Fault{Kind: Sweep, Target: fmt.Sprintf("p%d", w.cfg.Proc), Detail: detail, Start: start, End: time.Now().UnixNano()})
}

func (w *worker) stats() WorkerStats {
	s := WorkerStats{Proc: w.cfg.Proc, Incarnation: w.cfg.Incarnation, Ops: w.ops.Load()}
	for _, c := range []*client.Client{w.old, w.cur} {
		if c == nil {
			continue
		}
		for _, h := range c.Health() {
			s.Downs += h.Downs
			s.Dropped += h.Dropped
			s.Missed += h.Missed
		}
	}
	t := w.cur.Stats().MigrationTotals
	s.Backfills, s.BackfillsSkipped, s.DualWriteErrors, s.SweepCopied = t.Backfills, t.BackfillsSkipped, t.DualWriteErrors, t.SweepCopied
	s.FallbackHits, s.FallbackMisses = t.FallbackHits, t.FallbackMisses
	return s
}
