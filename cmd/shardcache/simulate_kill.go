package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
	"github.com/shardcache/shardcache/ring"
)

// simulate --kill: a node's death and return (sim.Config.Kill), under
// FailOpen alone, with a gutter pool, and with replicas.

// killSpec is --kill NODE@STEP[-STEP].
type killSpec struct {
	node     string
	at, back int // back 0: the node does not come back
}

// parseKill parses --kill's value and checks it against the nodes and the
// steps of the run.
func parseKill(s string, from []ring.Node, steps int) (killSpec, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("--kill %s: "+format, append([]any{s}, args...)...)
	}
	i := strings.LastIndexByte(s, '@')
	if i <= 0 {
		return killSpec{}, bad("want NODE@STEP or NODE@STEP-STEP, such as d@20-50")
	}
	k := killSpec{node: strings.TrimSpace(s[:i])}
	at, back, ranged := strings.Cut(s[i+1:], "-")
	var err error
	if k.at, err = strconv.Atoi(strings.TrimSpace(at)); err != nil {
		return k, bad("the kill step %q is not a number", at)
	}
	if ranged {
		if k.back, err = strconv.Atoi(strings.TrimSpace(back)); err != nil {
			return k, bad("the return step %q is not a number", back)
		}
	}
	names := make([]string, len(from))
	found := false
	for j, n := range from {
		names[j] = n.Name
		if n.Name == "" {
			names[j] = n.Addr
		}
		found = found || names[j] == k.node
	}
	switch {
	case !found:
		return k, bad("no node %q in --from (%s)", k.node, strings.Join(names, ", "))
	case len(from) < 2:
		return k, bad("%s is the only node", k.node)
	case k.at < 1 || k.at >= steps:
		return k, bad("the kill step %d is out of range: want 1..%d (steps before and after it, of --steps %d)", k.at, steps-1, steps)
	case ranged && k.back <= k.at:
		return k, bad("the return step %d is not after the kill step %d", k.back, k.at)
	case ranged && k.back >= steps:
		return k, bad("the return step %d is out of range: want %d..%d (a step after it, of --steps %d)", k.back, k.at+1, steps-1, steps)
	}
	return k, nil
}

// killConfig checks the flags of a kill run and sets them in cfg, whose
// other fields config has set.
func (f *simFlags) killConfig(set map[string]bool, cfg *sim.Config) error {
	if f.kill == "" {
		if set["kill"] {
			return errors.New("--kill: empty; want NODE@STEP or NODE@STEP-STEP")
		}
		for _, name := range []string{"gutter", "gutter-ttl", "replicas"} {
			if set[name] {
				return fmt.Errorf("--%s is a kill run's: give --kill", name)
			}
		}
		return nil
	}
	for _, c := range []struct{ flag, why string }{
		{"redis", "the simulator cannot stop and restart real servers: --kill runs on the embedded ones"},
		{"memcached", "the simulator cannot stop and restart real servers: --kill runs on the embedded ones"},
		{"to", "a kill run has no reshard: the clients use the ring of --from"},
		{"reshard-at", "with --kill the steady state is the steps before the kill"},
		{"expiry-wave", "one scenario at a time"},
		{"from-kind", "a kill run is on the ring of --from"},
	} {
		if set[c.flag] {
			return fmt.Errorf("--%s: not with --kill (%s)", c.flag, c.why)
		}
	}
	k, err := parseKill(f.kill, cfg.From, f.steps)
	if err != nil {
		return err
	}
	cfg.Kill, cfg.ReshardAt, cfg.ReturnAt = k.node, k.at, k.back
	cfg.To, cfg.Modes = cfg.From, nil
	if set["modes"] {
		for _, name := range strings.Split(f.modes, ",") {
			m, err := sim.ParseKillMode(name)
			if err != nil {
				return fmt.Errorf("--modes: %q: with --kill, want failopen, gutter or replicas", strings.TrimSpace(name))
			}
			if slices.Contains(cfg.KillModes, m) {
				return fmt.Errorf("--modes: %v twice", m)
			}
			cfg.KillModes = append(cfg.KillModes, m)
		}
	} else {
		cfg.KillModes = slices.Clone(sim.KillModes)
	}
	if slices.Contains(cfg.KillModes, sim.KillGutter) {
		switch {
		case f.gutter < 1 || f.gutter > 64:
			return fmt.Errorf("--gutter %d: want 1..64 gutter nodes", f.gutter)
		case f.gutterTTL <= 0:
			return fmt.Errorf("--gutter-ttl %v: want > 0", f.gutterTTL)
		}
		cfg.Gutter, cfg.GutterTTL = f.gutter, f.gutterTTL
	} else {
		for _, name := range []string{"gutter", "gutter-ttl"} {
			if set[name] {
				return fmt.Errorf("--%s: the gutter mode is not in --modes", name)
			}
		}
	}
	if !slices.Contains(cfg.KillModes, sim.KillReplicas) {
		if set["replicas"] {
			return errors.New("--replicas: the replicas mode is not in --modes")
		}
		return nil
	}
	if most := min(client.MaxReplicas, len(cfg.From)); f.replicas < 2 || f.replicas > most {
		return fmt.Errorf("--replicas %d: want 2..%d (at most %d, client.MaxReplicas, and the %s of --from)",
			f.replicas, most, client.MaxReplicas, count(len(cfg.From), "node", "nodes"))
	}
	cfg.Replicas = f.replicas
	return nil
}

