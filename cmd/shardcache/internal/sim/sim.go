// Package sim simulates a read-heavy cache-aside workload through a
// resharding, to show what the change does to the hit rate and to the
// database behind the cache before anyone touches production.
//
// The same request stream runs in each of four modes, through the real
// client package, each against servers of its own:
//
//   - ModeModN: placement by hash(key) % N (ring.Modulo), switched at once with
//     ReshardTo(modulo, 0), as a plain sharded client does;
//   - ModeRing: the consistent-hash ring, switched at once with Reshard(nodes, 0);
//   - ModeDualRing: the ring with a dual-ring migration, Reshard(nodes, Window);
//   - ModeSweep: the ring with a dual-ring migration of a short window,
//     Reshard(nodes, SweepWindow), and a Sweep at the reshard that copies
//     every moved key to its new owner.
//
// The workload: keys drawn from a Zipf distribution (math/rand/v2, seeded),
// a fraction of writes, and a database that counts its load. A read is a
// client GetOrLoad whose loader is the database: on a miss the value is
// loaded (one load) and stored with the TTL, and with Config.LoadLimit the
// client's guard caps the loads. A write goes to the database (one write) and then Set with
// the TTL, write-through: the cache keeps the new value rather than losing
// it to a Delete, so writes do not lower the hit rate. A fraction of the keys
// (NoTTL) are written without expiry, as counters and flags are. Values carry the
// database's version of the key, and a hit on an older version is counted
// as stale. The caches start full, as after running the workload forever
// (see workload.prefill), so no warm-up is needed.
//
// Time runs in steps. By default each mode gets embedded miniredis servers
// and a simulated clock: all of a step's requests happen at its start, then
// the clock and the servers jump one Step forward (miniredis FastForward),
// expiring what has run out, so hours of traffic take seconds. The client
// reaches embedded servers through in-memory pipes rather than loopback TCP,
// with the same go-redis client and protocol. With Config.Servers the
// servers are real and so is the clock: each step lasts Step of wall time.
//
// A run is deterministic for a seed (on embedded servers): the requests of
// a step are split among workers by key, so each key's requests run in
// order, and with no eviction no key's fate depends on another's. A
// LoadLimit breaks that last rule: which reads get the step's tokens depends
// on the order the workers reach the limiter, so the throttled counts vary a
// little from run to run (the cap on loads does not).
//
// With Config.ExpiryWave the run is an expiry wave instead (wave.go): the
// most popular keys expire together, under a fleet of processes that load
// them plain, under leases, or serving stale (StaleWhileRevalidate). With
// Config.Kill it is a node's death and return (kill.go), under FailOpen
// alone, with a gutter pool, or with every key on Config.Replicas nodes.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// ErrBadConfig is returned by Run for a Config that cannot run.
var ErrBadConfig = errors.New("shardcache/sim: bad config")

// Mode is how a simulated client places keys and reshards.
type Mode int

// Modes, in the order they are reported.
const (
	ModeModN     Mode = iota // hash(key) % N, switched at once
	ModeRing                 // consistent-hash ring, switched at once
	ModeDualRing             // consistent-hash ring with a dual-ring migration
	ModeSweep                // dual-ring migration of a short window, and a sweep
)

// Modes lists every mode.
var Modes = []Mode{ModeModN, ModeRing, ModeDualRing, ModeSweep}

// String returns the mode's name: "mod-N", "ring", "dual-ring" or
// "dual-ring+sweep".
func (m Mode) String() string {
	switch m {
	case ModeModN:
		return "mod-N"
	case ModeRing:
		return "ring"
	case ModeDualRing:
		return "dual-ring"
	case ModeSweep:
		return "dual-ring+sweep"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// MarshalText encodes the mode as its name.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// ParseMode returns the mode named s, case-insensitively; "modn", "dual" and
// "sweep" are accepted too.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "mod-n", "modn":
		return ModeModN, nil
	case "ring":
		return ModeRing, nil
	case "dual-ring", "dual":
		return ModeDualRing, nil
	case "dual-ring+sweep", "sweep":
		return ModeSweep, nil
	}
	return 0, fmt.Errorf("%w: unknown mode %q (want mod-N, ring, dual-ring or dual-ring+sweep)", ErrBadConfig, s)
}

