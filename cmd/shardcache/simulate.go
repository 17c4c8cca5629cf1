package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
	"github.com/shardcache/shardcache/ring"
)

const simulateAbout = `Runs a read-heavy cache-aside workload through a change of nodes, in four
modes side by side, each on servers of its own and with the same requests:
  mod-N            hash(key) % N placement, switched at once
  ring             the consistent-hash ring, switched at once
  dual-ring        the ring with a dual-ring migration of one window (the TTL)
  dual-ring+sweep  the ring with a short dual-ring window (--sweep-window) and
                   a sweep at the reshard that copies every moved key
Keys are drawn with Zipf popularity. A read is a GetOrLoad whose loader is the
database: a miss loads the value and stores it with the TTL, or without expiry
for the --no-ttl share of the keys. A write goes to the database and then Sets
the new value (write-through). The cache starts in its steady state.
Each step prints the hit rate and the database load (loads + writes) per mode;
the summary gives the steady state before the reshard, the lowest hit rate and
the peak load after it. --svg writes them as a chart. --load-limit guards the
database (client.Options.LoadLimit): at most that many loads per second, and
the reads refused a load are throttled, counted and left without a value;
which reads get a token depends on the order the workers reach the limiter,
so with a limit the counts vary a little from run to run.

By default the servers are embedded (miniredis) and the clock is simulated:
it jumps one --step after each step, so the default run, 20 minutes of
traffic, takes seconds, and is the same for the same --seed. With --redis or
--memcached the servers are real and so is the clock: each step lasts
--real-step, and the TTL and window shrink in proportion; the modes share the
servers, with keys of their own, and the results vary from run to run; a
server that speaks the other protocol is refused before the run.
Servers that want a password or TLS: --username, --password-file (or the
password in $SHARDCACHE_REDIS_PASSWORD), --tls and the --tls-* flags. With
no flags: 8 nodes down to 6, the collapse the README describes.

With --memory, simulate runs the memory scenario instead: a fleet of nodes
(--from) of different memory limits, where a node that fills evicts its least
recently used keys, as is and re-weighted at --reshard-at with the weights
"shardcache balance" proposes from the servers' usage then; the same reads
and writes, values of --value-size bytes without expiry, on model servers of
those limits (the embedded ones have none). It prints the hit rate and the
evictions step by step, and each node's fill and evictions after. Try
  --from a=h:1,b=h:2,c=h:3,d=h:4 --memory 6MiB,d=1.5MiB
where d, of a quarter of the others' memory, evicts until it is re-weighted.

With --expiry-wave N, simulate runs the expiry wave instead: the N most
popular keys with a TTL expire together at --reshard-at (as after a cold
start, or the copies of a resharding), under a fleet of --processes clients
of their own, every request of a step at once, each load taking --load-time
of wall time; no reshard, the ring of --from. The modes (--modes) are how the
fleet loads: plain (GetOrLoad: a load per process that misses), lease
(Options.Lease: one load per key for the fleet, the others wait), swr
(Options.StaleWhileRevalidate of one TTL: served stale while one process
reloads each key) and swr+lease. A write to a wave key is read instead. The
summary gives each database peak against plain's, as a ratio; how many
processes miss a key together depends on the scheduler, so the figures vary
a little from run to run. Try
  --expiry-wave 50 --zipf-v 1 --keys 5000 --requests 2000 --steps 20 --reshard-at 10
(a steep Zipf: with the default, each hot key is read about twice a step).

With --kill NODE@STEP[-STEP2], simulate runs a node's death instead: the
--from node NODE dies at the start of STEP (its embedded server closed, every
connection with it) and, with -STEP2, comes back empty at the start of STEP2;
no reshard, the ring of --from, embedded servers only. The modes (--modes)
are what the client does while the breaker holds the node down: failopen
(Options.FailOpen: its keys read as misses and load from the database),
gutter (FailOpen and Options.Gutter of --gutter embedded nodes: its reads and
writes go to a gutter node, every TTL capped at --gutter-ttl) and replicas
(FailOpen and Options.Replicas of --replicas: every key on that many
nodes, read from the next while one is down, copied back to it from the
others once it returns), all three by default. The summary gives the hit rate during the outage (after its first
step) against the steady one, the database's peak against the steady load,
and after the return the low, the peak and the first step back at 99% of
the steady hit rate. The breaker runs on the wall clock: its first calls to
the dead node fail in the kill step, and at the return the run waits until
the client holds the node up. The gutter serves a key again only if it is
read again within GutterTTL: in the default workload a key is read about
once in two 10s steps (the hottest twice a step), so the default 10s keeps
few. Try
  --kill d@20-50 --steps 80 --gutter-ttl 1m

With --from-kind other than ring, the ring and dual-ring modes start on that
placement of the --from nodes and move to our ring of the --to nodes, at once
or with a dual-ring migration: --from-kind modulo replays the incident as a
mod-N fleet (gomemcache's ServerList) adopting the ring.

` + fromKindHelp

