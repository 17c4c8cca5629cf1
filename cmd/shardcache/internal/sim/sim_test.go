package sim

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// small is a run short enough for -race: 1000 keys, 40 steps of 500
// requests, a TTL of 30 steps, 8 nodes down to 6 at step 8.
func small() Config {
	return Config{
		Keys: 1000, ZipfV: 40, Requests: 500,
		TTL: 5 * time.Minute, Steps: 40, ReshardAt: 8,
		Workers: 4, Seed: 1,
	}
}

func byMode(t *testing.T, res *Result) map[Mode]ModeResult {
	t.Helper()
	out := map[Mode]ModeResult{}
	for _, m := range res.Modes {
		out[m.Mode] = m
		if m.Total.Errors != 0 || m.Total.Stale != 0 {
			t.Errorf("%v: %d errors, %d stale reads", m.Mode, m.Total.Errors, m.Total.Stale)
		}
	}
	return out
}

// TestRunRanks checks that the modes rank as they should: mod-N far below
// the ring, the dual-ring migration at its steady state.
func TestRunRanks(t *testing.T) {
	res, err := Run(context.Background(), small())
	if err != nil {
		t.Fatal(err)
	}
	m := byMode(t, res)
	modn, rng, dual := m[ModeModN], m[ModeRing], m[ModeDualRing]
	for _, r := range res.Modes {
		t.Logf("%-9v moved %.3f steady %.1f%% min %.1f%% (step %d), DB steady %.0f peak %d (step %d)",
			r.Mode, r.Moved, 100*r.SteadyHitRate, 100*r.MinHitRate, r.MinHitStep, r.SteadyDBLoad, r.PeakDBLoad, r.PeakDBStep)
	}
	// Before the reshard the three are the same run.
	for i := range small().ReshardAt {
		if modn.Steps[i] != rng.Steps[i] || rng.Steps[i] != dual.Steps[i] {
			t.Fatalf("step %d before the reshard differs: %+v %+v %+v", i, modn.Steps[i], rng.Steps[i], dual.Steps[i])
		}
	}
	if s := dual.SteadyHitRate; s < 0.9 {
		t.Errorf("steady hit rate %.3f, want about 0.95", s)
	}
	if math.Abs(modn.Moved-0.75) > 1e-9 || rng.Moved < 0.2 || rng.Moved > 0.3 || dual.Moved != rng.Moved {
		t.Errorf("moved: mod-N %v, ring %v, dual-ring %v", modn.Moved, rng.Moved, dual.Moved)
	}
	if modn.MinHitStep != res.Config.ReshardAt || rng.MinHitStep != res.Config.ReshardAt {
		t.Errorf("lows at steps %d (mod-N) and %d (ring), want the reshard's, %d", modn.MinHitStep, rng.MinHitStep, res.Config.ReshardAt)
	}
	if modn.MinHitRate > 0.7*modn.SteadyHitRate || modn.MinHitRate > rng.MinHitRate-0.15 {
		t.Errorf("mod-N low %.3f, ring low %.3f: mod-N should be far below", modn.MinHitRate, rng.MinHitRate)
	}
	if dual.MinHitRate < 0.95*dual.SteadyHitRate || dual.MinHitRate <= rng.MinHitRate {
		t.Errorf("dual-ring low %.3f, steady %.3f, ring low %.3f: want dual-ring near steady", dual.MinHitRate, dual.SteadyHitRate, rng.MinHitRate)
	}
	if !(modn.PeakDBLoad > rng.PeakDBLoad && rng.PeakDBLoad > dual.PeakDBLoad) || float64(dual.PeakDBLoad) > 1.5*dual.SteadyDBLoad {
		t.Errorf("DB peaks mod-N %d, ring %d, dual-ring %d (steady %.0f)", modn.PeakDBLoad, rng.PeakDBLoad, dual.PeakDBLoad, dual.SteadyDBLoad)
	}
	if dual.Total.FallbackHits == 0 || dual.Backfills == 0 || rng.Total.FallbackHits != 0 {
		t.Errorf("fallback hits: dual-ring %d (backfills %d), ring %d", dual.Total.FallbackHits, dual.Backfills, rng.Total.FallbackHits)
	}
	if got := modn.Total.Reads + modn.Total.Writes; got != int64(40*500) {
		t.Errorf("%d requests, want %d", got, 40*500)
	}
	// Reads and hits come from the client's Stats, loads from the
	// simulation's loader: every read the cache missed loads once, or is
	// throttled, or failed (a timeout of the embedded servers on a loaded
	// machine: the errors also count failed writes).
	for _, r := range res.Modes {
		for i, s := range r.Steps {
			if missed := s.Reads - s.Hits; missed != s.Loads+s.Throttled && (s.Errors == 0 || missed > s.Loads+s.Throttled+s.Errors) {
				t.Fatalf("%v step %d: %d reads, %d hits from Stats, but %d loads, %d throttled, %d errors",
					r.Mode, i, s.Reads, s.Hits, s.Loads, s.Throttled, s.Errors)
			}
		}
	}
}

