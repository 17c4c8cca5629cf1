package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"

	"github.com/shardcache/shardcache/cmd/shardcache/internal/balance"
	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
	"github.com/shardcache/shardcache/ring"
)

// runMemorySimulation runs simulate's memory scenario (--memory): the
// fleet of --from, as is and re-weighted by balance's proposal.
func runMemorySimulation(ctx context.Context, f *simFlags, set map[string]bool, stdout, stderr io.Writer) int {
	const cmd = "simulate"
	for _, name := range []string{"to", "redis", "memcached", "modes", "load-limit", "svg", "from-kind", "kill", "gutter", "gutter-ttl"} {
		if set[name] {
			return badInput(stderr, cmd, "--%s: not with --memory (the memory scenario runs the --from fleet on model servers)", name)
		}
	}
	if !set["memory"] {
		return badInput(stderr, cmd, "--value-size: only with --memory")
	}
	from := sim.DefaultFrom()
	if set["from"] {
		var err error
		if from, err = parseNodes(f.from); err != nil {
			return badInput(stderr, cmd, "--from: %v", err)
		}
	}
	r, err := ring.New(from, ring.WithVnodes(max(f.vnodes, 1)))
	if err != nil {
		return badInput(stderr, cmd, "--from: %v", err)
	}
	limits, err := parseLimits(f.memory, r.Nodes())
	if err != nil {
		return badInput(stderr, cmd, "--memory: %v", err)
	}
	if f.valueSize < 0 {
		return badInput(stderr, cmd, "--value-size %d: want 0 or more", f.valueSize)
	}
	mc := sim.MemoryConfig{
		Config: sim.Config{
			From: from, Vnodes: f.vnodes, Equalize: f.equalize, Keys: f.keys, ZipfS: f.zipfS, ZipfV: f.zipfV,
			Requests: f.requests, WriteRatio: f.writes, Steps: f.steps, ReshardAt: f.reshardAt, Seed: f.seed,
		},
		Limits: limits, ValueSize: f.valueSize,
	}
	if f.writes == 0 {
		mc.WriteRatio = -1
	}
	var bar *progressbar.ProgressBar
	if !f.quiet {
		bar = newBar(stderr, int64(max(f.steps, 1)), "simulate", "steps")
		mc.Progress = func(done, _ int) { bar.Set(done) }
	}
	res, err := sim.RunMemory(ctx, mc)
	if bar != nil {
		bar.Finish()
	}
	switch {
	case errors.Is(err, sim.ErrBadConfig):
		return badInput(stderr, cmd, "%v", err)
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "shardcache simulate: interrupted")
		return exitFail
	case err != nil:
		return failed(stderr, cmd, err)
	}
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(memoryJSON(res)); err != nil {
			return failed(stderr, cmd, err)
		}
		return exitOK
	}
	writeMemorySimulation(stdout, res, f.every)
	return exitOK
}

// parseLimits reads --memory: comma-separated NAME=SIZE, and at most one
// bare SIZE for the nodes not named.
func parseLimits(s string, nodes []ring.Node) (map[string]int64, error) {
	limits := map[string]int64{}
	var rest int64
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		name, size, named := strings.Cut(item, "=")
		if !named {
			size = name
		}
		b, err := parseSize(size)
		if err != nil {
			return nil, err
		}
		switch {
		case !named && rest != 0:
			return nil, fmt.Errorf("%q: two sizes for the nodes not named", item)
		case !named:
			rest = b
		case !ringHas(nodes, strings.TrimSpace(name)):
			return nil, fmt.Errorf("%q: no node %q in --from", item, strings.TrimSpace(name))
		default:
			limits[strings.TrimSpace(name)] = b
		}
	}
	for _, n := range nodes {
		if _, ok := limits[n.Name]; !ok {
			if rest == 0 {
				return nil, fmt.Errorf("no limit for node %s (give NAME=SIZE, or a bare SIZE for the nodes not named)", n.Name)
			}
			limits[n.Name] = rest
		}
	}
	return limits, nil
}

func ringHas(nodes []ring.Node, name string) bool {
	for _, n := range nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}

// sizeUnits are the units parseSize reads, case-insensitively.
var sizeUnits = []struct {
	suffix string
	bytes  float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"b", 1},
}

// parseSize reads a size in bytes: a number, with or without a unit (B,
// KB, MB, GB: powers of 1000; KiB, MiB, GiB: of 1024), above 0.
func parseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range sizeUnits {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.bytes
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v*mult >= 1) || math.IsInf(v, 0) || v*mult > 1<<50 {
		return 0, fmt.Errorf("size %q: want a number of bytes above 0, such as 64MiB, 1.5GB or 4096", s)
	}
	return int64(v * mult), nil
}

