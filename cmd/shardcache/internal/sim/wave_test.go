package sim

import (
	"context"
	"errors"
	"testing"
	"time"
)

// wave is an expiry wave short enough for -race: 20 hot keys of 500,
// a Zipf steep enough that most processes read each of them in a step, 4
// processes, expiring at step 3 of 5; loads slow enough that the step's
// reads all arrive within one.
func wave() Config {
	return Config{
		Keys: 500, ZipfV: 1, Requests: 500, WriteRatio: -1,
		TTL: 5 * time.Minute, Steps: 5, ReshardAt: 3,
		Seed: 1, ExpiryWave: 20, Processes: 4, LoadTime: 100 * time.Millisecond,
		Loadings: []Loading{LoadPlain, LoadLease, LoadSWR},
	}
}

// TestExpiryWave: when the wave's keys expire together, plain GetOrLoad
// loads each once per process that reads it, a lease once for the fleet
// (the others wait, so the hit rate falls), and StaleWhileRevalidate once
// for the fleet in the background while every read is answered: the
// database's peak with it far below the plain run's, and the hit rate
// steady.
func TestExpiryWave(t *testing.T) {
	res, err := Run(context.Background(), wave())
	if err != nil {
		t.Fatal(err)
	}
	cfg := res.Config
	m := map[Loading]ModeResult{}
	for _, r := range res.Modes {
		m[r.Loading] = r
		t.Logf("%-9s steady DB %.0f (max %d), peak %d at step %d; hit steady %.3f, min %.3f at %d; errors %d",
			r.Name, r.SteadyDBLoad, r.SteadyPeakDBLoad, r.PeakDBLoad, r.PeakDBStep, r.SteadyHitRate, r.MinHitRate, r.MinHitStep, r.Total.Errors)
		if r.Total.Errors != 0 || r.Total.Stale != 0 {
			t.Errorf("%s: %d errors, %d stale reads", r.Name, r.Total.Errors, r.Total.Stale)
		}
	}
	plain, lease, swr := m[LoadPlain], m[LoadLease], m[LoadSWR]
	at := cfg.ReshardAt
	if plain.WaveKeys != cfg.ExpiryWave || plain.WaveReaders < 2*plain.WaveKeys {
		t.Fatalf("the wave's step read %d of its %d keys, by %d processes in all: want every key, by several processes", plain.WaveKeys, cfg.ExpiryWave, plain.WaveReaders)
	}
	// Plain: a load per process that reads a key, if its read arrives
	// within the first process's load; half of them, for a loaded machine.
	extra := func(r ModeResult) float64 { return float64(r.Steps[at].DBLoad()) - r.SteadyDBLoad }
	if plain.PeakDBStep != at || extra(plain) < float64(plain.WaveReaders)/2 {
		t.Errorf("plain: peak %d at step %d, %.0f over the steady load; want the wave's step %d, and at least half of its %d readers", plain.PeakDBLoad, plain.PeakDBStep, extra(plain), at, plain.WaveReaders)
	}
	// With a lease or SWR: one load per key for the fleet, give or take
	// the step's usual misses (the steady state's spread).
	spread := 2*float64(plain.SteadyPeakDBLoad) - plain.SteadyDBLoad
	for _, r := range []ModeResult{lease, swr} {
		if d := extra(r) - float64(r.WaveKeys); d < -spread || d > spread {
			t.Errorf("%s: %.0f loads over the steady state at the wave's step, want its %d keys (±%.0f)", r.Name, extra(r), r.WaveKeys, spread)
		}
		// The ratio the run allows: plain's peak had its readers each
		// loaded, this one each key once; at least half that way down.
		ideal := (r.SteadyDBLoad + float64(r.WaveKeys)) / (plain.SteadyDBLoad + float64(plain.WaveReaders))
		if ratio := PeakRatio(r, plain); ratio > (1+ideal)/2 {
			t.Errorf("%s: the database's peak %d is %.2f of plain's %d, want at most %.2f (the run's ideal %.2f)", r.Name, r.PeakDBLoad, ratio, plain.PeakDBLoad, (1+ideal)/2, ideal)
		}
	}
	t.Logf("the wave: %d keys, %d readers; the database's peak, swr against plain: %.3f; lease %.3f", plain.WaveKeys, plain.WaveReaders, PeakRatio(swr, plain), PeakRatio(lease, plain))
	// Served stale: the hit rate holds through the wave; with a lease alone
	// the waiters miss.
	for _, r := range []ModeResult{swr} {
		if r.MinHitRate < r.SteadyHitRate-0.01 {
			t.Errorf("%s: hit rate %.3f at step %d, steady %.3f: want it held", r.Name, r.MinHitRate, r.MinHitStep, r.SteadyHitRate)
		}
	}
	if lease.MinHitStep != cfg.ReshardAt || lease.MinHitRate > lease.SteadyHitRate-0.05 {
		t.Errorf("lease: hit rate low %.3f at step %d, steady %.3f: want the wave's misses", lease.MinHitRate, lease.MinHitStep, lease.SteadyHitRate)
	}
}

// TestExpiryWaveConfig: a wave's settings without a wave, or out of range,
// are refused with ErrBadConfig.
func TestExpiryWaveConfig(t *testing.T) {
	for name, c := range map[string]Config{
		"negative wave":      {ExpiryWave: -1},
		"wave over the keys": {Keys: 10, ExpiryWave: 11},
		"processes, no wave": {Processes: 3},
		"load time, no wave": {LoadTime: time.Millisecond},
		"loadings, no wave":  {Loadings: []Loading{LoadSWR}},
		"negative processes": {ExpiryWave: 5, Processes: -1},
		"negative load time": {ExpiryWave: 5, LoadTime: -time.Millisecond},
		"negative swr":       {ExpiryWave: 5, StaleWhileRevalidate: -time.Second},
		"loading twice":      {ExpiryWave: 5, Loadings: []Loading{LoadSWR, LoadSWR}},
		"unknown loading":    {ExpiryWave: 5, Loadings: []Loading{7}},
	} {
		if _, err := Run(context.Background(), c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", name, err)
		}
	}
	if _, err := ParseLoading("stale"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("ParseLoading(stale): %v", err)
	}
	for _, l := range Loadings {
		if got, err := ParseLoading(l.String()); err != nil || got != l {
			t.Errorf("ParseLoading(%v) = %v, %v", l, got, err)
		}
	}
}