// DefaultFrom returns the nodes of the default run's cluster: eight nodes a
// to h of weight 1.
func DefaultFrom() []ring.Node { return letterNodes(8) }

// DefaultTo returns the default run's cluster after the reshard: a to f, g
// and h removed.
func DefaultTo() []ring.Node { return letterNodes(6) }

func letterNodes(n int) []ring.Node {
	nodes := make([]ring.Node, n)
	for i := range nodes {
		name := string(rune('a' + i))
		nodes[i] = ring.Node{Name: name, Addr: "cache-" + name + ":6379"}
	}
	return nodes
}

// Config describes a run. The zero value runs the default: eight nodes down
// to six, with a steady hit rate of about 95%.
type Config struct {
	// From and To are the nodes before and after the reshard. Each distinct
	// address is one server, embedded or taken from Servers: a node that
	// keeps its address keeps its data. Default DefaultFrom and DefaultTo;
	// give both or neither.
	From, To []ring.Node
	// Vnodes is the ring's points per unit of weight. Default
	// ring.DefaultVnodes.
	Vnodes int
	// Equalize, above 0, equalizes every ring of the run to that
	// tolerance, as client.Options.Equalize (which the clients get); 0 is
	// the classic ring.
	Equalize float64

	// FromPlacement, when set, is the placement the ring and dual-ring
	// modes start on and move keys off, instead of a ring of From: what a
	// fleet ran before it adopted the ring (ring.NewModulo, NewKetama,
	// NewRendezvous), so that the run replays that migration. It is called
	// with From at the servers' addresses; FromKind names it in reports.
	// The mod-N mode is unchanged.
	FromPlacement func(from []ring.Node) (ring.Locator, error) `json:"-"`
	FromKind      string                                       `json:",omitempty"`

	// Keys is the number of distinct keys. Default 15000.
	Keys int
	// ZipfS and ZipfV shape key popularity: key k (0 the most popular) is
	// drawn with probability proportional to (ZipfV+k)^-ZipfS, as by
	// rand.NewZipf. ZipfS > 1 (default 1.01); ZipfV >= 1 (default 450) flattens the
	// head, so that the most popular keys do not take most requests.
	ZipfS, ZipfV float64
	// Requests is the number of requests per step. Default 3000.
	Requests int
	// WriteRatio is the fraction of requests that are writes, in [0, 1).
	// Default 0.03; give a negative value for none.
	WriteRatio float64
	// NoTTL is the fraction of keys written without expiry, in [0, 1].
	// Default 0.1; give a negative value for none.
	NoTTL float64

	// Step is the duration of one step. Default 10s.
	Step time.Duration
	// TTL is the TTL of every value written to the cache but the NoTTL
	// keys. Default 15m.
	TTL time.Duration
	// Window is the dual-ring migration's window. Default the TTL: the
	// shortest window after which the old nodes hold no key with a TTL that
	// the new ones lack (the keys without expiry are lost at its end unless
	// read during it).
	Window time.Duration
	// SweepWindow is ModeSweep's window: the sweep runs at its start, so
	// it only has to cover the rollout of the new nodes. Default 2m.
	SweepWindow time.Duration
	// Steps is the number of steps measured. Default 120.
	Steps int
	// ReshardAt is the step at whose start the client reshards, at least 1
	// so the steady state is measured before it. Default 20.
	ReshardAt int

	// LoadLimit, when positive, guards the database of every mode: at most
	// that many loads per second of the run's clock (client.Options.LoadLimit,
	// with a burst of one Step's worth and no waiting), and a read whose
	// load is refused is throttled (Step.Throttled): it gets no value, as an
	// application that degrades rather than queue on the database. Default
	// 0: no guard.
	LoadLimit float64

	// ExpiryWave, when positive, runs the expiry-wave scenario instead of
	// a resharding (see wave.go): the ExpiryWave most popular keys with a
	// TTL are cached at the start with a TTL that runs out at the start of
	// step ReshardAt, all together, and the modes are Loadings, on a fleet
	// of Processes clients whose loads take LoadTime. Default 0: a
	// resharding.
	ExpiryWave int
	// Loadings are the modes of a wave run. Default all four.
	Loadings []Loading
	// Processes is the fleet of a wave run: that many clients, every
	// request of a step at once. Default 8.
	Processes int
	// LoadTime is how long a load of a wave run takes, on the wall clock:
	// the time in which other processes miss the key too. Default 100ms.
	LoadTime time.Duration
	// StaleWhileRevalidate is the swr loadings' client option: how long a
	// value is served past its TTL while one process reloads it. Default
	// the TTL.
	StaleWhileRevalidate time.Duration

	// Kill, when set, runs a node's death instead of a resharding (see
	// kill.go): the From node of that name (or, without one, that address)
	// dies at the start of step ReshardAt and, with ReturnAt, comes back
	// empty at the start of step ReturnAt (0: never). The modes are
	// KillModes, on the ring of From: To is From. Embedded servers only: a
	// real server cannot be stopped and restarted from here. Default "": a
	// resharding.
	Kill     string
	ReturnAt int
	// KillModes are the modes of a kill run. Default all three.
	KillModes []KillMode
	// Gutter is the number of embedded servers of the gutter mode's pool
	// (client.Options.Gutter), and GutterTTL its client.Options.GutterTTL.
	// Defaults 1 and client.DefaultGutterTTL.
	Gutter    int
	GutterTTL time.Duration
	// Replicas is the replicas mode's client.Options.Replicas: every key
	// on that many of From's nodes. Default 2.
	Replicas int

	// Seed seeds the workload; a run on embedded servers depends on nothing
	// else (but a wave run's timing: see wave.go).
	Seed uint64
	// Workers is the number of concurrent requests per mode. Default 8.
	Workers int
	// Modes are the modes to run, concurrently. Default all four.
	Modes []Mode

	// Servers, when set, are real servers to run on instead of embedded
	// miniredis ones, one per distinct address of From and To (those of
	// From in order, then those only in To). They speak Backend (default
	// Redis). The clock is then the wall clock: each step lasts Step, so
	// choose a short Step and TTL. The modes share the servers, with key
	// prefixes of their own, and run at the same time.
	Servers []string
	Backend client.Backend
	// Connect, when set, completes the options of every client on Servers:
	// credentials and TLS (client.Options.Password, TLSConfig...). It is
	// not part of the JSON form, so no secret is printed with the result.
	Connect func(*client.Options) `json:"-"`

	// Progress, when set, is called after each step of each mode, from the
	// modes' goroutines, with the steps done and the total (Work: all the
	// modes' steps).
	Progress func(done, total int) `json:"-"`
}