// writeMemorySimulation prints the memory scenario's steps and nodes.
func writeMemorySimulation(w io.Writer, res *sim.MemoryResult, every int) {
	cfg := &res.Config
	limits := make([]string, 0, len(res.AsIs.Nodes))
	for _, n := range res.AsIs.Nodes {
		limits = append(limits, n.Node.Name+"="+balance.Bytes(float64(n.Limit)))
	}
	fmt.Fprintf(w, "Memory: %s, limits %s (model servers, LRU)\n", count(len(res.AsIs.Nodes), "node", ""), strings.Join(limits, ", "))
	fmt.Fprintf(w, "%s of %d-byte values without expiry (Zipf s=%g v=%g), %s per step, %s writes, seed %d\n",
		count(cfg.Keys, "key", ""), cfg.ValueSize, cfg.ZipfS, cfg.ZipfV, count(cfg.Requests, "request", ""), pct(max(cfg.WriteRatio, 0), 1), cfg.Seed)
	fmt.Fprintf(w, "Re-weighted at step %d with shardcache balance's proposal from the servers' usage then: %s\n",
		cfg.ReshardAt, formatNodes(res.Proposal.Weighted()))
	fmt.Fprintf(w, "(memory over limit max/mean %.3f → %.3f projected; %s of the keys move, each to its new node)\n\n",
		res.Proposal.Skew, res.Proposal.NewSkew, pct(res.Moved, 1))

	tw := newTable(w, tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tas is: hit\tevictions\tre-weighted: hit\tevictions\t ")
	for i := range res.AsIs.Steps {
		if i%every != 0 && i != cfg.ReshardAt && i != cfg.ReshardAt-1 && i != len(res.AsIs.Steps)-1 {
			continue
		}
		a, b := res.AsIs.Steps[i], res.Reweighted.Steps[i]
		mark := " "
		if i == cfg.ReshardAt {
			mark = " ← re-weighted"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\n", i, pct(a.HitRate(), 1), sum(a.Evictions), pct(b.HitRate(), 1), sum(b.Evictions), mark)
	}
	tw.Flush()

	fmt.Fprintf(w, "\nAt the end (evictions counted from step %d on):\n", cfg.ReshardAt)
	tw = newTable(w, 0)
	fmt.Fprintln(tw, "node\tlimit\tas is: weight\tshare\titems\tof limit\tevictions\tre-weighted: weight\tshare\titems\tof limit\tevictions\t")
	for i, a := range res.AsIs.Nodes {
		b := res.Reweighted.Nodes[i]
		fmt.Fprintf(tw, "%s\t%s\t%g\t%s\t%d\t%s\t%d\t%g\t%s\t%d\t%s\t%d\t\n", a.Node.Name, balance.Bytes(float64(a.Limit)),
			a.Node.Weight, pct(a.Share, 1), a.Items, pct(a.Fill(), 1), a.Evictions,
			b.Node.Weight, pct(b.Share, 1), b.Items, pct(b.Fill(), 1), b.Evictions)
	}
	tw.Flush()
	fa, fb := fills(res.AsIs.Nodes), fills(res.Reweighted.Nodes)
	sa, _ := balance.Skew(fa)
	sb, _ := balance.Skew(fb)
	fmt.Fprintf(w, "Memory over limit, max/mean: %.3f as is, %.3f re-weighted. Hit rate over the last quarter of the steps: %s as is, %s re-weighted.\n",
		sa, sb, pct(res.AsIs.SteadyHitRate, 1), pct(res.Reweighted.SteadyHitRate, 1))
}

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}

func fills(nodes []sim.MemoryNode) []float64 {
	out := make([]float64, len(nodes))
	for i, n := range nodes {
		out[i] = n.Fill()
	}
	return out
}

// memoryJSON is the memory scenario's --json output.
func memoryJSON(res *sim.MemoryResult) any {
	type node struct {
		Name      string  `json:"name"`
		Limit     int64   `json:"limit"`
		Weight    float64 `json:"weight"`
		Share     float64 `json:"share"`
		Items     int64   `json:"items"`
		Bytes     int64   `json:"bytes"`
		Fill      float64 `json:"fill"`
		Evictions int64   `json:"evictions"`
	}
	type step struct {
		HitRate   float64 `json:"hit_rate"`
		Evictions []int64 `json:"evictions"`
	}
	type fleet struct {
		SteadyHitRate float64 `json:"steady_hit_rate"`
		Nodes         []node  `json:"nodes"`
		Steps         []step  `json:"steps"`
	}
	conv := func(f sim.MemoryFleet) fleet {
		out := fleet{SteadyHitRate: f.SteadyHitRate}
		for _, n := range f.Nodes {
			out.Nodes = append(out.Nodes, node{n.Node.Name, n.Limit, n.Node.Weight, n.Share, n.Items, n.Bytes, n.Fill(), n.Evictions})
		}
		for _, s := range f.Steps {
			out.Steps = append(out.Steps, step{s.HitRate(), s.Evictions})
		}
		return out
	}
	cfg := &res.Config
	return struct {
		From       string  `json:"from"`
		Proposed   string  `json:"proposed"`
		Keys       int     `json:"keys"`
		ValueSize  int     `json:"value_size"`
		Steps      int     `json:"steps"`
		ReshardAt  int     `json:"reshard_at"`
		Seed       uint64  `json:"seed"`
		Moved      float64 `json:"moved"`
		Skew       float64 `json:"fill_max_over_mean"`
		Projected  float64 `json:"projected_fill_max_over_mean"`
		AsIs       fleet   `json:"as_is"`
		Reweighted fleet   `json:"reweighted"`
	}{
		From: formatNodes(cfg.From), Proposed: formatNodes(res.Proposal.Weighted()), Keys: cfg.Keys, ValueSize: cfg.ValueSize,
		Steps: cfg.Steps, ReshardAt: cfg.ReshardAt, Seed: cfg.Seed, Moved: res.Moved,
		Skew: res.Proposal.Skew, Projected: res.Proposal.NewSkew,
		AsIs: conv(res.AsIs), Reweighted: conv(res.Reweighted),
	}
}