// killSteps are the steps a kill run's table prints besides every nth:
// around the kill and the return, and each mode's recovery.
func killSteps(res *sim.Result) []int {
	cfg := &res.Config
	steps := []int{cfg.ReshardAt - 1, cfg.ReshardAt, cfg.ReshardAt + 1}
	if cfg.ReturnAt > 0 {
		steps = append(steps, cfg.ReturnAt-1, cfg.ReturnAt, cfg.ReturnAt+1)
	}
	for _, m := range res.Modes {
		steps = append(steps, m.Kill.OutagePeakDBStep, m.Kill.RecoveredStep)
	}
	return steps
}

// describeKill is describe for a kill run: what dies, when, and the
// workload.
func describeKill(res *sim.Result, f *simFlags) string {
	cfg := &res.Config
	when := fmt.Sprintf("dies at step %d", cfg.ReshardAt)
	if cfg.ReturnAt > 0 {
		when += fmt.Sprintf(", returns empty at step %d (%s later)", cfg.ReturnAt, fmtOffset(time.Duration(cfg.ReturnAt-cfg.ReshardAt)*cfg.Step, cfg.Step))
	}
	guard := ""
	if cfg.LoadLimit > 0 {
		guard = fmt.Sprintf(", load limit %d per step", loadBudget(cfg))
	}
	// Short enough for the chart's title: the gutter's settings are in its
	// legend, and in the text after the table.
	return fmt.Sprintf("%s of %s %s\n%s (Zipf s=%g v=%g, %s without expiry), %s per %v step, %s writes, TTL %v%s, seed %d",
		cfg.Kill, count(len(cfg.From), "node", ""), when,
		count(cfg.Keys, "key", ""), cfg.ZipfS, cfg.ZipfV, pct(cfg.NoTTL, 0), count(cfg.Requests, "request", ""), cfg.Step,
		pct(max(cfg.WriteRatio, 0), 1), cfg.TTL, guard, f.seed)
}