// DefaultConfig returns the zero Config with its defaults applied: what
// Run runs for Config{}.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

// setDefaults replaces zero fields by their defaults.
func (c *Config) setDefaults() {
	if c.Kill != "" {
		if c.From == nil {
			c.From = DefaultFrom()
		}
		if c.To == nil {
			c.To = c.From // no reshard
		}
	}
	if c.From == nil && c.To == nil {
		c.From, c.To = DefaultFrom(), DefaultTo()
	}
	setDefault(&c.Vnodes, ring.DefaultVnodes)
	setDefault(&c.Keys, 15000)
	setDefault(&c.ZipfS, 1.01)
	setDefault(&c.ZipfV, 450)
	setDefault(&c.Requests, 3000)
	setDefault(&c.WriteRatio, 0.03)
	c.WriteRatio = max(c.WriteRatio, 0)
	setDefault(&c.NoTTL, 0.1)
	c.NoTTL = max(c.NoTTL, 0)
	setDefault(&c.Step, 10*time.Second)
	setDefault(&c.TTL, 15*time.Minute)
	setDefault(&c.Window, c.TTL)
	setDefault(&c.SweepWindow, 2*time.Minute)
	setDefault(&c.Steps, 120)
	setDefault(&c.ReshardAt, 20)
	setDefault(&c.Workers, 8)
	if len(c.Modes) == 0 {
		c.Modes = slices.Clone(Modes)
	}
	if c.ExpiryWave > 0 {
		if len(c.Loadings) == 0 {
			c.Loadings = slices.Clone(Loadings)
		}
		setDefault(&c.Processes, 8)
		setDefault(&c.LoadTime, 100*time.Millisecond)
		setDefault(&c.StaleWhileRevalidate, c.TTL)
	}
	if c.Kill != "" {
		if len(c.KillModes) == 0 {
			c.KillModes = slices.Clone(KillModes)
		}
		if slices.Contains(c.KillModes, KillGutter) {
			setDefault(&c.Gutter, 1)
			setDefault(&c.GutterTTL, client.DefaultGutterTTL)
		}
		if slices.Contains(c.KillModes, KillReplicas) {
			setDefault(&c.Replicas, 2)
		}
	}
}

