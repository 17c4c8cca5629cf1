package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

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
// Every kind but the cold reads is over the hot keys (WorkerConfig.Keys)
// and counters:
//
//   - Set, Add (Value if absent), SetMulti (2 to 4 keys, one Value) and
//     CAS (a GetItem, then StoreCAS of a new Value on a hit; Memcached
//     only) write values; Delete deletes a key or a counter, DeleteMulti
//     2 to 4 keys; Touch sets a key's or a counter's TTL to none (every
//     value has none: it changes nothing a read sees).
//   - Incr adds 1 to a counter; Decr adds -1 to one of the counters' second
//     half (the first half only counts up: the counter rules are tighter
//     there).
//   - Get, GetMulti (4 keys), GetOrLoad, GetMultiOrLoad (2 to 4 keys) and
//     RedisGet (a GET through client.RedisDo; Redis only, and not with
//     Replicas, which RedisDo refuses) read; with a near cache, Get and
//     RedisGet read values only (a counter is read by Incr alone: the
//     counter rules allow no staleness).
//   - ColdGet and ColdGetMulti (ColdBatch keys) read the cold keys
//     (WorkerConfig.ColdKeys), which process 0 wrote at its start.
//
// A kind the backend lacks, or cold reads without cold keys, is not drawn.
type Mix struct {
	Set, Get, Delete, Incr, GetMulti, GetOrLoad int
	SetMulti, DeleteMulti, Add, CAS, Touch      int
	Decr, GetMultiOrLoad, RedisGet              int
	ColdGet, ColdGetMulti                       int
}

// DefaultMix is about 30% writes and deletes, 2% touches, 8% counts, the
// rest reads, 5 points of which read cold keys (CAS on Memcached and
// RedisGet on Redis, 2 and 3 points, are drawn on one backend only).
var DefaultMix = Mix{Set: 16, Get: 33, Delete: 6, Incr: 6, GetMulti: 8, GetOrLoad: 7,
	SetMulti: 3, DeleteMulti: 2, Add: 2, CAS: 2, Touch: 2,
	Decr: 2, GetMultiOrLoad: 3, RedisGet: 3,
	ColdGet: 4, ColdGetMulti: 1}

// With loads that expire (ClientConfig.LoadTTL, stale-while-revalidate),
// GetOrLoad and GetMultiOrLoad read loadKeys keys of their own ("l00"...),
// which the other kinds write and read once in loadKeyWrites of their
// picks: rarely enough that a loaded value often outlives its TTL, into
// its refresh window, and often enough that refreshes race writes and
// deletes.
const (
	loadKeys      = 20
	loadKeyWrites = 256
)

// ColdBatch is how many cold keys a ColdGetMulti reads, and the initial
// SetMulti of process 0 writes at once.
const ColdBatch = 50

// ColdKey is the name of cold key i: "cold:0042", apart from the hot keys
// ("k00"...) and the counters ("c0"...).
func ColdKey(i int) string { return fmt.Sprintf("%s%04d", ColdPrefix, i) }

// ColdPrefix begins every cold key's name.
const ColdPrefix = "cold:"

// coldWriter is the goroutine number of the cold keys' writes in an OpID.
const coldWriter = -2

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
	// NearCache, above 0, keeps near copies for that long at most
	// (client.NearCache.MaxAge). Memcached tells no process of another's
	// writes, so the checker's rules hold for a run of one process only.
	NearCache time.Duration
	// StaleWhileRevalidate, above 0, has GetOrLoad and GetMultiOrLoad
	// serve a value up to that long past its TTL while one caller
	// reloads it in the background (client.Options), their loads written
	// with the TTL LoadTTL (which must then be above 0).
	StaleWhileRevalidate, LoadTTL time.Duration
	// Gutter are the addresses of the gutter pool (client.Options.Gutter),
	// its TTLs capped at GutterTTL; none: no gutter.
	Gutter    []string
	GutterTTL time.Duration
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
	// ColdKeys are values ("cold:0000"...) that the first incarnation of
	// process 0 writes once at its start (SetMulti, ColdBatch keys a call,
	// each batch tried up to three times), before the migration, and that
	// every process reads all through the run (Mix.ColdGet,
	// Mix.ColdGetMulti): a key moved by the migration, read as a miss
	// with no cause, is a lost key.
	ColdKeys int
	// WritesCold makes any process write the cold keys at its start, as
	// process 0's first incarnation does: a run's prefill, whose values a
	// node re-added later still holds.
	WritesCold bool
	Mix        Mix
	Seed       uint64
	Client     ClientConfig
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
	cold     []string
	// loadKeys are GetOrLoad's and GetMultiOrLoad's keys in a run with
	// loads that expire (ClientConfig.LoadTTL); see loadKeys.
	loadKeys []string
	mix      []weighted // Mix's kinds the backend has, cumulative
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
	if cfg.Client.LoadTTL > 0 {
		for i := range loadKeys {
			w.loadKeys = append(w.loadKeys, fmt.Sprintf("l%02d", i))
		}
	}
	for i := range cfg.ColdKeys {
		w.cold = append(w.cold, ColdKey(i))
	}
	if cfg.Mix == (Mix{}) {
		w.cfg.Mix = DefaultMix
	}
	w.mix = w.weights()
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
	if len(w.cold) > 0 && (cfg.Proc == 0 && cfg.Incarnation == 0 || cfg.WritesCold) {
		w.writeCold(ctx)
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
		NearCache:            nearCache(c.NearCache),
		StaleWhileRevalidate: c.StaleWhileRevalidate,
		Gutter:               gutterNodes(c.Gutter),
		GutterTTL:            c.GutterTTL,
	}
}