// simFlags are simulate's command line.
type simFlags struct {
	from, to          string
	vnodes, keys      int
	equalize          float64 // --equalize: the rings' tolerance, 0 classic
	zipfS, zipfV      float64
	requests          int
	writes, noTTL     float64
	step, ttl, window time.Duration
	sweepWindow       time.Duration
	steps, reshardAt  int
	seed              uint64
	workers           int
	loadLimit         float64
	modes             string
	redis, memcached  string
	realStep          time.Duration
	svg               string
	asJSON, quiet     bool
	every             int
	kind              *fromKind
	conn              *connFlags
	memory            string // the memory scenario's limits (simulate_memory.go)
	valueSize         int
	expiryWave        int           // --expiry-wave: the wave scenario's hot keys, 0 none
	processes         int           // --processes: the wave's fleet
	loadTime          time.Duration // --load-time: a wave's load, on the wall clock
	kill              string        // --kill NODE@STEP[-STEP]: a node's death and return (simulate_kill.go)
	gutter            int           // --gutter: the gutter mode's nodes
	gutterTTL         time.Duration // --gutter-ttl
	replicas          int           // --replicas: the replicas mode's R
}

func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("simulate", "Simulate a change of cache nodes under load.", simulateAbout)
	var f simFlags
	d := sim.DefaultConfig()
	fs.StringVar(&f.from, "from", "", "the nodes before the reshard: a node `list` (see below); on embedded servers only the names, weights and distinct addresses matter; with neither --from nor --to, the demo's "+demoFrom)
	fs.StringVar(&f.to, "to", "", "the nodes after the reshard: a node `list`; with neither, the demo's "+demoTo)
	fs.IntVar(&f.vnodes, "vnodes", d.Vnodes, "ring points per unit of weight")
	fs.Float64Var(&f.equalize, "equalize", 0, equalizeUsage)
	fs.IntVar(&f.keys, "keys", d.Keys, "distinct keys")
	fs.Float64Var(&f.zipfS, "zipf-s", d.ZipfS, "Zipf exponent s > 1: key k (0 the most popular) is drawn with probability ∝ (v+k)^-s")
	fs.Float64Var(&f.zipfV, "zipf-v", d.ZipfV, "Zipf offset v >= 1: a larger v flattens the most popular keys")
	fs.IntVar(&f.requests, "requests", d.Requests, "requests per step")
	fs.Float64Var(&f.writes, "writes", d.WriteRatio, "fraction of requests that are writes, in [0, 1)")
	fs.DurationVar(&f.step, "step", d.Step, "simulated time per step")
	fs.DurationVar(&f.ttl, "ttl", d.TTL, "TTL of every cached value")
	fs.Float64Var(&f.noTTL, "no-ttl", d.NoTTL, "fraction of the keys written without expiry, in [0, 1]")
	fs.DurationVar(&f.window, "window", 0, "the dual-ring migration's window (default the TTL: the shortest after which no key with a TTL is lost)")
	fs.DurationVar(&f.sweepWindow, "sweep-window", d.SweepWindow, "the dual-ring+sweep mode's window")
	fs.IntVar(&f.steps, "steps", d.Steps, "steps to run")
	fs.IntVar(&f.reshardAt, "reshard-at", d.ReshardAt, "the step at whose start the client reshards (steps before it measure the steady state)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the workload: the same seed gives the same run on embedded servers")
	fs.IntVar(&f.workers, "workers", d.Workers, "concurrent requests per mode")
	fs.Float64Var(&f.loadLimit, "load-limit", 0, "guard the database: at most this many loads per second of the run, per mode (0: no guard); reads refused a load are throttled")
	fs.StringVar(&f.modes, "modes", "mod-N,ring,dual-ring,dual-ring+sweep", "the modes to run, comma-separated")
	fs.StringVar(&f.redis, "redis", "", "run on real Redis `servers`, comma-separated host:port, one per distinct address of --from and --to in the order they first appear")
	fs.StringVar(&f.memcached, "memcached", "", "run on real Memcached `servers`, as --redis")
	fs.DurationVar(&f.realStep, "real-step", 500*time.Millisecond, "with --redis or --memcached, the wall time per step; --ttl and --window are scaled by real-step/step")
	fs.StringVar(&f.svg, "svg", "", "write an SVG chart of the hit rate and the database load to `file`")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON, every step included, instead of tables")
	fs.IntVar(&f.every, "every", 5, "print every Nth step in the table (the reshard and the extremes always)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar on stderr")
	f.kind = addFromKindFlags(fs.FlagSet)
	f.conn = addConnFlags(fs.FlagSet)
	fs.StringVar(&f.memory, "memory", "", "run the memory scenario instead (see below): each --from node's memory `limits`, such as 6MiB,d=1.5MiB (a bare size for the nodes not named)")
	fs.IntVar(&f.valueSize, "value-size", 1000, "with --memory, every value's size in bytes")
	fs.IntVar(&f.expiryWave, "expiry-wave", 0, "run the expiry wave instead (see below): this many of the most popular keys expire together at --reshard-at")
	fs.IntVar(&f.processes, "processes", 8, "with --expiry-wave, the processes of the fleet, each a client of its own")
	fs.DurationVar(&f.loadTime, "load-time", 100*time.Millisecond, "with --expiry-wave, how long a load takes (wall time): the other processes miss meanwhile")
	fs.StringVar(&f.kill, "kill", "", "run a node's death instead (see below), `NODE@STEP[-STEP2]` such as d@20-50: the --from node NODE dies at the start of step STEP and, with -STEP2, comes back empty at the start of STEP2")
	fs.IntVar(&f.gutter, "gutter", 1, "with --kill, the gutter mode's pool: this many embedded gutter nodes (client.Options.Gutter)")
	fs.DurationVar(&f.gutterTTL, "gutter-ttl", client.DefaultGutterTTL, "with --kill, the gutter mode's client.Options.GutterTTL: the cap on the TTLs written to the gutter")
	fs.IntVar(&f.replicas, "replicas", 2, "with --kill, the replicas mode's client.Options.Replicas: every key on this many of the --from nodes")
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["memory"] || set["value-size"] {
		return runMemorySimulation(ctx, &f, set, stdout, stderr)
	}

	cfg, note, err := f.config(set)
	if err != nil {
		return badInput(stderr, "simulate", "%v", err)
	}
	if cfg.Servers != nil {
		conn, err := f.conn.resolve(os.Getenv, stderr)
		if err != nil {
			return badInput(stderr, "simulate", "%v", err)
		}
		cfg.Connect = conn.apply
		servers := make([]server, len(cfg.Servers))
		for i, a := range cfg.Servers {
			servers[i] = server{addr: a, name: a}
		}
		if err := checkBackend(ctx, cfg.Backend, servers, conn.tls,
			func(got client.Backend) string { return "the servers as --" + got.String() }); err != nil {
			return badInput(stderr, "simulate", "--%v %v", cfg.Backend, err)
		}
	}
	if note != "" && !f.quiet {
		fmt.Fprintln(stderr, note)
	}
	// Open the chart's file first: a bad path must not cost a whole run.
	var svg *os.File
	if f.svg != "" {
		if svg, err = os.Create(f.svg); err != nil {
			return failed(stderr, "simulate", err)
		}
		defer func() {
			if svg != nil { // not written: do not leave an empty chart behind
				svg.Close()
				os.Remove(f.svg)
			}
		}()
	}
	var bar *progressbar.ProgressBar
	if !f.quiet {
		bar = simBar(stderr, &cfg)
	}
	res, err := sim.Run(ctx, cfg)
	if bar != nil {
		bar.Finish()
		if res != nil {
			fmt.Fprintf(stderr, "%s × %s in %v\n", count(len(res.Modes), "mode", ""), count(res.Config.Steps, "step", ""), res.Elapsed.Round(10*time.Millisecond))
		}
	}
	switch {
	case errors.Is(err, sim.ErrBadConfig):
		return badInput(stderr, "simulate", "%v", err)
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "shardcache simulate: interrupted")
		return exitFail
	case err != nil:
		return failed(stderr, "simulate", err)
	}

	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(jsonResult(res, &f))
	} else {
		writeSimulation(stdout, res, &f)
	}
	if err == nil && svg != nil {
		if err = writeSVG(svg, res, describe(res, &f)); err == nil {
			err = svg.Close()
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", f.svg, err)
		} else {
			svg = nil
		}
	}
	if err != nil {
		return failed(stderr, "simulate", err)
	}
	return exitOK
}