// TestRunDeterministic checks that a run depends on its seed only, not on
// how many workers run it.
func TestRunDeterministic(t *testing.T) {
	cfg := small()
	cfg.Steps, cfg.ReshardAt, cfg.Requests = 16, 4, 200
	cfg.Modes = []Mode{ModeDualRing, ModeModN}
	var runs [][]ModeResult
	for _, workers := range []int{1, 5} {
		cfg.Workers = workers
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, res.Modes)
	}
	for i := range runs[0] {
		if !slices.Equal(runs[0][i].Steps, runs[1][i].Steps) {
			t.Errorf("%v: 1 worker and 5 workers differ:\n%+v\n%+v", runs[0][i].Mode, runs[0][i].Steps, runs[1][i].Steps)
		}
	}
	cfg.Seed = 2
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(res.Modes[0].Steps, runs[0][0].Steps) {
		t.Error("seeds 1 and 2 gave the same run")
	}
}

// TestPrefillSteady checks that the caches start in their steady state: with
// no reshard in sight, the hit rate does not drift as the run goes on.
func TestPrefillSteady(t *testing.T) {
	cfg := small()
	cfg.Modes = []Mode{ModeRing}
	cfg.Steps, cfg.ReshardAt = 60, 59
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	mean := func(steps []Step) float64 {
		var s Step
		for _, st := range steps {
			s.add(st)
		}
		return s.HitRate()
	}
	steps := res.Modes[0].Steps
	first, last := mean(steps[:20]), mean(steps[39:59]) // step 59 reshards

	t.Logf("hit rate: first 20 steps %.4f, last 20 %.4f", first, last)
	if math.Abs(first-last) > 0.01 {
		t.Errorf("hit rate drifts from %.4f to %.4f: the prefill is not the steady state", first, last)
	}
}

func TestRunBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"only From", func(c *Config) { c.From = DefaultFrom() }},
		{"zipf s", func(c *Config) { c.ZipfS = 1 }},
		{"zipf v", func(c *Config) { c.ZipfV = 0.5 }},
		{"keys", func(c *Config) { c.Keys = -1 }},
		{"requests", func(c *Config) { c.Requests = -5 }},
		{"writes", func(c *Config) { c.WriteRatio = 1 }},
		{"step", func(c *Config) { c.Step = -time.Second }},
		{"ttl", func(c *Config) { c.TTL = -time.Second }},
		{"window", func(c *Config) { c.Window = -time.Second }},
		{"steps", func(c *Config) { c.Steps = 1 }},
		{"reshard at the end", func(c *Config) { c.Steps, c.ReshardAt = 10, 10 }},
		{"workers", func(c *Config) { c.Workers = -1 }},
		{"load limit", func(c *Config) { c.LoadLimit = -1 }},
		{"mode", func(c *Config) { c.Modes = []Mode{7} }},
		{"vnodes", func(c *Config) { c.Vnodes = ring.MaxVnodes + 1 }},
		{"duplicate names", func(c *Config) {
			c.From, c.To = []ring.Node{{Name: "a", Addr: "x:1"}, {Name: "a", Addr: "y:1"}}, DefaultTo()
		}},
		{"server count", func(c *Config) { c.Servers = []string{"127.0.0.1:1"} }},
		{"memcached embedded", func(c *Config) { c.Backend = client.Memcached }},
	} {
		cfg := small()
		tc.mod(&cfg)
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: Run = %v, want ErrBadConfig", tc.name, err)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range Modes {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMode("hash"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("ParseMode(hash) = %v", err)
	}
}