// gutterNodes are the gutter pool's nodes, named g0, g1...
func gutterNodes(addrs []string) []ring.Node {
	var ns []ring.Node
	for i, a := range addrs {
		ns = append(ns, ring.Node{Name: fmt.Sprintf("g%d", i), Addr: a})
	}
	return ns
}

// nearCache is the client's near cache of a ClientConfig.NearCache: none
// for 0.
func nearCache(maxAge time.Duration) *client.NearCache {
	if maxAge <= 0 {
		return nil
	}
	return &client.NearCache{MaxAge: maxAge}
}

// loop runs one goroutine's operations.
func (w *worker) loop(ctx context.Context, g int) {
	rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.cfg.Proc)<<32|uint64(w.cfg.Incarnation)<<16|uint64(g)))
	var seq uint64
	next := func() OpID {
		seq++
		return OpID{Proc: w.cfg.Proc, Incarnation: w.cfg.Incarnation, Goroutine: g, Seq: seq}
	}
	for ctx.Err() == nil {
		c, deadline := w.route(ctx)
		if c == nil {
			continue
		}
		octx, cancel := context.WithDeadline(ctx, deadline)
		w.one(octx, c, rng, next)
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

// opKind is a kind of operation the worker draws (Mix's fields).
type opKind int

const (
	opSet opKind = iota
	opGet
	opDelete
	opIncr
	opGetMulti
	opGetOrLoad
	opSetMulti
	opDeleteMulti
	opAdd
	opCAS
	opTouch
	opDecr
	opGetMultiOrLoad
	opRedisGet
	opColdGet
	opColdGetMulti
)

// weighted is one kind and the weights of those before it and it.
type weighted struct {
	kind opKind
	upTo int
}

// weights lists Mix's kinds that the backend has, with their cumulative
// weights.
func (w *worker) weights() []weighted {
	m := w.cfg.Mix
	redis, cold, counters := w.cfg.Backend != "memcached", len(w.cold) > 0, len(w.counters) > 0
	// RedisDo refuses a replica set: it cannot tell which member a command
	// is for.
	redisDo := redis && w.cfg.Client.Replicas <= 1
	all := []struct {
		kind   opKind
		weight int
		ok     bool
	}{
		{opSet, m.Set, true}, {opGet, m.Get, true}, {opDelete, m.Delete, true},
		{opIncr, m.Incr, counters}, {opGetMulti, m.GetMulti, true}, {opGetOrLoad, m.GetOrLoad, true},
		{opSetMulti, m.SetMulti, true}, {opDeleteMulti, m.DeleteMulti, true}, {opAdd, m.Add, true},
		{opCAS, m.CAS, !redis}, {opTouch, m.Touch, true}, {opDecr, m.Decr, counters},
		{opGetMultiOrLoad, m.GetMultiOrLoad, true}, {opRedisGet, m.RedisGet, redisDo},
		{opColdGet, m.ColdGet, cold}, {opColdGetMulti, m.ColdGetMulti, cold},
	}
	var out []weighted
	total := 0
	for _, k := range all {
		if k.ok && k.weight > 0 {
			total += k.weight
			out = append(out, weighted{k.kind, total})
		}
	}
	return out
}

// draw picks a kind of operation by Mix's weights.
func (w *worker) draw(rng *rand.Rand) opKind {
	if len(w.mix) == 0 {
		return opGet
	}
	n := rng.IntN(w.mix[len(w.mix)-1].upTo)
	for _, k := range w.mix {
		if n < k.upTo {
			return k.kind
		}
	}
	return opGet
}

// pick returns n distinct keys of from, at random.
func pick(rng *rand.Rand, from []string, n int) []string {
	n = min(n, len(from))
	seen := make(map[int]bool, n)
	out := make([]string, 0, n)
	for len(out) < n {
		i := rng.IntN(len(from))
		if !seen[i] {
			seen[i] = true
			out = append(out, from[i])
		}
	}
	return out
}

// one runs one operation (two for CAS) and records it, each with an id of
// next.
func (w *worker) one(ctx context.Context, c *client.Client, rng *rand.Rand, next func() OpID) {
	anyKey := func() string {
		i := rng.IntN(len(w.keys) + len(w.counters))
		if i < len(w.keys) {
			return w.keys[i]
		}
		return w.counters[i-len(w.keys)]
	}
	value := func() string {
		if len(w.loadKeys) > 0 && rng.IntN(loadKeyWrites) == 0 {
			return w.loadKeys[rng.IntN(len(w.loadKeys))]
		}
		return w.keys[rng.IntN(len(w.keys))]
	}
	// A near copy may be behind (CheckOptions.Staleness), which the
	// counter rules do not allow for: with a near cache, reads (Get,
	// RedisDo's GET) are of values alone, and counters read by Incr.
	readKey := anyKey
	if w.cfg.Client.NearCache > 0 {
		readKey = value
	}
	id := next()
	switch w.draw(rng) {
	case opSet:
		k := value()
		v := Value(id)
		w.rec.Invoke(id, Set, []string{k}, v)
		w.done(id, c.Set(ctx, k, []byte(v), 0), nil)
	case opGet:
		k := readKey()
		w.rec.Invoke(id, Get, []string{k}, "")
		v, err := c.Get(ctx, k)
		w.done(id, err, v)
	case opColdGet:
		k := w.cold[rng.IntN(len(w.cold))]
		w.rec.Invoke(id, Get, []string{k}, "")
		v, err := c.Get(ctx, k)
		w.done(id, err, v)
	case opDelete:
		k := anyKey()
		if w.newOnly != nil && k[0] == 'k' && c == w.cur && c.Migrating() {
			c = w.newOnly
		}
		w.rec.Invoke(id, Delete, []string{k}, "")
		w.done(id, c.Delete(ctx, k), nil)
	case opIncr:
		k := w.counters[rng.IntN(len(w.counters))]
		w.rec.Invoke(id, Incr, []string{k}, "")
		v, err := c.Incr(ctx, k, 1)
		w.done(id, err, []byte(strconv.FormatInt(v, 10)))
	case opDecr:
		// The second half of the counters: the first only counts up.
		half := w.counters[len(w.counters)/2:]
		k := half[rng.IntN(len(half))]
		w.rec.Invoke(id, Decr, []string{k}, "")
		v, err := c.Incr(ctx, k, -1)
		w.done(id, err, []byte(strconv.FormatInt(v, 10)))
	case opGetMulti:
		w.getMulti(ctx, c, id, pick(rng, w.keys, 4))
	case opColdGetMulti:
		w.getMulti(ctx, c, id, pick(rng, w.cold, ColdBatch))
	case opGetOrLoad:
		k := value()
		if len(w.loadKeys) > 0 {
			k = w.loadKeys[rng.IntN(len(w.loadKeys))]
		}
		w.rec.Invoke(id, GetOrLoad, []string{k}, "")
		cacheErrs := c.LoadStats().CacheErrors
		v, err := c.GetOrLoad(ctx, k, w.cfg.Client.LoadTTL, func(context.Context) ([]byte, error) {
			lid, lv := w.load(k)
			w.loads.Store(lv, lid)
			return []byte(lv), nil
		})
		if err == nil {
			if lid, ok := w.loads.LoadAndDelete(string(v)); ok {
				st, err := loadStatus(c, cacheErrs)
				w.rec.Complete(lid.(OpID), st, nil, nil, err)
			}
		}
		w.done(id, err, v)
	case opGetMultiOrLoad:
		from := w.keys
		if len(w.loadKeys) > 0 {
			from = w.loadKeys
		}
		w.getMultiOrLoad(ctx, c, id, pick(rng, from, 2+rng.IntN(3)))
	case opSetMulti:
		keys := pick(rng, w.keys, 2+rng.IntN(3))
		v := Value(id)
		items := make(map[string][]byte, len(keys))
		for _, k := range keys {
			items[k] = []byte(v)
		}
		w.rec.Invoke(id, SetMulti, keys, v)
		w.multiDone(id, keys, c.SetMulti(ctx, items, 0))
	case opDeleteMulti:
		keys := pick(rng, w.keys, 2+rng.IntN(3))
		if w.newOnly != nil && c == w.cur && c.Migrating() {
			c = w.newOnly
		}
		w.rec.Invoke(id, DeleteMulti, keys, "")
		w.multiDone(id, keys, c.DeleteMulti(ctx, keys))
	case opAdd:
		k := value()
		v := Value(id)
		w.rec.Invoke(id, Add, []string{k}, v)
		w.condDone(id, c.Add(ctx, k, []byte(v), 0))
	case opCAS:
		k := value()
		w.rec.Invoke(id, GetItem, []string{k}, "")
		it, err := c.GetItem(ctx, k)
		if err == nil && it.Value == nil {
			it.Value = []byte{}
		}
		w.done(id, err, it.Value)
		if err != nil {
			return
		}
		id = next()
		v := Value(id)
		w.rec.Invoke(id, StoreCAS, []string{k}, v)
		w.condDone(id, c.Store(ctx, client.StoreCAS, client.Item{Key: k, Value: []byte(v), CasID: it.CasID}))
	case opTouch:
		k := anyKey()
		w.rec.Invoke(id, Touch, []string{k}, "")
		w.done(id, c.Touch(ctx, k, 0), nil)
	case opRedisGet:
		k := readKey()
		w.rec.Invoke(id, RedisGet, []string{k}, "")
		cmd := redis.NewStringCmd(ctx, "get", k)
		err := c.RedisDo(ctx, k, client.RedisRead, cmd)
		if errors.Is(err, redis.Nil) {
			err = client.ErrCacheMiss
		}
		var v []byte
		if err == nil {
			v = []byte(cmd.Val())
		}
		w.done(id, err, v)
	}
}

// load records the start of a load of key and returns its id and value.
func (w *worker) load(key string) (OpID, string) {
	lid := OpID{Proc: w.cfg.Proc, Incarnation: w.cfg.Incarnation, Goroutine: -1, Seq: w.loadSeq.Add(1)}
	lv := Value(lid)
	// Stored for LoadTTL+StaleWhileRevalidate, its hard TTL (client/refresh.go).
	ttl := w.cfg.Client.LoadTTL
	if ttl > 0 {
		ttl += w.cfg.Client.StaleWhileRevalidate
	}
	w.rec.InvokeTTL(lid, Load, []string{key}, lv, ttl)
	return lid, lv
}

// getMulti runs and records a GetMulti of keys.
func (w *worker) getMulti(ctx context.Context, c *client.Client, id OpID, keys []string) {
	w.rec.Invoke(id, GetMulti, keys, "")
	vals, err := c.GetMulti(ctx, keys)
	w.rec.Complete(id, multiStatus(err), nil, hits(vals), err)
}

// getMultiOrLoad runs and records a GetMultiOrLoad of keys, and each load
// of its loader: as loadStatus says if its value came back, else Failed at
// the call's return (its store, if sent, may still be in a server's
// socket).
func (w *worker) getMultiOrLoad(ctx context.Context, c *client.Client, id OpID, keys []string) {
	w.rec.Invoke(id, GetMultiOrLoad, keys, "")
	cacheErrs := c.LoadStats().CacheErrors
	var mu sync.Mutex
	loaded := make(map[string]OpID)
	lvs := make(map[string]string)
	vals, err := c.GetMultiOrLoad(ctx, keys, w.cfg.Client.LoadTTL, func(_ context.Context, missing []string) (map[string][]byte, error) {
		out := make(map[string][]byte, len(missing))
		mu.Lock()
		defer mu.Unlock()
		for _, k := range missing {
			lid, lv := w.load(k)
			loaded[lv], lvs[lv] = lid, k
			out[k] = []byte(lv)
		}
		return out, nil
	})
	h := hits(vals)
	mu.Lock()
	for lv, lid := range loaded {
		if h[lvs[lv]] == lv {
			st, err := loadStatus(c, cacheErrs)
			w.rec.Complete(lid, st, nil, nil, err)
		} else {
			w.rec.Complete(lid, Failed, nil, nil, errNotReturned)
		}
	}
	mu.Unlock()
	w.rec.Complete(id, multiStatus(err), nil, h, err)
}

// loadStatus is the status of a load whose value its call returned, the
// client's LoadStats.CacheErrors being cacheErrs before the call: Maybe
// (stored or not, before the call returned), or Failed if a cache error
// was counted meanwhile, since the store the client then gave up on (it
// answers with the loaded value all the same) may still be in a server's
// socket and land after a later write or delete, as a failed Set's may.
// The count is the process's: another call's error makes this one Failed
// too, which only weakens the check.
func loadStatus(c *client.Client, cacheErrs int64) (Status, error) {
	if c.LoadStats().CacheErrors != cacheErrs {
		return Failed, errStoreFailed
	}
	return Maybe, nil
}

// errStoreFailed is the error of a load whose call counted a cache error:
// its store may have failed.
var errStoreFailed = errors.New("loaded value returned, its store may have failed")

// errNotReturned is the error of a load whose value its call did not
// return.
var errNotReturned = errors.New("loaded value not returned")

func multiStatus(err error) Status {
	if err != nil {
		return Failed
	}
	return OK
}

func hits(vals map[string][]byte) map[string]string {
	h := make(map[string]string, len(vals))
	for k, v := range vals {
		h[k] = string(v)
	}
	return h
}

// multiDone records the end of a SetMulti or DeleteMulti of keys: failed,
// the keys no *client.NodeError names were acknowledged.
func (w *worker) multiDone(id OpID, keys []string, err error) {
	if err == nil {
		w.rec.Complete(id, OK, nil, nil, nil)
		return
	}
	var acked map[string]string
	if failed, ok := failedKeys(err, keys); ok {
		acked = make(map[string]string)
		for _, k := range keys {
			if !failed[k] {
				acked[k] = AckedKey
			}
		}
	}
	w.rec.Complete(id, Failed, nil, acked, err)
}

// failedKeys returns the keys of keys that the *client.NodeErrors joined
// in err name, false if err holds anything else, or a NodeError names a key
// not in keys: every key may have failed then. (A DeleteMulti under leases
// that fails to clear them returns before it deletes anything, with an
// error that names the lease keys.)
func failedKeys(err error, keys []string) (map[string]bool, bool) {
	failed := make(map[string]bool)
	var walk func(error) bool
	walk = func(err error) bool {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				if !walk(e) {
					return false
				}
			}
			return true
		}
		ne, ok := err.(*client.NodeError)
		if !ok {
			return false
		}
		for _, k := range ne.Keys {
			if !slices.Contains(keys, k) {
				return false
			}
			failed[k] = true
		}
		return true
	}
	return failed, walk(err)
}

