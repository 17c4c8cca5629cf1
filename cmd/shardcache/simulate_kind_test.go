package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
	"github.com/shardcache/shardcache/ring"
)

// TestSimulateFromModulo replays the incident as a mod-N fleet adopting the
// ring: the ring and dual-ring modes start on crc32 % N (gomemcache's
// ServerList) of --from, and the dual-ring migration keeps the hit rate
// while the cut-over loses most of it.
func TestSimulateFromModulo(t *testing.T) {
	// short, smaller: 500 keys, 250 requests a step, 16 steps.
	args := append([]string{"simulate", "--json", "--quiet", "--from-kind", "modulo", "--modes", "ring,dual-ring"}, short...)
	args = append(args, "--steps", "16", "--reshard-at", "4", "--keys", "500", "--requests", "250")
	code, out, errOut := runCmd(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		Modes []struct {
			Mode          string  `json:"mode"`
			KeysMoved     float64 `json:"moved"`
			SteadyHitRate float64 `json:"steady_hit_rate"`
			MinHitRate    float64 `json:"min_hit_rate"`
		} `json:"modes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(res.Modes) != 2 {
		t.Fatalf("%d modes", len(res.Modes))
	}
	// From 8 servers by crc32 % 8 to a ring of 6: the two hash keys
	// independently, so a key stays with probability Σ 1/8 × share after.
	from, _ := (&fromKind{kind: "modulo"}).placement(sim.DefaultFrom(), 0, 0)
	to, _ := ring.New(sim.DefaultTo())
	want := ring.Compare(from, to).Moved
	rng, dual := res.Modes[0], res.Modes[1]
	if math.Abs(rng.KeysMoved-want) > 1e-9 || math.Abs(dual.KeysMoved-want) > 1e-9 {
		t.Errorf("keys moved: ring %v, dual-ring %v; want %v", rng.KeysMoved, dual.KeysMoved, want)
	}
	if rng.MinHitRate > dual.MinHitRate-0.3 || dual.MinHitRate < 0.9*dual.SteadyHitRate {
		t.Errorf("low hit rates: cut-over %.3f, dual-ring %.3f (steady %.3f, %.0f%% of keys moved)",
			rng.MinHitRate, dual.MinHitRate, dual.SteadyHitRate, 100*want)
	}
	code, out, _ = runCmd(t, "simulate", "--quiet", "--from-kind", "modulo", "--modes", "dual-ring",
		"--keys", "100", "--requests", "50", "--steps", "3", "--reshard-at", "1")
	if code != exitOK || !strings.HasPrefix(out, "mod-N (gomemcache's ServerList, hash % N) a,b,c,d,e,f,g,h → a,b,c,d,e,f") {
		t.Errorf("the first line does not say the run starts on mod-N:\n%s", out)
	}
	if code, _, errOut := runCmd(t, "simulate", "--from-kind", "rendezvous", "--from", "a:1*2,b:1", "--to", "a:1"); code != exitUsage || !strings.Contains(errOut, "bad node weight") {
		t.Errorf("rendezvous with a weight: exit %d, %s", code, errOut)
	}
}