// init applies defaults and checks the configuration.
func (c *Config) init() error {
	c.setDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, args...)...)
	}
	switch {
	case len(c.From) == 0 || len(c.To) == 0:
		return bad("give both From and To nodes")
	case c.Keys < 1 || c.Keys > 1<<24:
		return bad("Keys %d (want 1..%d)", c.Keys, 1<<24)
	case !(c.ZipfS > 1):
		return bad("ZipfS %v (want > 1)", c.ZipfS)
	case !(c.ZipfV >= 1):
		return bad("ZipfV %v (want >= 1)", c.ZipfV)
	case c.Requests < 1:
		return bad("Requests %d (want >= 1)", c.Requests)
	case !(c.WriteRatio < 1):
		return bad("WriteRatio %v (want < 1)", c.WriteRatio)
	case !(c.NoTTL <= 1):
		return bad("NoTTL %v (want <= 1)", c.NoTTL)
	case c.Step <= 0:
		return bad("Step %v (want > 0)", c.Step)
	case c.TTL <= 0:
		return bad("TTL %v (want > 0)", c.TTL)
	case c.Window < 0:
		return bad("Window %v (want >= 0)", c.Window)
	case c.SweepWindow < 0:
		return bad("SweepWindow %v (want >= 0)", c.SweepWindow)
	case c.Steps < 2:
		return bad("Steps %d (want >= 2)", c.Steps)
	case c.ReshardAt < 1 || c.ReshardAt >= c.Steps:
		return bad("ReshardAt %d (want 1..%d, so that steps run before and after it)", c.ReshardAt, c.Steps-1)
	case c.Workers < 1:
		return bad("Workers %d (want >= 1)", c.Workers)
	case c.LoadLimit < 0 || math.IsNaN(c.LoadLimit) || math.IsInf(c.LoadLimit, 0):
		return bad("LoadLimit %v (want >= 0)", c.LoadLimit)
	}
	for _, m := range c.Modes {
		if m < ModeModN || m > ModeSweep {
			return bad("unknown mode %v", m)
		}
	}
	switch {
	case c.ExpiryWave < 0 || c.ExpiryWave > c.Keys:
		return bad("ExpiryWave %d (want 0..Keys, %d)", c.ExpiryWave, c.Keys)
	case c.ExpiryWave == 0 && (len(c.Loadings) > 0 || c.Processes != 0 || c.LoadTime != 0 || c.StaleWhileRevalidate != 0):
		return bad("Loadings, Processes, LoadTime and StaleWhileRevalidate are an expiry wave's: set ExpiryWave")
	case c.Processes < 0 || c.Processes > 1024:
		return bad("Processes %d (want 1..1024)", c.Processes)
	case c.LoadTime < 0 || c.LoadTime > time.Minute:
		return bad("LoadTime %v (want 0..1m)", c.LoadTime)
	case c.StaleWhileRevalidate < 0:
		return bad("StaleWhileRevalidate %v (want > 0)", c.StaleWhileRevalidate)
	}
	if err := c.checkKill(); err != nil {
		return err
	}
	for i, l := range c.Loadings {
		if l < LoadPlain || l > LoadSWRLease {
			return bad("unknown loading %v", l)
		}
		if slices.Contains(c.Loadings[:i], l) {
			return bad("loading %v twice", l)
		}
	}
	// The placements must build: the same checks the client makes.
	for _, nodes := range [][]ring.Node{c.From, c.To} {
		if _, err := c.ring(nodes); err != nil {
			return fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
		if _, err := modulo(nodes); err != nil {
			return fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
	}
	if c.FromPlacement != nil {
		if _, err := c.FromPlacement(c.From); err != nil {
			return fmt.Errorf("%w: From: %w", ErrBadConfig, err)
		}
	}
	if c.Servers != nil {
		if want := len(serverAddrs(c)); len(c.Servers) != want {
			return bad("%s for %s (%s)", count(len(c.Servers), "server", "servers"), count(want, "node address", "node addresses"),
				strings.Join(serverAddrs(c), ", "))
		}
		if c.Backend != client.Redis && c.Backend != client.Memcached {
			return bad("unknown backend %v", c.Backend)
		}
	} else if c.Backend != client.Redis {
		return bad("embedded servers speak Redis, not %v", c.Backend)
	}
	return nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Step is what happened in one step of one mode.
type Step struct {
	Reads  int64 // reads (Get)
	Hits   int64 // reads the cache answered, from the new owner or, in a migration, the old one
	Stale  int64 // hits on a value older than the database's
	Loads  int64 // database reads: GetOrLoad's loader calls, one per read the cache missed
	Writes int64 // database writes: one per write request
	Errors int64 // cache operations that failed (a failed read also loads)
	// CacheErrors are those of Errors that GetOrLoad loaded through (the
	// client's LoadStats.CacheErrors: a failed read, a failed store of the
	// loaded value): the caller got its value all the same.
	CacheErrors int64
	// Throttled are the reads whose load Config.LoadLimit refused: no
	// value, no database load.
	Throttled int64
	// FallbackHits are the hits that a dual-ring migration found on a
	// key's old owner after a miss on its new one.
	FallbackHits int64
}

// HitRate returns Hits/Reads, or 1 for a step without reads.
func (s Step) HitRate() float64 {
	if s.Reads == 0 {
		return 1
	}
	return float64(s.Hits) / float64(s.Reads)
}

// DBLoad returns the database's load in the step: loads plus writes.
func (s Step) DBLoad() int64 { return s.Loads + s.Writes }

func (s *Step) add(o Step) {
	s.Reads += o.Reads
	s.Hits += o.Hits
	s.Stale += o.Stale
	s.Loads += o.Loads
	s.Writes += o.Writes
	s.Errors += o.Errors
	s.CacheErrors += o.CacheErrors
	s.Throttled += o.Throttled
	s.FallbackHits += o.FallbackHits
}

// ModeResult is one mode's run.
type ModeResult struct {
	// Mode is the mode run: ModeRing in a wave run and a kill run.
	Mode Mode
	// Name is the mode's name, or in a wave run the loading's, in a kill
	// run the kill mode's.
	Name string
	// Loading is the loading of a wave run (Config.ExpiryWave).
	Loading Loading
	// KillMode is the mode of a kill run (Config.Kill), and Kill its
	// figures around the outage.
	KillMode KillMode
	Kill     KillResult
	// Moved is the exact fraction of keys whose node changes at the
	// reshard (ring.Moved, or ring.Compare for mod-N).
	Moved float64
	// Steps has one entry per step; step ReshardAt is the first after the
	// reshard.
	Steps []Step

	// SteadyHitRate and SteadyDBLoad are the means over the steps before
	// the reshard, and SteadyPeakDBLoad the highest load among them: how far
	// the load strays from its mean by chance alone.
	SteadyHitRate, SteadyDBLoad float64
	SteadyPeakDBLoad            int64
	// MinHitRate is the lowest hit rate from the reshard on, at step
	// MinHitStep; PeakDBLoad the highest database load, at PeakDBStep.
	MinHitRate float64
	MinHitStep int
	PeakDBLoad int64
	PeakDBStep int

	// Total is the sum of Steps.
	Total Step
	// Backfills are the copies a dual-ring migration's reads wrote to new
	// owners.
	Backfills int64
	// Swept are the keys ModeSweep's sweep copied to their new owners.
	Swept int64
	// WaveKeys are the wave's keys read at its step (Config.ExpiryWave),
	// and WaveReaders the processes that read each, summed: what the wave
	// costs the database with a lease or StaleWhileRevalidate (a load per
	// key), and at most without (a load per process that reads a key).
	WaveKeys, WaveReaders int
	// Late counts the steps, on real servers, whose requests took longer
	// than Step; the run then lags the clock and the TTLs.
	Late int
}

// Result is a whole run.
type Result struct {
	// Config is the configuration run, with defaults applied.
	Config Config
	// Modes has one result per mode, in Config.Modes order (in a wave run
	// per loading, in Config.Loadings order).
	Modes []ModeResult
	// Elapsed is the wall time of the run.
	Elapsed time.Duration
}

// seriesNames returns the names of the runs that Run makes side by side,
// each of Steps steps: the modes, a wave run's loadings or a kill run's
// kill modes.
func (c *Config) seriesNames() []string {
	var names []string
	switch {
	case c.Kill != "":
		for _, k := range c.KillModes {
			names = append(names, k.String())
		}
	case c.ExpiryWave > 0:
		for _, l := range c.Loadings {
			names = append(names, l.String())
		}
	default:
		for _, m := range c.Modes {
			names = append(names, m.String())
		}
	}
	return names
}

// Work returns the total that Run passes to Progress: the steps of every
// mode (loading, kill mode) of c, defaults applied, which run side by side;
// Progress is called once per step of each, so a progress bar of this
// total fills as the run ends, not when its first mode does.
func (c Config) Work() int {
	c.setDefaults()
	return len(c.seriesNames()) * c.Steps
}

// Run simulates cfg. It returns an error wrapping ErrBadConfig for a
// configuration that cannot run, or the first failure to set up a mode;
// failed cache operations during the run are counted, not returned.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.init(); err != nil {
		return nil, err
	}
	begin := time.Now()
	w := newWorkload(&cfg)
	res := &Result{Config: cfg}

	names := cfg.seriesNames()
	res.Modes = make([]ModeResult, len(names))
	var done atomic.Int64
	total := len(names) * cfg.Steps // Work's
	progress := func() {
		if cfg.Progress != nil {
			cfg.Progress(int(done.Add(1)), total)
		}
	}
	// On real servers every mode writes keys of its own, new on every run.
	run := strconv.FormatInt(begin.UnixNano(), 36)

	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			var cl *cluster
			prefix := ""
			if cfg.Servers == nil {
				cl, errs[i] = embeddedCluster(&cfg)
				if errs[i] != nil {
					return
				}
			} else {
				cl = realCluster(&cfg)
				prefix = "shardcache-sim:" + run + ":" + name + ":"
			}
			defer cl.close()
			switch {
			case cfg.ExpiryWave > 0:
				res.Modes[i], errs[i] = runWave(ctx, &cfg, w, cfg.Loadings[i], cl, prefix, progress)
			case cfg.Kill != "":
				res.Modes[i], errs[i] = runKill(ctx, &cfg, w, cfg.KillModes[i], cl, progress)
			default:
				res.Modes[i], errs[i] = runMode(ctx, &cfg, w, cfg.Modes[i], cl, prefix, progress)
			}
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", name, errs[i])
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(begin)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return res, nil
}

// count writes n and the noun, singular when n is 1: "1 server", "2 servers".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// ring builds the ring of nodes the run's clients build: Vnodes, Equalize.
func (c *Config) ring(nodes []ring.Node) (*ring.Ring, error) {
	return topology.Ring(nodes, c.Vnodes, c.Equalize)
}
