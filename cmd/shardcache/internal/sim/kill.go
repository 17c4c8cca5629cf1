package sim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

// A node's death (Config.Kill): there is no reshard, every client runs on
// the ring of From, and the From node named Kill dies at the start of step
// ReshardAt: its embedded server is closed, with every connection to it, and
// dials to it are refused. With ReturnAt it comes back empty at the start of
// that step (miniredis Restart, after a flush), at the same address. Each
// mode of a kill run is a KillMode: what the client does with a node the
// breaker holds down, or, with replicas, with a member of a replica set.
//
// The breaker and its probe run on the wall clock, which in a run on the
// simulated one moves a few milliseconds a step: the clients get
// killProbeInterval, so that the probe finds the node back at once, and at
// the return step the run waits (at most killUpWait) until the client holds
// the node up again before the step's requests, so the node is back for all
// of that step. In production the probe finds it within ProbeInterval times
// up to ProbeBackoffCap (10s by default) of its return. The kill step's
// first calls to the dead node fail before the breaker holds it down
// (client.DefaultFailureThreshold in a row): they are counted as errors,
// and which requests they are depends on the scheduler, so that step varies
// a little from run to run.

// KillMode is how the clients of a kill run treat the dead node.
type KillMode int

// KillModes, in the order they are reported.
const (
	KillFailOpen KillMode = iota // Options.FailOpen: its keys read as misses, loaded from the database
	KillGutter                   // FailOpen and Options.Gutter: its keys cached on a gutter node meanwhile
	KillReplicas                 // FailOpen and Options.Replicas: every key on Config.Replicas nodes, read from another
)

// KillModes lists every kill mode.
var KillModes = []KillMode{KillFailOpen, KillGutter, KillReplicas}

// String returns the mode's name: "failopen", "gutter" or "replicas".
func (k KillMode) String() string {
	switch k {
	case KillFailOpen:
		return "failopen"
	case KillGutter:
		return "gutter"
	case KillReplicas:
		return "replicas"
	}
	return "KillMode(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText encodes the mode as its name.
func (k KillMode) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// ParseKillMode returns the kill mode named s, case-insensitively;
// "fail-open" is accepted too.
func ParseKillMode(s string) (KillMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "failopen", "fail-open":
		return KillFailOpen, nil
	case "gutter":
		return KillGutter, nil
	case "replicas":
		return KillReplicas, nil
	}
	return 0, fmt.Errorf("%w: unknown kill mode %q (want failopen, gutter or replicas)", ErrBadConfig, s)
}

// The breaker's settings in a kill run: a probe every few milliseconds of
// wall time, and the longest wait for the client to see the node back.
const (
	killProbeInterval = 2 * time.Millisecond
	killUpWait        = 10 * time.Second
)

// KillResult is what a kill run measured in one mode, around the outage:
// the steady state (ModeResult.SteadyHitRate, SteadyDBLoad) is the steps
// before the kill.
type KillResult struct {
	// Keys and Requests are the dead node's share of the keys and of the
	// requests (its keys' Zipf weight) as their only or first node: what
	// FailOpen loses.
	Keys, Requests float64
	// OutageHitRate is the mean hit rate over the outage's steps after its
	// first (the kill step alone when there is no other), where the first
	// holds the calls that failed before the breaker tripped and, with a
	// gutter, its first misses. OutagePeakDBLoad is the highest database
	// load from the kill to the return, at OutagePeakDBStep.
	OutageHitRate    float64
	OutagePeakDBLoad int64
	OutagePeakDBStep int
	// ReturnMinHitRate and ReturnPeakDBLoad are the lowest hit rate and the
	// highest load from the return on (the node is back empty), at their
	// steps; RecoveredStep is the first step from the return whose hit rate
	// is back to 99% of the steady one, -1 if none is. All -1 without a
	// return.
	ReturnMinHitRate float64
	ReturnMinHitStep int
	ReturnPeakDBLoad int64
	ReturnPeakDBStep int
	RecoveredStep    int
	// UpAfter is the wall time from the restart until the client held the
	// node up again (its probe, and the hints of the gutter or the
	// replica replayed).
	UpAfter time.Duration
	// Guttered, Dropped, Missed and ReplicaMissed are the client's Health
	// of the dead node: the calls sent to the gutter, the writes FailOpen
	// dropped, the reads it answered with a miss, and with replicas the
	// writes the node missed (hinted, replayed as deletes before it served
	// again).
	Guttered, Dropped, Missed, ReplicaMissed int64
}