// writeKill prints a kill run's step table and summary: the hit rate and
// the database's load through the outage and after the return, per mode.
func writeKill(w io.Writer, res *sim.Result, f *simFlags) {
	cfg := &res.Config
	writeModeSteps(w, res, f, func(i int) string {
		switch {
		case i == cfg.ReshardAt:
			return "← " + cfg.Kill + " dies"
		case i == cfg.ReturnAt && cfg.ReturnAt > 0:
			return "← " + cfg.Kill + " returns, empty"
		}
		return ""
	})
	fmt.Fprintln(w)
	tw := newTable(w, tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tsteady hit\tsteady DB\t(max)\toutage hit\tof steady\toutage peak\t(step)\tof steady\treturn low\t(step)\treturn peak\t(step)\tof steady\t99% of steady\t ")
	for _, m := range res.Modes {
		k := m.Kill
		row := fmt.Sprintf("%s\t%s\t%.0f\t(%d)\t%s\t%s\t%d\t(%d)\t×%.2f\t", m.Name, pct(m.SteadyHitRate, 1), m.SteadyDBLoad, m.SteadyPeakDBLoad,
			pct(k.OutageHitRate, 1), pct(k.OutageHitRate/m.SteadyHitRate, 1), k.OutagePeakDBLoad, k.OutagePeakDBStep, float64(k.OutagePeakDBLoad)/m.SteadyDBLoad)
		if cfg.ReturnAt == 0 {
			row += "-\t\t-\t\t\t-\t "
		} else {
			back := "not in the run"
			if k.RecoveredStep >= 0 {
				back = fmt.Sprintf("step %d (+%s)", k.RecoveredStep, fmtOffset(time.Duration(k.RecoveredStep-cfg.ReturnAt)*cfg.Step, cfg.Step))
			}
			row += fmt.Sprintf("%s\t(%d)\t%d\t(%d)\t×%.2f\t%s\t ", pct(k.ReturnMinHitRate, 1), k.ReturnMinHitStep,
				k.ReturnPeakDBLoad, k.ReturnPeakDBStep, float64(k.ReturnPeakDBLoad)/m.SteadyDBLoad, back)
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	fmt.Fprintln(w, "DB is the database's load per step: loads after misses, plus writes. Steady: the steps before the kill. The")
	fmt.Fprintln(w, "outage hit rate is the mean over its steps after the first, which holds the calls made before the breaker")
	fmt.Fprintln(w, "held the node down and, with a gutter, its first misses; its peak is from the kill to the return. The")
	fmt.Fprintln(w, "return's low and peak are from the return on, and the last column the first step back at 99% of steady.")
	if len(res.Modes) > 0 {
		k := res.Modes[0].Kill
		fmt.Fprintf(w, "%s holds %s of the keys and %s of the requests: FailOpen's outage hit rate is about steady × (1 − %s).\n",
			cfg.Kill, pct(k.Keys, 1), pct(k.Requests, 1), pct(k.Requests, 1))
	}
	for _, m := range res.Modes {
		k := m.Kill
		switch m.KillMode {
		case sim.KillFailOpen:
			fmt.Fprintf(w, "failopen: FailOpen answered %s's reads with misses and dropped its writes (Health: Missed %d, Dropped %d).\n", cfg.Kill, k.Missed, k.Dropped)
		case sim.KillGutter:
			fmt.Fprintf(w, "gutter: %s took %s for %s (Health.Guttered), every TTL capped at %v.\n",
				count(cfg.Gutter, "gutter node", ""), count(k.Guttered, "call", ""), cfg.Kill, cfg.GutterTTL)
		case sim.KillReplicas:
			fmt.Fprintf(w, "replicas: every key on %d nodes (Options.Replicas, with FailOpen), read from the next while %s was down; %s missed %s (Health.ReplicaMissed), replayed as deletes before it served again.\n",
				cfg.Replicas, cfg.Kill, cfg.Kill, count(k.ReplicaMissed, "write", ""))
		}
		if cfg.ReturnAt > 0 {
			fmt.Fprintf(w, "%s: the client held %s up %v (wall time) after its restart", m.Name, cfg.Kill, k.UpAfter.Round(100*time.Microsecond))
			if m.KillMode == sim.KillGutter || m.KillMode == sim.KillReplicas {
				fmt.Fprint(w, ", its hints replayed")
			}
			fmt.Fprintln(w, "; the run waited for it.")
		}
		if cfg.LoadLimit > 0 {
			fmt.Fprintf(w, "%s: the load limit throttled %s (%s of them); peak loads %d in a step, the limit %d.\n",
				m.Name, count(m.Total.Throttled, "read", ""), pct(float64(m.Total.Throttled)/float64(max(m.Total.Reads, 1)), 2), peakLoads(m), loadBudget(cfg))
		}
		if callers := m.Total.Errors - m.Total.CacheErrors; callers > 0 {
			fmt.Fprintf(w, "%s: %s returned an error to its caller.\n", m.Name, count(callers, "request", ""))
		}
		if m.Total.CacheErrors > 0 {
			fmt.Fprintf(w, "%s: %s around GetOrLoad's loads failed (LoadStats.CacheErrors; the callers got their values", m.Name,
				count(m.Total.CacheErrors, "cache read or store", "cache reads or stores"))
			if m.KillMode == sim.KillFailOpen {
				fmt.Fprintf(w, ": with FailOpen, the store of each value loaded for %s counts as one", cfg.Kill)
			}
			fmt.Fprintln(w, ").")
		}
		if m.Total.Stale > 0 {
			fmt.Fprintf(w, "%s: %s returned a value older than the database's.\n", m.Name, count(m.Total.Stale, "read", ""))
		}
	}
	fmt.Fprintln(w, "The breaker runs on the wall clock: the first calls to the dead node fail before it trips, in the kill step,")
	fmt.Fprintln(w, "and at the return the run waits for the client to hold the node up; in production the probe finds it within")
	fmt.Fprintln(w, "ProbeInterval × up to 20 (10s by default) of its return.")
}

// killJSON is a kill run's part of the --json output.
type killJSON struct {
	Node          string  `json:"node"`
	At            int     `json:"at"`
	ReturnAt      int     `json:"return_at,omitempty"`
	KeysShare     float64 `json:"keys_share"`
	RequestsShare float64 `json:"requests_share"`
	Gutter        int     `json:"gutter,omitempty"`
	GutterTTL     float64 `json:"gutter_ttl_seconds,omitempty"`
	Replicas      int     `json:"replicas,omitempty"`
}

// killModeJSON is a kill run mode's part of the --json output.
type killModeJSON struct {
	OutageHitRate     float64 `json:"outage_hit_rate"`
	OutageHitOfSteady float64 `json:"outage_hit_of_steady"`
	OutagePeakDBLoad  int64   `json:"outage_peak_db_load"`
	OutagePeakDBStep  int     `json:"outage_peak_db_step"`
	OutagePeakOfStdy  float64 `json:"outage_peak_of_steady"`
	ReturnMinHitRate  float64 `json:"return_min_hit_rate"`
	ReturnMinHitStep  int     `json:"return_min_hit_step"`
	ReturnPeakDBLoad  int64   `json:"return_peak_db_load"`
	ReturnPeakDBStep  int     `json:"return_peak_db_step"`
	RecoveredStep     int     `json:"recovered_step"`
	UpAfter           float64 `json:"up_after_seconds"`
	Guttered          int64   `json:"guttered"`
	Dropped           int64   `json:"dropped"`
	Missed            int64   `json:"missed"`
	ReplicaMissed     int64   `json:"replica_missed"`
	CallerErrors      int64   `json:"caller_errors"`
	CacheErrors       int64   `json:"cache_errors"`
}

// killJSONOf returns the kill run's JSON parts, nil in any other run.
func killJSONOf(res *sim.Result) *killJSON {
	cfg := &res.Config
	if cfg.Kill == "" {
		return nil
	}
	k := &killJSON{Node: cfg.Kill, At: cfg.ReshardAt, ReturnAt: cfg.ReturnAt, Gutter: cfg.Gutter, GutterTTL: cfg.GutterTTL.Seconds(), Replicas: cfg.Replicas}
	if len(res.Modes) > 0 {
		k.KeysShare, k.RequestsShare = res.Modes[0].Kill.Keys, res.Modes[0].Kill.Requests
	}
	return k
}

func killModeJSONOf(res *sim.Result, m sim.ModeResult) *killModeJSON {
	if res.Config.Kill == "" {
		return nil
	}
	k := m.Kill
	return &killModeJSON{
		OutageHitRate: k.OutageHitRate, OutageHitOfSteady: k.OutageHitRate / m.SteadyHitRate,
		OutagePeakDBLoad: k.OutagePeakDBLoad, OutagePeakDBStep: k.OutagePeakDBStep, OutagePeakOfStdy: float64(k.OutagePeakDBLoad) / m.SteadyDBLoad,
		ReturnMinHitRate: k.ReturnMinHitRate, ReturnMinHitStep: k.ReturnMinHitStep,
		ReturnPeakDBLoad: k.ReturnPeakDBLoad, ReturnPeakDBStep: k.ReturnPeakDBStep, RecoveredStep: k.RecoveredStep,
		UpAfter: k.UpAfter.Seconds(), Guttered: k.Guttered, Dropped: k.Dropped, Missed: k.Missed, ReplicaMissed: k.ReplicaMissed,
		CallerErrors: m.Total.Errors - m.Total.CacheErrors, CacheErrors: m.Total.CacheErrors,
	}
}