// condDone records the end of a conditional write (Add, StoreCAS): refused,
// it wrote nothing.
func (w *worker) condDone(id OpID, err error) {
	switch {
	case errors.Is(err, client.ErrNotStored) || errors.Is(err, client.ErrCASConflict) || errors.Is(err, client.ErrCacheMiss):
		w.rec.Complete(id, NotStored, nil, nil, err)
	default:
		w.done(id, err, nil)
	}
}

// writeCold writes the cold keys, ColdBatch a SetMulti, each batch's
// failed keys again up to twice.
func (w *worker) writeCold(ctx context.Context) {
	var seq uint64
	for i := 0; i < len(w.cold); i += ColdBatch {
		keys := w.cold[i:min(i+ColdBatch, len(w.cold))]
		for try := 0; try < 3 && len(keys) > 0 && ctx.Err() == nil; try++ {
			c, deadline := w.route(ctx)
			if c == nil {
				continue
			}
			seq++
			id := OpID{Proc: w.cfg.Proc, Incarnation: w.cfg.Incarnation, Goroutine: coldWriter, Seq: seq}
			v := Value(id)
			items := make(map[string][]byte, len(keys))
			for _, k := range keys {
				items[k] = []byte(v)
			}
			w.rec.Invoke(id, SetMulti, keys, v)
			octx, cancel := context.WithDeadline(ctx, deadline)
			err := c.SetMulti(octx, items, 0)
			cancel()
			w.multiDone(id, keys, err)
			w.ops.Add(1)
			if err == nil {
				break
			}
			failed, ok := failedKeys(err, keys)
			if !ok {
				continue // all again
			}
			var again []string
			for _, k := range keys {
				if failed[k] {
					again = append(again, k)
				}
			}
			keys = again
		}
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
			s.Guttered += h.Guttered
		}
	}
	st := w.cur.Stats()
	t := st.MigrationTotals
	s.Backfills, s.BackfillsSkipped, s.DualWriteErrors, s.SweepCopied = t.Backfills, t.BackfillsSkipped, t.DualWriteErrors, t.SweepCopied
	s.FallbackHits, s.FallbackMisses = t.FallbackHits, t.FallbackMisses
	s.Stale, s.Refreshes = st.Loads.Stale, st.Loads.Refreshes
	return s
}
