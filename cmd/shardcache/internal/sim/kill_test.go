package sim

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/shardcache/shardcache/ring"
)

// kill is a node's death short enough for -race: d of 8 nodes dies at step
// 8 and returns empty at step 20 of 40, 1000 keys, 500 requests a step, a
// gutter TTL of 6 steps.
func kill() Config {
	return Config{
		Keys: 1000, ZipfV: 40, Requests: 500,
		TTL: 5 * time.Minute, Steps: 40, ReshardAt: 8, Workers: 4, Seed: 1,
		Kill: "d", ReturnAt: 20, GutterTTL: time.Minute,
	}
}

// outageLoad is r's mean database load over the outage's steps after its
// first.
func outageLoad(r ModeResult, cfg Config) float64 {
	sum := 0.0
	for _, s := range r.Steps[cfg.ReshardAt+1 : cfg.ReturnAt] {
		sum += float64(s.DBLoad())
	}
	return sum / float64(cfg.ReturnAt-cfg.ReshardAt-1)
}

// TestKill: while d is dead, FailOpen loses d's share of the requests from
// the hit rate, and the database takes them; with a gutter node the hit
// rate after the outage's first step stays within 5% of steady and the
// database's peak, and its load after that step, well below FailOpen's;
// with every key on 2 nodes (Replicas) the hit rate does not dip, in the
// kill step either, nor at the return, and the database's load stays
// steady. Once d is back (empty) all recover. No caller sees an error
// after the breaker trips (with replicas, none at all), and no read is
// stale.
func TestKill(t *testing.T) {
	res, err := Run(context.Background(), kill())
	if err != nil {
		t.Fatal(err)
	}
	cfg := res.Config
	m := map[KillMode]ModeResult{}
	for _, r := range res.Modes {
		m[r.KillMode] = r
		k := r.Kill
		t.Logf("%-8s steady hit %.3f DB %.0f (max %d); outage hit %.3f (%.3f of steady), peak %d at %d, load after its first step %.0f; return: min hit %.3f at %d, peak %d, recovered at %d, up after %v; guttered %d; errors %d (%d loaded through)",
			r.Name, r.SteadyHitRate, r.SteadyDBLoad, r.SteadyPeakDBLoad, k.OutageHitRate, k.OutageHitRate/r.SteadyHitRate, k.OutagePeakDBLoad, k.OutagePeakDBStep,
			outageLoad(r, cfg), k.ReturnMinHitRate, k.ReturnMinHitStep, k.ReturnPeakDBLoad, k.RecoveredStep, k.UpAfter, k.Guttered, r.Total.Errors, r.Total.CacheErrors)
		if r.Total.Stale != 0 {
			t.Errorf("%s: %d stale reads", r.Name, r.Total.Stale)
		}
		// Callers see errors only before the breaker holds d down, in the
		// kill step.
		for i, s := range r.Steps {
			if callers := s.Errors - s.CacheErrors; callers != 0 && i != cfg.ReshardAt {
				t.Errorf("%s: %d errors returned to callers at step %d", r.Name, callers, i)
			}
		}
		if k.Keys < 0.05 || k.Keys > 0.25 || k.Requests < 0.05 || k.Requests > 0.25 {
			t.Errorf("%s: d holds %.3f of the keys, %.3f of the requests; want about an eighth", r.Name, k.Keys, k.Requests)
		}
		// Back empty, d's keys miss at once, then load again: recovered
		// (99% of steady) before the run ends, and steady at its end.
		last := 0.0
		for _, s := range r.Steps[cfg.Steps-5:] {
			last += s.HitRate() / 5
		}
		if k.RecoveredStep < cfg.ReturnAt || last < 0.98*r.SteadyHitRate {
			t.Errorf("%s: recovered at step %d, the last steps' hit rate %.3f (steady %.3f): want it back", r.Name, k.RecoveredStep, last, r.SteadyHitRate)
		}
	}
	open, gutter, repl := m[KillFailOpen], m[KillGutter], m[KillReplicas]
	// FailOpen: d's requests miss, the others hit as before.
	want := open.SteadyHitRate * (1 - open.Kill.Requests)
	if math.Abs(open.Kill.OutageHitRate-want) > 0.03 {
		t.Errorf("failopen: outage hit rate %.3f, want about steady × (1 − d's %.3f of the requests) = %.3f", open.Kill.OutageHitRate, open.Kill.Requests, want)
	}
	if open.Kill.Missed == 0 || open.Kill.Guttered != 0 || gutter.Kill.Guttered == 0 || gutter.Kill.Missed != 0 {
		t.Errorf("Health of d: failopen missed %d, guttered %d; gutter missed %d, guttered %d", open.Kill.Missed, open.Kill.Guttered, gutter.Kill.Missed, gutter.Kill.Guttered)
	}
	if r := gutter.Kill.OutageHitRate / gutter.SteadyHitRate; r < 0.95 {
		t.Errorf("gutter: outage hit rate %.3f of steady, want at least 0.95", r)
	}
	// The gutter's first step misses each of d's keys once; after it the
	// gutter holds them.
	excess := func(peak float64, r ModeResult) float64 { return peak - r.SteadyDBLoad }
	if e, o := excess(float64(gutter.Kill.OutagePeakDBLoad), gutter), excess(float64(open.Kill.OutagePeakDBLoad), open); e > 2*o/3 {
		t.Errorf("database peaks over the steady load: gutter %.0f, failopen %.0f; want the gutter's at most 2/3 of failopen's", e, o)
	}
	if e, o := excess(outageLoad(gutter, cfg), gutter), excess(outageLoad(open, cfg), open); e > o/3 {
		t.Errorf("database load over the steady load after the outage's first step: gutter %.0f, failopen %.0f; want the gutter's at most 1/3 of failopen's", e, o)
	}
	checkReplicasKill(t, repl, open, cfg)
}

