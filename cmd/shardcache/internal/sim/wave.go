package sim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/client"
)

// The expiry wave (Config.ExpiryWave): the most popular keys, loaded
// together (a cold start, or the copies of a resharding), expire together,
// and a fleet of processes misses them at once. Each mode of a wave run is
// a Loading: how the fleet's clients load a miss. There is no reshard:
// every client runs on the ring of From. The fleet is Config.Processes
// clients; a step's requests are dealt to the processes in turn and all
// of them run at once (Workers plays no part), so the processes that want
// a hot key in a step want it together. A load takes Config.LoadTime of
// wall time from the moment every request of its step is under way, in
// which the other processes miss too (if their first reads return within
// it), and counts in the step whose read called it (a background refresh's
// too, which may end after its step). The wave's keys
// are read only (a write drawn for one is a read), or a write would set
// them apart. With a lease the others wait for the winner's value (on the
// wall clock: the simulated one stands still within a step); with
// StaleWhileRevalidate the values are kept Config.StaleWhileRevalidate past
// their TTL and served stale while one process reloads each. A wave run is
// not deterministic: which process reaches a key first, and whether another
// reads it before the value lands, depends on the scheduler.

// Loading is how the clients of an expiry-wave run load a missed key.
type Loading int

// Loadings, in the order they are reported.
const (
	LoadPlain    Loading = iota // GetOrLoad: one load per process that misses
	LoadLease                   // Options.Lease (MetaLeases): one load per key for the fleet, the others wait
	LoadSWR                     // Options.StaleWhileRevalidate: served stale, one background reload per key for the fleet
	LoadSWRLease                // StaleWhileRevalidate and Lease
)

// Loadings lists every loading.
var Loadings = []Loading{LoadPlain, LoadLease, LoadSWR, LoadSWRLease}

// String returns the loading's name: "plain", "lease", "swr" or
// "swr+lease".
func (l Loading) String() string {
	switch l {
	case LoadPlain:
		return "plain"
	case LoadLease:
		return "lease"
	case LoadSWR:
		return "swr"
	case LoadSWRLease:
		return "swr+lease"
	}
	return "Loading(" + strconv.Itoa(int(l)) + ")"
}