// simBar returns the progress bar of cfg's run on w and sets cfg.Progress
// to advance it by a step each time a mode finishes one. Its total is the
// work of every mode: the modes run side by side, so a bar of Steps was
// full at a quarter of the default run, which then looked hung.
func simBar(w io.Writer, cfg *sim.Config) *progressbar.ProgressBar {
	bar := newBar(w, int64(cfg.Work()), "simulate", "steps")
	// Add, not Set(done): the modes' goroutines may report out of order.
	cfg.Progress = func(int, int) { bar.Add(1) }
	return bar
}

// loadings sets the wave's modes from --modes, all four when not given.
func (f *simFlags) loadings(set map[string]bool, cfg *sim.Config) error {
	if !set["modes"] {
		return nil
	}
	for _, name := range strings.Split(f.modes, ",") {
		l, err := sim.ParseLoading(name)
		if err != nil {
			return fmt.Errorf("--modes: %q: with --expiry-wave, want plain, lease, swr or swr+lease", strings.TrimSpace(name))
		}
		if slices.Contains(cfg.Loadings, l) {
			return fmt.Errorf("--modes: %v twice", l)
		}
		cfg.Loadings = append(cfg.Loadings, l)
	}
	return nil
}

// config checks the flags and turns them into a sim.Config. set names the
// flags given on the command line. note, when not empty, tells how a run on
// real servers scales time.
func (f *simFlags) config(set map[string]bool) (cfg sim.Config, note string, err error) {
	from, to, err := nodeLists(f.from, f.to, set)
	if err != nil {
		return cfg, "", err
	}
	// sim.Config reads zero as "the default": explicit zeros are refused here.
	checks := []struct {
		ok   bool
		flag string
		v    any
		want string
	}{
		{f.vnodes >= 1 && f.vnodes <= ring.MaxVnodes, "vnodes", f.vnodes, fmt.Sprintf("1..%d", ring.MaxVnodes)},
		{checkEqualize(f.equalize) == nil, "equalize", f.equalize, "0 (the classic ring) or a tolerance above 0 and below 1, such as 0.01"},
		{f.keys >= 1 && f.keys <= 1<<24, "keys", f.keys, fmt.Sprintf("1..%d", 1<<24)},
		{f.zipfS > 1, "zipf-s", f.zipfS, "> 1"},
		{f.zipfV >= 1, "zipf-v", f.zipfV, ">= 1"},
		{f.requests >= 1, "requests", f.requests, ">= 1"},
		{f.writes >= 0 && f.writes < 1, "writes", f.writes, "a fraction in [0, 1)"},
		{f.noTTL >= 0 && f.noTTL <= 1, "no-ttl", f.noTTL, "a fraction in [0, 1]"},
		{f.sweepWindow > 0, "sweep-window", f.sweepWindow, "> 0"},
		{f.step > 0, "step", f.step, "> 0"},
		{f.ttl > 0, "ttl", f.ttl, "> 0"},
		{f.window > 0 || !set["window"], "window", f.window, "> 0 (a zero window is the ring mode)"},
		{f.steps >= 2, "steps", f.steps, ">= 2"},
		{f.reshardAt >= 1 && f.reshardAt < f.steps || set["kill"] && !set["reshard-at"], "reshard-at", f.reshardAt, fmt.Sprintf("1..%d (steps before and after it)", f.steps-1)},
		{f.workers >= 1, "workers", f.workers, ">= 1"},
		{f.loadLimit >= 0 && !math.IsInf(f.loadLimit, 0), "load-limit", f.loadLimit, ">= 0 loads per second"},
		{f.every >= 1, "every", f.every, ">= 1"},
		{f.realStep > 0, "real-step", f.realStep, "> 0"},
		{f.redis == "" || f.memcached == "", "memcached", f.memcached, "not with --redis"},
		{f.expiryWave >= 0 && f.expiryWave <= f.keys, "expiry-wave", f.expiryWave, fmt.Sprintf("0..%d (the --keys)", f.keys)},
		{f.processes >= 1 && f.processes <= 1024, "processes", f.processes, "1..1024"},
		{f.loadTime > 0 && f.loadTime <= time.Minute, "load-time", f.loadTime, "> 0 and at most 1m"},
	}
	for _, c := range checks {
		if !c.ok {
			return cfg, "", fmt.Errorf("--%s %v: want %s", c.flag, c.v, c.want)
		}
	}
	if f.expiryWave == 0 {
		for _, name := range []string{"processes", "load-time"} {
			if set[name] {
				return cfg, "", fmt.Errorf("--%s is the expiry wave's: give --expiry-wave", name)
			}
		}
	}
	if err := f.kind.check(set); err != nil {
		return cfg, "", err
	}
	if !set["kill"] {
		if err := bothLists(set); err != nil {
			return cfg, "", err
		}
	}
	cfg = sim.Config{
		From: from, To: to, Vnodes: f.vnodes, Equalize: f.equalize,
		Keys: f.keys, ZipfS: f.zipfS, ZipfV: f.zipfV,
		Requests: f.requests, WriteRatio: f.writes, NoTTL: f.noTTL,
		Step: f.step, TTL: f.ttl, Window: f.window, SweepWindow: f.sweepWindow,
		Steps: f.steps, ReshardAt: f.reshardAt,
		Seed: f.seed, Workers: f.workers, LoadLimit: f.loadLimit,
	}
	if f.writes == 0 {
		cfg.WriteRatio = -1 // none; zero would be the default
	}
	if f.noTTL == 0 {
		cfg.NoTTL = -1
	}
	if f.kind.kind != "ring" {
		cfg.FromKind = f.kind.kind
		cfg.FromPlacement = func(nodes []ring.Node) (ring.Locator, error) { return f.kind.placement(nodes, f.vnodes, f.equalize) }
	}
	if cfg.Window == 0 {
		cfg.Window = cfg.TTL
	}
	if f.expiryWave > 0 {
		cfg.ExpiryWave, cfg.Processes, cfg.LoadTime = f.expiryWave, f.processes, f.loadTime
		if err := f.loadings(set, &cfg); err != nil {
			return cfg, "", err
		}
	}
	if err := f.killConfig(set, &cfg); err != nil {
		return cfg, "", err
	}
	for _, name := range strings.Split(f.modes, ",") {
		if f.expiryWave > 0 || cfg.Kill != "" {
			break // the modes are loadings, or kill modes
		}
		m, err := sim.ParseMode(name)
		if err != nil {
			return cfg, "", fmt.Errorf("--modes: %q: want mod-N, ring, dual-ring or dual-ring+sweep", strings.TrimSpace(name))
		}
		if slices.Contains(cfg.Modes, m) {
			return cfg, "", fmt.Errorf("--modes: %v twice", m)
		}
		cfg.Modes = append(cfg.Modes, m)
	}
	servers, flagName := f.redis, "redis"
	if f.memcached != "" {
		servers, flagName, cfg.Backend = f.memcached, "memcached", client.Memcached
	}
	if servers == "" {
		if f.conn.given() {
			return cfg, "", errors.New("--username, --password-file and the --tls flags need --redis or --memcached")
		}
		return cfg, "", nil
	}
	for _, a := range strings.Split(servers, ",") {
		a = strings.TrimSpace(a)
		if err := checkAddr(a); err != nil {
			return cfg, "", fmt.Errorf("--%s: %w", flagName, err)
		}
		cfg.Servers = append(cfg.Servers, a)
	}
	// Real servers expire keys in real time: scale the clock down.
	scale := float64(f.realStep) / float64(f.step)
	cfg.Step = f.realStep
	cfg.TTL = time.Duration(float64(cfg.TTL) * scale)
	cfg.Window = time.Duration(float64(cfg.Window) * scale)
	cfg.SweepWindow = time.Duration(float64(cfg.SweepWindow) * scale)
	cfg.LoadLimit /= scale // the same loads per step
	note = fmt.Sprintf("real servers, real time: each step lasts %v, the TTL is %v, the window %v (with a sweep %v); the run takes about %v",
		cfg.Step, cfg.TTL.Round(time.Millisecond), cfg.Window.Round(time.Millisecond), cfg.SweepWindow.Round(time.Millisecond),
		time.Duration(f.steps)*cfg.Step)
	if cfg.Backend == client.Memcached && cfg.TTL < 5*time.Second {
		note += "\n(Memcached counts TTLs in whole seconds: one under 5s is coarse; raise --real-step)"
	}
	return cfg, note, nil
}