// checkReplicasKill checks the replicas mode of a kill run against
// FailOpen's, which dips: the hit rate of every step from the kill on,
// the kill step and the return's included, within what a steady step
// strays by chance (4σ of its binomial hit rate) of 99% of steady, their
// means at 99%; no error at all, to a caller or around a load; the
// database's excess over its steady load at most a tenth of FailOpen's.
func checkReplicasKill(t *testing.T, repl, open ModeResult, cfg Config) {
	t.Helper()
	if repl.Name != "replicas" || open.Name != "failopen" {
		t.Fatalf("modes %q and %q; want replicas and failopen", repl.Name, open.Name)
	}
	steady := repl.SteadyHitRate
	noise := 4 * math.Sqrt(steady*(1-steady)/float64(cfg.Requests))
	for i, s := range repl.Steps[cfg.ReshardAt:] {
		if h := s.HitRate(); h < recovered*steady-noise {
			t.Errorf("replicas: hit rate %.3f at step %d; want at least 99%% of steady %.3f, less %.3f", h, cfg.ReshardAt+i, steady, noise)
		}
	}
	mean := func(from, to int) float64 {
		sum := 0.0
		for _, s := range repl.Steps[from:to] {
			sum += s.HitRate()
		}
		return sum / float64(to-from)
	}
	if o, r := mean(cfg.ReshardAt, cfg.ReturnAt), mean(cfg.ReturnAt, cfg.Steps); o < recovered*steady || r < recovered*steady {
		t.Errorf("replicas: mean hit rate %.3f through the outage, %.3f after the return; want 99%% of steady %.3f", o, r, steady)
	}
	if open.Kill.OutageHitRate >= recovered*open.SteadyHitRate {
		t.Errorf("failopen: outage hit rate %.3f, steady %.3f: no dip to compare with", open.Kill.OutageHitRate, open.SteadyHitRate)
	}
	if repl.Total.Errors != 0 || repl.Total.CacheErrors != 0 || repl.Kill.Missed != 0 || repl.Kill.ReplicaMissed == 0 {
		t.Errorf("replicas: %d errors (%d around loads), Health of d: missed %d, replica missed %d; want no error, d's missed writes counted",
			repl.Total.Errors, repl.Total.CacheErrors, repl.Kill.Missed, repl.Kill.ReplicaMissed)
	}
	load := func(r ModeResult, from, to int) float64 {
		sum := 0.0
		for _, s := range r.Steps[from:to] {
			sum += float64(s.DBLoad())
		}
		return sum/float64(to-from) - r.SteadyDBLoad
	}
	if e, o := load(repl, cfg.ReshardAt, cfg.ReturnAt), load(open, cfg.ReshardAt, cfg.ReturnAt); e > o/10 {
		t.Errorf("database load over the steady load through the outage: replicas %.1f, failopen %.1f; want the replicas' at most a tenth of failopen's", e, o)
	}
}

// TestKillConfig: a kill run's settings without a kill, or out of range,
// are refused with ErrBadConfig.
func TestKillConfig(t *testing.T) {
	from := DefaultFrom()
	for name, c := range map[string]Config{
		"unknown node":       {Kill: "z"},
		"return at the kill": {Kill: "d", ReshardAt: 20, ReturnAt: 20},
		"return before":      {Kill: "d", ReshardAt: 20, ReturnAt: 10},
		"return at the end":  {Kill: "d", Steps: 40, ReshardAt: 20, ReturnAt: 40},
		"a reshard too":      {Kill: "d", From: from, To: DefaultTo()},
		"the only node":      {Kill: "a", From: from[:1]},
		"real servers":       {Kill: "d", Servers: make([]string, 8)},
		"and a wave":         {Kill: "d", ExpiryWave: 5},
		"a placement":        {Kill: "d", FromPlacement: func(n []ring.Node) (ring.Locator, error) { return ring.New(n) }},
		"gutter, no mode":    {Kill: "d", KillModes: []KillMode{KillFailOpen}, Gutter: 2},
		"gutter TTL, none":   {Kill: "d", KillModes: []KillMode{KillFailOpen}, GutterTTL: time.Second},
		"negative gutter":    {Kill: "d", Gutter: -1},
		"negative TTL":       {Kill: "d", GutterTTL: -time.Second},
		"replicas, no mode":  {Kill: "d", KillModes: []KillMode{KillFailOpen}, Replicas: 2},
		"one replica":        {Kill: "d", Replicas: 1},
		"replicas over max":  {Kill: "d", Replicas: 5},
		"replicas over from": {Kill: "a", From: DefaultFrom()[:3], Replicas: 4},
		"replicas, no kill":  {Replicas: 2},
		"mode twice":         {Kill: "d", KillModes: []KillMode{KillGutter, KillGutter}},
		"unknown mode":       {Kill: "d", KillModes: []KillMode{5}},
		"return, no kill":    {ReturnAt: 30},
		"gutter, no kill":    {Gutter: 1},
		"modes, no kill":     {KillModes: []KillMode{KillGutter}},
	} {
		if _, err := Run(context.Background(), c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", name, err)
		}
	}
	for _, k := range KillModes {
		if got, err := ParseKillMode(k.String()); err != nil || got != k {
			t.Errorf("ParseKillMode(%v) = %v, %v", k, got, err)
		}
	}
	if _, err := ParseKillMode("ring"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("ParseKillMode(ring): %v", err)
	}
}
