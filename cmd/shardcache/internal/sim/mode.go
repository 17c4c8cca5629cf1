package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

// database is the store behind the cache: a version per key, which writes
// bump and cached values carry. Its load is counted in each Step (Loads,
// Writes). Each key is only touched by the worker that owns it, so it needs
// no lock.
type database struct {
	version []uint32
}

// modulo is the mod-N placement of nodes: ring.Hash(key) % N over their
// addresses in the order given, each Weight times.
func modulo(nodes []ring.Node) (*ring.Modulo, error) {
	slots, err := ring.ModuloSlots(nodes)
	if err != nil {
		return nil, err
	}
	return ring.NewModulo(slots, ring.WithModuloHash(ring.ModuloMurmur3), ring.WithModuloHashTag("{}"))
}

// runMode runs the whole workload in one mode on cl, with the keys of
// prefix.
func runMode(ctx context.Context, cfg *Config, w *workload, mode Mode, cl *cluster, prefix string, progress func()) (ModeResult, error) {
	keys := w.keys(prefix)
	res := ModeResult{Mode: mode, Name: mode.String(), Steps: make([]Step, cfg.Steps)}
	opts := baseOptions(cfg, cl)
	var reshard func(*client.Client) error
	if mode == ModeModN {
		from, err := modulo(cl.from)
		if err != nil {
			return res, err
		}
		to, err := modulo(cl.to)
		if err != nil {
			return res, err
		}
		opts.Placement = from
		res.Moved = ring.Compare(from, to).Moved
		reshard = func(c *client.Client) error { return c.ReshardTo(to, 0) }
	} else {
		to, err := cfg.ring(cl.to)
		if err != nil {
			return res, err
		}
		if cfg.FromPlacement != nil {
			from, err := cfg.FromPlacement(cl.from)
			if err != nil {
				return res, err
			}
			opts.Placement = from
			res.Moved = ring.Compare(from, to).Moved
		} else {
			opts.Nodes = cl.from
			from, err := cfg.ring(cl.from)
			if err != nil {
				return res, err
			}
			res.Moved = ring.Moved(from, to)
		}
		switch mode {
		case ModeRing:
			reshard = func(c *client.Client) error { return c.Reshard(cl.to, 0) }
		case ModeDualRing:
			reshard = func(c *client.Client) error { return c.Reshard(cl.to, cfg.Window) }
		case ModeSweep:
			// The sweep runs at the reshard, before the step's requests:
			// in no simulated time, or on real servers delaying that step.
			reshard = func(c *client.Client) error {
				if err := c.Reshard(cl.to, cfg.SweepWindow); err != nil {
					return err
				}
				// Only this mode's keys: on real servers the modes share them.
				s, err := c.Sweep(ctx, client.SweepOptions{Rate: -1, Prefix: prefix})
				res.Swept = s.Copied
				return err
			}
		}
	}
	m, err := startMode(ctx, cfg, w, opts, keys)
	if err != nil {
		return res, err
	}
	defer m.c.Close()
	c := m.c
	err = m.run(ctx, cl, &res, progress, func(i int) error {
		if i != cfg.ReshardAt {
			return nil
		}
		if err := reshard(c); err != nil {
			return fmt.Errorf("reshard: %w", err)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Backfills = c.Stats().MigrationTotals.Backfills
	res.summarize(cfg.ReshardAt)
	return res, nil
}

// prefillTTLs fills the cache with the remaining TTLs of workload.prefill
// (as if the workload had run forever), one SetMulti per remaining TTL.
func prefillTTLs(ctx context.Context, c *client.Client, ttls []time.Duration, keys []string) error {
	byTTL := map[time.Duration]map[string][]byte{}
	for k, ttl := range ttls {
		switch ttl {
		case 0:
			continue
		case noExpiry:
			ttl = 0
		}
		if byTTL[ttl] == nil {
			byTTL[ttl] = map[string][]byte{}
		}
		byTTL[ttl][keys[k]] = []byte("0") // version 0, as the database holds
	}
	for ttl, items := range byTTL {
		if err := c.SetMulti(ctx, items, ttl); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	return nil
}

// baseOptions returns the client options every mode's clients share: the
// ring, the mode's clock and servers, the load limit, the credentials.
func baseOptions(cfg *Config, cl *cluster) client.Options {
	// The modes share the servers (their keys apart by prefix): the
	// nodes one adds hold another's keys.
	opts := client.Options{Backend: cfg.Backend, Vnodes: cfg.Vnodes, Equalize: cfg.Equalize, Now: cl.clock.Now, NewRedisClient: cl.redis,
		SkipEmptyCheck: true}
	if cfg.LoadLimit > 0 {
		// A step's requests all start at its beginning on the simulated
		// clock: a burst of one step's tokens lets through LoadLimit per
		// second of the step, and never waiting is a degraded read.
		opts.LoadLimit = &client.LoadLimit{
			PerSecond: cfg.LoadLimit,
			Burst:     max(int(math.Ceil(cfg.LoadLimit*cfg.Step.Seconds())), 1),
			MaxWait:   -1,
		}
	}
	if cfg.Connect != nil && cfg.Servers != nil {
		cfg.Connect(&opts)
	}
	return opts
}

// run runs every step of the workload on cl, into res.Steps: before(i)
// runs at the start of step i, before its requests (a reshard, a kill).
func (m *modeRun) run(ctx context.Context, cl *cluster, res *ModeResult, progress func(), before func(i int) error) error {
	cfg := m.cfg
	reqs := make([]request, cfg.Requests)
	buckets := make([][]request, cfg.Workers)
	stream := m.w.stream()
	stats := &statsReader{}
	stats.step(m.c.Stats()) // from here on: the prefill is no read
	cl.clock.begin()
	for i := range cfg.Steps {
		if err := before(i); err != nil {
			return err
		}
		stream.next(reqs)
		for b := range buckets {
			buckets[b] = buckets[b][:0]
		}
		for _, r := range reqs {
			b := int(r.key) % cfg.Workers
			buckets[b] = append(buckets[b], r)
		}
		st := m.step(ctx, buckets)
		counted := stats.step(m.c.Stats())
		st.Reads, st.Hits, st.FallbackHits = counted.reads, counted.hits, counted.fallbackHits
		st.Errors += counted.cacheErrors
		st.CacheErrors += counted.cacheErrors
		res.Steps[i] = st
		late, err := cl.clock.advance(ctx, i)
		if err != nil {
			return err
		}
		if late {
			res.Late++
		}
		progress()
	}
	return nil
}

// modeRun is what a mode's workers share.
// startMode makes the client of one mode's run with opts and prefills its
// keys with the workload's TTLs; the caller closes m.c.
func startMode(ctx context.Context, cfg *Config, w *workload, opts client.Options, keys []string) (*modeRun, error) {
	c, err := client.New(opts)
	if err != nil {
		return nil, err
	}
	if err := prefillTTLs(ctx, c, w.prefill(), keys); err != nil {
		c.Close()
		return nil, err
	}
	return &modeRun{cfg: cfg, w: w, c: c, db: &database{version: make([]uint32, cfg.Keys)}, keys: keys}, nil
}

type modeRun struct {
	cfg  *Config
	w    *workload
	c    *client.Client
	db   *database
	keys []string
}

// step runs one step: one worker per bucket, each running its requests in
// order.
func (m *modeRun) step(ctx context.Context, buckets [][]request) Step {
	stats := make([]Step, len(buckets))
	var wg sync.WaitGroup
	for b, reqs := range buckets {
		wg.Go(func() {
			for _, r := range reqs {
				m.do(ctx, r, &stats[b])
			}
		})
	}
	wg.Wait()
	var total Step
	for _, s := range stats {
		total.add(s)
	}
	return total
}

// do runs one request: a read through GetOrLoad, whose loader is the
// database (each call one load), or a write-through.
func (m *modeRun) do(ctx context.Context, r request, st *Step) {
	key := m.keys[r.key]
	if r.write {
		st.Writes++
		m.db.version[r.key]++
		m.set(ctx, r, st)
		return
	}
	loaded := false
	v, err := m.c.GetOrLoad(ctx, key, m.w.ttl(r.key), func(context.Context) ([]byte, error) {
		loaded = true
		return strconv.AppendUint(nil, uint64(m.db.version[r.key]), 10), nil
	}) // reads and hits are counted in the client's Stats: see stats.go
	switch {
	case errors.Is(err, client.ErrLoadThrottled):
		st.Throttled++
	case err != nil:
		st.Errors++
	case loaded:
		st.Loads++
	default:
		if ver, perr := strconv.ParseUint(string(v), 10, 32); perr != nil || uint32(ver) < m.db.version[r.key] {
			st.Stale++
		}
	}
}

// set writes the database's value of r's key to the cache.
func (m *modeRun) set(ctx context.Context, r request, st *Step) {
	v := strconv.AppendUint(nil, uint64(m.db.version[r.key]), 10)
	if err := m.c.Set(ctx, m.keys[r.key], v, m.w.ttl(r.key)); err != nil {
		st.Errors++
	}
}

// summarize computes the steady state before step reshard, and the low and
// peak from it on.
func (r *ModeResult) summarize(reshard int) {
	r.Total = Step{}
	for _, s := range r.Steps {
		r.Total.add(s)
	}
	hits, load := 0.0, 0.0
	r.SteadyPeakDBLoad = 0
	for _, s := range r.Steps[:reshard] {
		hits += s.HitRate()
		load += float64(s.DBLoad())
		r.SteadyPeakDBLoad = max(r.SteadyPeakDBLoad, s.DBLoad())
	}
	r.SteadyHitRate = hits / float64(reshard)
	r.SteadyDBLoad = load / float64(reshard)
	r.MinHitRate, r.MinHitStep = 2, -1
	r.PeakDBLoad, r.PeakDBStep = -1, -1
	for i := reshard; i < len(r.Steps); i++ {
		s := r.Steps[i]
		if h := s.HitRate(); h < r.MinHitRate {
			r.MinHitRate, r.MinHitStep = h, i
		}
		if l := s.DBLoad(); l > r.PeakDBLoad {
			r.PeakDBLoad, r.PeakDBStep = l, i
		}
	}
}