// recovered is the share of the steady hit rate that counts as recovered.
const recovered = 0.99

// killed returns the node of nodes that cfg.Kill names, by name or, for a
// node without one, by address.
func (c *Config) killed(nodes []ring.Node) (ring.Node, bool) {
	for _, n := range nodes {
		if n.Name == c.Kill || n.Name == "" && n.Addr == c.Kill {
			return n, true
		}
	}
	return ring.Node{}, false
}

// runKill runs the whole workload in kill mode k on cl: the node dies at
// step ReshardAt and returns at ReturnAt.
func runKill(ctx context.Context, cfg *Config, w *workload, k KillMode, cl *cluster, progress func()) (ModeResult, error) {
	keys := w.keys("")
	res := ModeResult{Mode: ModeRing, Name: k.String(), KillMode: k, Steps: make([]Step, cfg.Steps)}
	victim, _ := cfg.killed(cl.from) // init checked it is there
	server := cl.servers[victim.Addr]
	opts := baseOptions(cfg, cl)
	opts.Nodes = cl.from
	opts.FailOpen = true // with replicas: a write the live replicas took is acknowledged
	opts.ProbeInterval = killProbeInterval
	switch k {
	case KillReplicas:
		opts.Replicas = cfg.Replicas
	case KillGutter:
		for i := range cfg.Gutter {
			addr, err := cl.start()
			if err != nil {
				return res, fmt.Errorf("embedded gutter server: %w", err)
			}
			opts.Gutter = append(opts.Gutter, ring.Node{Name: "gutter-" + strconv.Itoa(i+1), Addr: addr})
		}
		opts.GutterTTL = cfg.GutterTTL
	}
	r, err := cfg.ring(cl.from)
	if err != nil {
		return res, err
	}
	for id, key := range keys {
		if r.Locate(key).Addr == victim.Addr {
			res.Kill.Keys++
			res.Kill.Requests += w.prob[id]
		}
	}
	res.Kill.Keys /= float64(len(keys))

	m, err := startMode(ctx, cfg, w, opts, keys)
	if err != nil {
		return res, err
	}
	defer m.c.Close()
	c := m.c
	err = m.run(ctx, cl, &res, progress, func(i int) error {
		switch {
		case i == cfg.ReshardAt:
			server.stop()
		case i == cfg.ReturnAt && cfg.ReturnAt > 0:
			if err := server.restart(); err != nil {
				return fmt.Errorf("restart of %s: %w", victim.Name, err)
			}
			up, err := waitUp(ctx, c, victim)
			if err != nil {
				return err
			}
			res.Kill.UpAfter = up
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if h, ok := health(c, victim); ok {
		res.Kill.Guttered, res.Kill.Dropped, res.Kill.Missed, res.Kill.ReplicaMissed = h.Guttered, h.Dropped, h.Missed, h.ReplicaMissed
	}
	res.summarize(cfg.ReshardAt)
	res.summarizeKill(cfg)
	return res, nil
}

// health returns c's health of node n.
func health(c *client.Client, n ring.Node) (client.NodeHealth, bool) {
	for _, h := range c.Health() {
		if h.Node.Addr == n.Addr {
			return h, true
		}
	}
	return client.NodeHealth{}, false
}

// waitUp waits until c holds n up, at most killUpWait, and returns how
// long that took.
func waitUp(ctx context.Context, c *client.Client, n ring.Node) (time.Duration, error) {
	start := time.Now()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		if h, ok := health(c, n); ok && !h.Down {
			return time.Since(start), nil
		}
		if time.Since(start) > killUpWait {
			return 0, fmt.Errorf("%s restarted, but the client still held it down after %v", n.Name, killUpWait)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

// summarizeKill computes r.Kill's figures from r.Steps; summarize must
// have run.
func (r *ModeResult) summarizeKill(cfg *Config) {
	k := &r.Kill
	end := len(r.Steps)
	if cfg.ReturnAt > 0 {
		end = cfg.ReturnAt
	}
	from := cfg.ReshardAt + 1
	if from >= end {
		from = cfg.ReshardAt
	}
	sum := 0.0
	for _, s := range r.Steps[from:end] {
		sum += s.HitRate()
	}
	k.OutageHitRate = sum / float64(end-from)
	k.OutagePeakDBLoad, k.OutagePeakDBStep = peakDB(r.Steps, cfg.ReshardAt, end)
	k.ReturnMinHitRate, k.ReturnMinHitStep = -1, -1
	k.ReturnPeakDBLoad, k.ReturnPeakDBStep = -1, -1
	k.RecoveredStep = -1
	if cfg.ReturnAt == 0 {
		return
	}
	k.ReturnMinHitRate = 2
	for i := cfg.ReturnAt; i < len(r.Steps); i++ {
		h := r.Steps[i].HitRate()
		if h < k.ReturnMinHitRate {
			k.ReturnMinHitRate, k.ReturnMinHitStep = h, i
		}
		if k.RecoveredStep < 0 && h >= recovered*r.SteadyHitRate {
			k.RecoveredStep = i
		}
	}
	k.ReturnPeakDBLoad, k.ReturnPeakDBStep = peakDB(r.Steps, cfg.ReturnAt, len(r.Steps))
}

// peakDB returns the highest database load of steps[from:to], and its step.
func peakDB(steps []Step, from, to int) (int64, int) {
	peak, at := int64(-1), -1
	for i := from; i < to; i++ {
		if l := steps[i].DBLoad(); l > peak {
			peak, at = l, i
		}
	}
	return peak, at
}

// checkKill checks a kill run's settings, and that a resharding has none.
func (c *Config) checkKill() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, args...)...)
	}
	if c.Kill == "" {
		if c.ReturnAt != 0 || len(c.KillModes) > 0 || c.Gutter != 0 || c.GutterTTL != 0 || c.Replicas != 0 {
			return bad("ReturnAt, KillModes, Gutter, GutterTTL and Replicas are a kill run's: set Kill")
		}
		return nil
	}
	var names []string
	for _, n := range c.From {
		names = append(names, cmp.Or(n.Name, n.Addr))
	}
	switch _, ok := c.killed(c.From); {
	case !ok:
		return bad("Kill %q: no such node in From (%s)", c.Kill, strings.Join(names, ", "))
	case len(c.From) < 2:
		return bad("Kill %q: the only node of From", c.Kill)
	case !slices.Equal(c.To, c.From):
		return bad("a kill run has no reshard: To must be From, or empty")
	case c.ExpiryWave > 0:
		return bad("Kill and ExpiryWave: one scenario at a time")
	case c.FromPlacement != nil:
		return bad("a kill run is on the ring of From: no FromPlacement")
	case c.Servers != nil:
		return bad("Kill needs embedded servers: a real server cannot be stopped and restarted by the simulator")
	case c.ReturnAt != 0 && (c.ReturnAt <= c.ReshardAt || c.ReturnAt >= c.Steps):
		return bad("ReturnAt %d (want %d..%d: after the kill at step %d, with a step after it)", c.ReturnAt, c.ReshardAt+1, c.Steps-1, c.ReshardAt)
	case c.Gutter < 0 || c.Gutter > 64:
		return bad("Gutter %d (want 1..64 nodes)", c.Gutter)
	case c.Gutter > 0 && !slices.Contains(c.KillModes, KillGutter):
		return bad("Gutter %d without the gutter mode", c.Gutter)
	case c.GutterTTL != 0 && !slices.Contains(c.KillModes, KillGutter):
		return bad("GutterTTL %v without the gutter mode", c.GutterTTL)
	case c.GutterTTL < 0:
		return bad("GutterTTL %v (want > 0)", c.GutterTTL)
	case c.Replicas != 0 && !slices.Contains(c.KillModes, KillReplicas):
		return bad("Replicas %d without the replicas mode", c.Replicas)
	case slices.Contains(c.KillModes, KillReplicas) && (c.Replicas < 2 || c.Replicas > maxReplicas(len(c.From))):
		return bad("Replicas %d (want 2..%d: at most client.MaxReplicas and the %s)", c.Replicas, maxReplicas(len(c.From)), count(len(c.From), "node", "nodes"))
	}
	for i, k := range c.KillModes {
		if k < KillFailOpen || k > KillReplicas {
			return bad("unknown kill mode %v", k)
		}
		if slices.Contains(c.KillModes[:i], k) {
			return bad("kill mode %v twice", k)
		}
	}
	return nil
}

// maxReplicas is the most replicas a kill run over n nodes may keep.
func maxReplicas(n int) int { return min(client.MaxReplicas, n) }