// TestRunCancel checks that a cancelled run stops with the context's error.
func TestRunCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := small()
	cfg.Progress = func(done, total int) {
		if done == 3 {
			cancel()
		}
	}
	if _, err := Run(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}

// TestProgressWork checks that Progress is called once per step of each
// mode, with Work as its total: a progress bar of that total fills as the
// run ends, not when its first mode is done.
func TestProgressWork(t *testing.T) {
	all := small()
	all.Steps, all.ReshardAt, all.Requests = 6, 2, 100
	one := all
	one.Modes = []Mode{ModeRing}
	quickWave := wave()
	quickWave.LoadTime, quickWave.Loadings = time.Millisecond, []Loading{LoadPlain} // one, not the four Modes
	for name, cfg := range map[string]Config{"default modes": all, "one mode": one, "expiry wave": quickWave} {
		var mu sync.Mutex
		calls, maxDone, totals := 0, 0, map[int]bool{}
		cfg.Progress = func(done, total int) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			maxDone = max(maxDone, done)
			totals[total] = true
		}
		work := cfg.Work()
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := len(res.Modes) * res.Config.Steps
		if work != want || calls != want || maxDone != want || len(totals) != 1 || !totals[want] {
			t.Errorf("%s: Work %d, Progress called %d times, up to %d, with totals %v; want %d (%d modes × %d steps) each",
				name, work, calls, maxDone, totals, want, len(res.Modes), res.Config.Steps)
		}
	}
}

// TestRunMemcached runs a short simulation on real memcached servers, in
// real time: 10 steps of 250ms, a TTL of 2s, 4 nodes down to 3. Memcached
// counts TTLs in whole seconds on a clock that ticks once a second, so keys
// expire in waves, whatever the mode: only the reshard step is compared.
func TestRunMemcached(t *testing.T) {
	servers := testserver.Memcached(t, 4)
	cfg := Config{
		From: letterNodes(4), To: letterNodes(3),
		Keys: 300, ZipfV: 10, Requests: 150, Workers: 8, Seed: 1,
		Step: 250 * time.Millisecond, TTL: 2 * time.Second, Steps: 10, ReshardAt: 3,
		Servers: testserver.Addrs(servers), Backend: client.Memcached,
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := byMode(t, res)
	for _, r := range res.Modes {
		t.Logf("%-9v steady %.1f%% min %.1f%% late steps %d", r.Mode, 100*r.SteadyHitRate, 100*r.MinHitRate, r.Late)
		if r.Total.Hits == 0 {
			t.Errorf("%v: no hits", r.Mode)
		}
	}
	at := cfg.ReshardAt
	modn, rng, dual := m[ModeModN].Steps[at].HitRate(), m[ModeRing].Steps[at].HitRate(), m[ModeDualRing].Steps[at].HitRate()
	if !(modn < rng && rng < dual) {
		t.Errorf("hit rates at the reshard: mod-N %.3f, ring %.3f, dual-ring %.3f: want them in this order", modn, rng, dual)
	}
	if m[ModeDualRing].Total.FallbackHits == 0 {
		t.Error("dual-ring: no fallback hits")
	}
}