// MarshalText encodes the loading as its name.
func (l Loading) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// ParseLoading returns the loading named s, case-insensitively.
func ParseLoading(s string) (Loading, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for _, l := range Loadings {
		if name == l.String() {
			return l, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown loading %q (want plain, lease, swr or swr+lease)", ErrBadConfig, s)
}

// waveLease is the lease of the lease loadings: it outlasts a load, and a
// step's wait for one, on either clock.
const waveLease = 30 * time.Second

// options sets the client options of loading l.
func (l Loading) options(cfg *Config, o *client.Options) {
	if l == LoadLease || l == LoadSWRLease {
		o.Lease, o.MetaLeases = waveLease, true
	}
	if l == LoadSWR || l == LoadSWRLease {
		o.StaleWhileRevalidate = cfg.StaleWhileRevalidate
	}
}

// swr reports whether l serves stale values.
func (l Loading) swr() bool { return l == LoadSWR || l == LoadSWRLease }

// waveKeys returns the wave's keys: the ExpiryWave most popular ones
// written with a TTL.
func (w *workload) waveKeys() map[int32]bool {
	wave := map[int32]bool{}
	for k := 0; k < w.cfg.Keys && len(wave) < w.cfg.ExpiryWave; k++ {
		if !w.noTTL[k] {
			wave[int32(k)] = true
		}
	}
	return wave
}

// waveDB is the database of a wave run: a key's version is read and
// written by the workers of every process.
type waveDB struct {
	version []atomic.Uint32
	loads   []atomic.Int64 // per step: the loads the step's reads called
}

// runWave runs the whole workload with loading l on cl, with the keys of
// prefix.
func runWave(ctx context.Context, cfg *Config, w *workload, l Loading, cl *cluster, prefix string, progress func()) (ModeResult, error) {
	keys := w.keys(prefix)
	res := ModeResult{Mode: ModeRing, Name: l.String(), Loading: l, Steps: make([]Step, cfg.Steps)}
	opts := baseOptions(cfg, cl)
	opts.Nodes = cl.from
	l.options(cfg, &opts)
	clients := make([]*client.Client, cfg.Processes)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	for p := range clients {
		c, err := client.New(opts)
		if err != nil {
			return res, err
		}
		clients[p] = c
	}
	wave := w.waveKeys()
	ttls := w.prefill()
	for k := range wave {
		ttls[k] = time.Duration(cfg.ReshardAt)*cfg.Step - cfg.Step/2 // all run out by the start of step ReshardAt
	}
	if l.swr() {
		for k, ttl := range ttls {
			if ttl > 0 {
				ttls[k] = ttl + cfg.StaleWhileRevalidate // the TTLs are the soft ones
			}
		}
	}
	if err := prefillTTLs(ctx, clients[0], ttls, keys); err != nil {
		return res, err
	}
	// A write-through sets the value with the TTL its loads store it with:
	// Set does not add StaleWhileRevalidate, and a value set with the TTL
	// alone would be in its refresh window at once.
	writeTTL := func(ttl time.Duration) time.Duration {
		if l.swr() && ttl > 0 {
			return ttl + cfg.StaleWhileRevalidate
		}
		return ttl
	}
	db := &waveDB{version: make([]atomic.Uint32, cfg.Keys), loads: make([]atomic.Int64, cfg.Steps)}
	reqs := make([]request, cfg.Requests)
	stream := w.stream()
	stats := make([]statsReader, cfg.Processes)
	for p, c := range clients {
		stats[p].step(c.Stats()) // from here on: the prefill is no read
	}
	cl.clock.begin()
	for i := range cfg.Steps {
		stream.next(reqs)
		stepStats := make([]Step, len(reqs))
		var wg sync.WaitGroup
		step := waveStep{i: i, arrived: make(chan struct{})}
		var waiting atomic.Int64 // the requests not yet under way
		waiting.Store(int64(len(reqs)))
		read := map[[2]int32]bool{} // the wave's keys read at its step, by process
		for j, r := range reqs {
			if wave[r.key] {
				r.write = false
				if i == cfg.ReshardAt {
					read[[2]int32{int32(j % cfg.Processes), r.key}] = true
				}
			}
			c := clients[j%cfg.Processes]
			wg.Go(func() {
				if waiting.Add(-1) == 0 {
					close(step.arrived)
				}
				waveRequest(ctx, cfg, c, db, step, keys[r.key], w.ttl(r.key), writeTTL(w.ttl(r.key)), r, &stepStats[j])
			})
		}
		wg.Wait()
		var st Step
		for _, s := range stepStats {
			st.add(s)
		}
		for p, c := range clients {
			counted := stats[p].step(c.Stats())
			st.Reads += counted.reads
			st.Hits += counted.hits
			st.FallbackHits += counted.fallbackHits
			st.Errors += counted.cacheErrors
			st.CacheErrors += counted.cacheErrors
		}
		res.Steps[i] = st
		if i == cfg.ReshardAt {
			keys := map[int32]bool{}
			for pk := range read {
				keys[pk[1]] = true
			}
			res.WaveKeys, res.WaveReaders = len(keys), len(read)
		}
		late, err := cl.clock.advance(ctx, i)
		if err != nil {
			return res, err
		}
		if late {
			res.Late++
		}
		progress()
	}
	for p, c := range clients {
		c.Close() // waits for the background refreshes
		clients[p] = nil
	}
	for i := range res.Steps {
		res.Steps[i].Loads = db.loads[i].Load()
	}
	res.summarize(cfg.ReshardAt)
	return res, nil
}

// waveStep is the step a request runs in.
type waveStep struct {
	i       int
	arrived chan struct{} // closed once every request of the step is under way
}

// waveRequest runs one request of step through c: a read through
// GetOrLoad with ttl, whose loader is the database, or a write-through
// with writeTTL. A load takes LoadTime from the moment every request of
// its step is under way: all of a step's requests arrive at its start,
// however long the machine takes to start their goroutines.
func waveRequest(ctx context.Context, cfg *Config, c *client.Client, db *waveDB, step waveStep, key string, ttl, writeTTL time.Duration, r request, st *Step) {
	if r.write {
		st.Writes++
		v := strconv.AppendUint(nil, uint64(db.version[r.key].Add(1)), 10)
		if err := c.Set(ctx, key, v, writeTTL); err != nil {
			st.Errors++
		}
		return
	}
	// Stale is older than the database was when the read began: a write
	// running at the same time may or may not be seen.
	before := db.version[r.key].Load()
	v, err := c.GetOrLoad(ctx, key, ttl, func(context.Context) ([]byte, error) {
		db.loads[step.i].Add(1)
		v := strconv.AppendUint(nil, uint64(db.version[r.key].Load()), 10)
		<-step.arrived
		if cfg.LoadTime > 0 {
			time.Sleep(cfg.LoadTime) // the database's latency, in which the others miss too
		}
		return v, nil
	})
	switch {
	case errors.Is(err, client.ErrLoadThrottled):
		st.Throttled++
	case err != nil:
		st.Errors++
	default:
		if ver, perr := strconv.ParseUint(string(v), 10, 32); perr != nil || uint32(ver) < before {
			st.Stale++
		}
	}
}

// PeakRatio returns the database's peak in m against that of base: the
// wave's figure, with StaleWhileRevalidate (m) against plain GetOrLoad
// (base). It is 0 when base had no load at all.
func PeakRatio(m, base ModeResult) float64 {
	if base.PeakDBLoad <= 0 {
		return 0
	}
	return float64(m.PeakDBLoad) / float64(base.PeakDBLoad)
}