// fmtOffset formats a time since the reshard as [-]m:ss or [-]h:mm:ss, or
// in seconds with a decimal when steps are shorter than a second.
func fmtOffset(d, step time.Duration) string {
	if step < time.Second {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	d = d.Round(time.Second)
	h, m, s := int(d/time.Hour), int(d/time.Minute)%60, int(d/time.Second)%60
	if h > 0 {
		return fmt.Sprintf("%s%d:%02d:%02d", sign, h, m, s)
	}
	return fmt.Sprintf("%s%d:%02d", sign, m, s)
}

// windowEnd returns the step at whose start the dual-ring window is over.
func windowEnd(cfg *sim.Config) int {
	return cfg.ReshardAt + int(math.Ceil(float64(cfg.Window)/float64(cfg.Step)))
}

// sweepWindowEnd returns the step at whose start the dual-ring+sweep window
// is over.
func sweepWindowEnd(cfg *sim.Config) int {
	return cfg.ReshardAt + int(math.Ceil(float64(cfg.SweepWindow)/float64(cfg.Step)))
}

// tableSteps returns the steps the table prints: every f.every-th, the
// steps around the reshard, the end of the window, each mode's low and
// peak, and the last.
func tableSteps(res *sim.Result, every int) []int {
	cfg := &res.Config
	steps := []int{cfg.ReshardAt - 1, cfg.ReshardAt, cfg.ReshardAt + 1, windowEnd(cfg), cfg.Steps - 1}
	if hasMode(res, sim.ModeSweep) {
		steps = append(steps, sweepWindowEnd(cfg))
	}
	if cfg.Kill != "" {
		steps = append(killSteps(res), cfg.Steps-1)
	}
	for i := 0; i < cfg.Steps; i += every {
		steps = append(steps, i)
	}
	for _, m := range res.Modes {
		steps = append(steps, m.MinHitStep, m.PeakDBStep)
	}
	slices.Sort(steps)
	steps = slices.Compact(steps)
	return slices.DeleteFunc(steps, func(i int) bool { return i < 0 || i >= cfg.Steps })
}

// describe sums up the run's set-up in one line.
func describe(res *sim.Result, f *simFlags) string {
	cfg := &res.Config
	if cfg.Kill != "" {
		return describeKill(res, f)
	}
	where := "embedded servers, simulated clock"
	if cfg.Servers != nil {
		where = fmt.Sprintf("%s, real time", count(len(cfg.Servers), cfg.Backend.String()+" server", ""))
	}
	if cfg.Equalize > 0 {
		where += ", rings equalized to " + pct(cfg.Equalize, 2)
	}
	window := fmt.Sprintf("dual-ring window %v", cfg.Window)
	if hasMode(res, sim.ModeSweep) {
		window += fmt.Sprintf(", with a sweep %v", cfg.SweepWindow)
	}
	fromKind := ""
	if cfg.FromKind != "" {
		fromKind = fromKindNames[cfg.FromKind] + " "
	}
	guard := ""
	if cfg.LoadLimit > 0 {
		guard = fmt.Sprintf(", load limit %d per step", loadBudget(cfg))
	}
	if cfg.ExpiryWave > 0 {
		return fmt.Sprintf("%s expire at step %d under %s, %s (loads of %v, swr %v)\n%s (Zipf s=%g v=%g, %s without expiry), %s per %v step, %s writes, TTL %v%s, seed %d (%s)",
			count(cfg.ExpiryWave, "hot key", ""), cfg.ReshardAt, count(cfg.Processes, "process", "processes"), count(len(cfg.From), "node", ""),
			cfg.LoadTime, cfg.StaleWhileRevalidate,
			count(cfg.Keys, "key", ""), cfg.ZipfS, cfg.ZipfV, pct(cfg.NoTTL, 0), count(cfg.Requests, "request", ""), cfg.Step,
			pct(max(cfg.WriteRatio, 0), 1), cfg.TTL, guard, f.seed, where)
	}
	// Three lines, to fit textWidth, and the chart's width in its title.
	return fmt.Sprintf("%s%s → %s (%s)\n%s (Zipf s=%g v=%g, %s without expiry), %s per %v step, %s writes\nTTL %v, %s%s, seed %d",
		fromKind, nodeNames(cfg.From), nodeNames(cfg.To), where,
		count(cfg.Keys, "key", ""), cfg.ZipfS, cfg.ZipfV, pct(cfg.NoTTL, 0), count(cfg.Requests, "request", ""), cfg.Step,
		pct(max(cfg.WriteRatio, 0), 1), cfg.TTL, window, guard, f.seed)
}

// loadBudget returns the loads per step that cfg.LoadLimit lets through.
func loadBudget(cfg *sim.Config) int64 {
	return int64(math.Round(cfg.LoadLimit * cfg.Step.Seconds()))
}

// writeSimulation prints the step table and the summary.
func writeSimulation(w io.Writer, res *sim.Result, f *simFlags) {
	cfg := &res.Config
	if cfg.ExpiryWave > 0 {
		writeWave(w, res, f)
		return
	}
	if cfg.Kill != "" {
		writeKill(w, res, f)
		return
	}
	end, sweepEnd := windowEnd(cfg), -1
	if hasMode(res, sim.ModeSweep) {
		sweepEnd = sweepWindowEnd(cfg)
	}
	writeModeSteps(w, res, f, func(i int) string {
		switch i {
		case cfg.ReshardAt:
			return "← reshard"
		case end:
			return "← dual-ring window over"
		case sweepEnd:
			return "← sweep window over" // the chart's words
		}
		return ""
	})

	// The summary in two tables, the hit rate's and the database's, as the
	// chart's panels: in one, it was 129 columns wide.
	fmt.Fprintln(w)
	tw := newTable(w, tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tkeys moved\tsteady hit\tmin hit\t(step)\tof steady\tstale reads\t ")
	for _, m := range res.Modes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t(%d)\t%s\t%d\t \n",
			m.Mode, pct(m.Moved, 1), pct(m.SteadyHitRate, 1), pct(m.MinHitRate, 1), m.MinHitStep,
			pct(m.MinHitRate/m.SteadyHitRate, 1), m.Total.Stale)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = newTable(w, tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tsteady DB\t(max)\tpeak DB\t(step)\tof steady\t ")
	for _, m := range res.Modes {
		fmt.Fprintf(tw, "%s\t%.0f\t(%d)\t%d\t(%d)\t×%.2f\t \n",
			m.Mode, m.SteadyDBLoad, m.SteadyPeakDBLoad, m.PeakDBLoad, m.PeakDBStep, float64(m.PeakDBLoad)/m.SteadyDBLoad)
	}
	tw.Flush()
	printWrapped(w, "DB is the database's load per step: loads after misses, plus writes. Steady: the mean over the steps "+
		"before the reshard, and in brackets their highest, which chance alone reached. Min and peak: from the reshard on.")
	var late []string
	for _, m := range res.Modes {
		switch m.Mode {
		case sim.ModeDualRing:
			printWrapped(w, fmt.Sprintf("dual-ring: %s found their key on its old owner after a miss on the new one, and copied it there (%s).",
				count(m.Total.FallbackHits, "read", ""), count(m.Backfills, "backfill", "")))
		case sim.ModeSweep:
			printWrapped(w, fmt.Sprintf("dual-ring+sweep: the sweep copied %s to their new owner at the reshard; %s found theirs on the old owner first.",
				count(m.Swept, "key", ""), count(m.Total.FallbackHits, "read", "")))
		}
		if cfg.LoadLimit > 0 {
			printWrapped(w, fmt.Sprintf("%v: the load limit throttled %s (%s of them); peak loads %d in a step, the limit %d.",
				m.Mode, count(m.Total.Throttled, "read", ""), pct(float64(m.Total.Throttled)/float64(max(m.Total.Reads, 1)), 2), peakLoads(m), loadBudget(cfg)))
		}
		if m.Total.Errors > 0 {
			printWrapped(w, fmt.Sprintf("%v: %s failed (each counted as a miss).", m.Mode, count(m.Total.Errors, "cache operation", "")))
		}
		if m.Late > 0 {
			late = append(late, fmt.Sprintf("%v %d", m.Mode, m.Late))
		}
	}
	if late != nil {
		printWrapped(w, fmt.Sprintf("Steps that took longer than %v (%s): the TTLs ran ahead of the steps; raise --real-step or lower --requests.",
			cfg.Step, strings.Join(late, ", ")))
	}
}

// peakLoads returns the most loads of any step of m.
func peakLoads(m sim.ModeResult) int64 {
	var peak int64
	for _, s := range m.Steps {
		peak = max(peak, s.Loads)
	}
	return peak
}

// jsonResult is simulate's --json output.
func jsonResult(res *sim.Result, f *simFlags) any {
	cfg := &res.Config
	type step struct {
		Step         int     `json:"step"`
		Time         float64 `json:"time"` // seconds since the reshard
		HitRate      float64 `json:"hit_rate"`
		DBLoad       int64   `json:"db_load"`
		Reads        int64   `json:"reads"`
		Hits         int64   `json:"hits"`
		Loads        int64   `json:"loads"`
		Writes       int64   `json:"writes"`
		FallbackHits int64   `json:"fallback_hits"`
		Stale        int64   `json:"stale"`
		Errors       int64   `json:"errors"`
		CacheErrors  int64   `json:"cache_errors"` // of errors, those GetOrLoad loaded through
		Throttled    int64   `json:"throttled"`
	}
	type mode struct {
		Mode          string  `json:"mode"`
		Moved         float64 `json:"moved"`
		SteadyHitRate float64 `json:"steady_hit_rate"`
		MinHitRate    float64 `json:"min_hit_rate"`
		MinHitStep    int     `json:"min_hit_step"`
		SteadyDBLoad  float64 `json:"steady_db_load"`
		SteadyPeakDB  int64   `json:"steady_peak_db_load"`
		PeakDBLoad    int64   `json:"peak_db_load"`
		PeakDBStep    int     `json:"peak_db_step"`
		Stale         int64   `json:"stale"`
		Errors        int64   `json:"errors"`
		Throttled     int64   `json:"throttled"`
		Backfills     int64   `json:"backfills"`
		Swept         int64   `json:"swept"`
		LateSteps     int     `json:"late_steps"`
		// The expiry wave's: its keys read at its step, their readers
		// (process and key), and the database's peak against plain's.
		WaveKeys    int           `json:"wave_keys,omitempty"`
		WaveReaders int           `json:"wave_readers,omitempty"`
		PeakVsPlain float64       `json:"peak_vs_plain,omitempty"`
		Kill        *killModeJSON `json:"kill,omitempty"` // a kill run's
		Steps       []step        `json:"steps"`
	}
	out := struct {
		From          string    `json:"from"`
		To            string    `json:"to"`
		Servers       string    `json:"servers"`
		Keys          int       `json:"keys"`
		ZipfS         float64   `json:"zipf_s"`
		ZipfV         float64   `json:"zipf_v"`
		Requests      int       `json:"requests_per_step"`
		Writes        float64   `json:"writes"`
		NoTTL         float64   `json:"no_ttl"`
		StepSeconds   float64   `json:"step_seconds"`
		TTLSeconds    float64   `json:"ttl_seconds"`
		WindowSeconds float64   `json:"window_seconds"`
		SweepWindow   float64   `json:"sweep_window_seconds"`
		Steps         int       `json:"steps"`
		ReshardAt     int       `json:"reshard_at"`
		Seed          uint64    `json:"seed"`
		LoadLimit     float64   `json:"load_limit"` // loads per second; 0: none
		ExpiryWave    int       `json:"expiry_wave,omitempty"`
		Processes     int       `json:"processes,omitempty"`
		LoadTime      float64   `json:"load_time_seconds,omitempty"`
		SWR           float64   `json:"stale_while_revalidate_seconds,omitempty"`
		Kill          *killJSON `json:"kill,omitempty"`
		Modes         []mode    `json:"modes"`
	}{
		From: formatNodes(cfg.From), To: formatNodes(cfg.To), Servers: "embedded",
		Keys: cfg.Keys, ZipfS: cfg.ZipfS, ZipfV: cfg.ZipfV, Requests: cfg.Requests, Writes: max(cfg.WriteRatio, 0),
		NoTTL:       cfg.NoTTL,
		StepSeconds: cfg.Step.Seconds(), TTLSeconds: cfg.TTL.Seconds(), WindowSeconds: cfg.Window.Seconds(),
		SweepWindow: cfg.SweepWindow.Seconds(),
		Steps:       cfg.Steps, ReshardAt: cfg.ReshardAt, Seed: f.seed, LoadLimit: cfg.LoadLimit,
		ExpiryWave: cfg.ExpiryWave, Processes: cfg.Processes, LoadTime: cfg.LoadTime.Seconds(), SWR: cfg.StaleWhileRevalidate.Seconds(),
		Kill: killJSONOf(res),
	}
	if cfg.Servers != nil {
		out.Servers = cfg.Backend.String() + ":" + strings.Join(cfg.Servers, ",")
	}
	for _, m := range res.Modes {
		jm := mode{
			Mode: m.Name, Moved: m.Moved, WaveKeys: m.WaveKeys, WaveReaders: m.WaveReaders, PeakVsPlain: peakVsPlain(res, m),
			SteadyHitRate: m.SteadyHitRate, MinHitRate: m.MinHitRate, MinHitStep: m.MinHitStep,
			SteadyDBLoad: m.SteadyDBLoad, SteadyPeakDB: m.SteadyPeakDBLoad, PeakDBLoad: m.PeakDBLoad, PeakDBStep: m.PeakDBStep,
			Stale: m.Total.Stale, Errors: m.Total.Errors, Throttled: m.Total.Throttled, Backfills: m.Backfills, Swept: m.Swept, LateSteps: m.Late,
			Kill: killModeJSONOf(res, m),
		}
		for i, s := range m.Steps {
			jm.Steps = append(jm.Steps, step{
				Step: i, Time: (time.Duration(i-cfg.ReshardAt) * cfg.Step).Seconds(),
				HitRate: s.HitRate(), DBLoad: s.DBLoad(), Reads: s.Reads, Hits: s.Hits,
				Loads: s.Loads, Writes: s.Writes, FallbackHits: s.FallbackHits, Stale: s.Stale, Errors: s.Errors, CacheErrors: s.CacheErrors, Throttled: s.Throttled,
			})
		}
		out.Modes = append(out.Modes, jm)
	}
	return out
}

// peakVsPlain returns m's database peak against the plain loading's in an
// expiry wave, 0 in any other run or without a plain one.
func peakVsPlain(res *sim.Result, m sim.ModeResult) float64 {
	if res.Config.ExpiryWave == 0 {
		return 0
	}
	for _, p := range res.Modes {
		if p.Loading == sim.LoadPlain {
			return sim.PeakRatio(m, p)
		}
	}
	return 0
}

// writeModeSteps prints the run's description and a table of the hit rate
// and the database's load, step by step, per mode (an expiry wave's
// loadings, a kill's modes), each row followed by mark(step). A mode's hit
// rate and load make one column, headed by its name on a line of its own:
// a header per figure, "dual-ring+sweep hit", widened the table by a name
// per mode.
func writeModeSteps(w io.Writer, res *sim.Result, f *simFlags, mark func(step int) string) {
	cfg := &res.Config
	fmt.Fprintf(w, "%s\n\n", describe(res, f))
	steps := tableSteps(res, f.every)
	hitWidth, dbWidth := len("hit"), len("DB")
	for _, m := range res.Modes {
		for _, i := range steps {
			hitWidth = max(hitWidth, len(pct(m.Steps[i].HitRate(), 1)))
			dbWidth = max(dbWidth, len(strconv.FormatInt(m.Steps[i].DBLoad(), 10)))
		}
	}
	cell := func(hit, db string) string { return fmt.Sprintf("%*s  %*s", hitWidth, hit, dbWidth, db) }
	tw := newTable(w, tabwriter.AlignRight)
	names, head := "\t\t", "step\ttime\t"
	for _, m := range res.Modes {
		names += m.Name + "\t"
		head += cell("hit", "DB") + "\t"
	}
	fmt.Fprintln(tw, names+" ")
	fmt.Fprintln(tw, head+" ")
	for _, i := range steps {
		row := fmt.Sprintf("%d\t%s\t", i, fmtOffset(time.Duration(i-cfg.ReshardAt)*cfg.Step, cfg.Step))
		for _, m := range res.Modes {
			s := m.Steps[i]
			row += cell(pct(s.HitRate(), 1), strconv.FormatInt(s.DBLoad(), 10)) + "\t"
		}
		fmt.Fprintln(tw, row+" "+mark(i))
	}
	tw.Flush()
}

// textWidth is the width, in columns, that simulate's text report keeps
// to at the default settings: a terminal of 100 columns shows it unwrapped.
const textWidth = 100

// printWrapped writes the sentences s to w in lines of at most textWidth.
func printWrapped(w io.Writer, s string) {
	for _, l := range wrap(s, textWidth) {
		fmt.Fprintln(w, l)
	}
}

// writeWave prints an expiry wave's step table and summary: the database's
// load step by step, and its peak in each loading against plain's.
func writeWave(w io.Writer, res *sim.Result, f *simFlags) {
	cfg := &res.Config
	writeModeSteps(w, res, f, func(i int) string {
		if i == cfg.ReshardAt {
			return "← the wave expires"
		}
		return ""
	})
	fmt.Fprintln(w)
	tw := newTable(w, tabwriter.AlignRight)
	fmt.Fprintln(tw, "loading\tsteady hit\tmin hit\t(step)\tsteady DB\t(max)\tpeak DB\t(step)\tof steady\tof plain\tstale reads\t ")
	for _, m := range res.Modes {
		ofPlain := "-"
		if r := peakVsPlain(res, m); r > 0 {
			ofPlain = fmt.Sprintf("×%.2f", r)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t(%d)\t%.0f\t(%d)\t%d\t(%d)\t×%.2f\t%s\t%d\t \n",
			m.Name, pct(m.SteadyHitRate, 1), pct(m.MinHitRate, 1), m.MinHitStep, m.SteadyDBLoad, m.SteadyPeakDBLoad,
			m.PeakDBLoad, m.PeakDBStep, float64(m.PeakDBLoad)/m.SteadyDBLoad, ofPlain, m.Total.Stale)
	}
	tw.Flush()
	fmt.Fprintln(w, "DB is the database's load per step: loads after misses (a background refresh's too), plus writes. Steady: the")
	fmt.Fprintln(w, "mean over the steps before the wave, and in brackets their highest. Min and peak: from the wave on. A hit rate")
	fmt.Fprintln(w, "counts the reads answered from the cache: a read that waited for a load (a lease's) is a miss, a stale value a hit.")
	if len(res.Modes) > 0 {
		m := res.Modes[0]
		fmt.Fprintf(w, "At the wave %d of its %s were read, by %s in all (process and key): a load each\n", m.WaveKeys, count(cfg.ExpiryWave, "key", ""), count(m.WaveReaders, "reader", ""))
		fmt.Fprintln(w, "with a lease or StaleWhileRevalidate, and up to a load per reader without.")
	}
	for _, m := range res.Modes {
		if r := peakVsPlain(res, m); r > 0 && m.Loading != sim.LoadPlain {
			fmt.Fprintf(w, "The database's peak with %s against plain GetOrLoad: %d / %d = %.2f.\n", m.Name, m.PeakDBLoad, int64(math.Round(float64(m.PeakDBLoad)/r)), r)
		}
		if m.Total.Errors > 0 {
			fmt.Fprintf(w, "%s: %s failed (each counted as a miss).\n", m.Name, count(m.Total.Errors, "cache operation", ""))
		}
		if m.Late > 0 {
			fmt.Fprintf(w, "%s: %d steps took longer than %v: raise --real-step or lower --requests.\n", m.Name, m.Late, cfg.Step)
		}
	}
}
