package chaos_test

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/chaos"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/internal/testserver/faultproxy"
	"github.com/shardcache/shardcache/ring"
)

// Client settings of every run: low timeouts and a breaker that opens after
// two failures, so that faults open and close it.
const (
	clientTimeout = 200 * time.Millisecond
	probeInterval = 100 * time.Millisecond
	opTimeout     = time.Second
	lease         = time.Second // Memcached's leases last whole seconds
	// loadTTL is the TTL of GetOrLoad's values in a run with
	// stale-while-revalidate: short, so that values go stale and are
	// reloaded in the background many times a run.
	loadTTL = time.Second
)

// With replicas, at least one server fault in replicaPauses is a pause: a
// paused replica misses the writes the others take and comes back with its
// old values, which no other kind shows (a killed one comes back empty).
// Drawn evenly, a sixth are pauses, and a short run's 11 faults have none
// one time in seven.
const replicaPauses = 4

// run is one run of the harness: servers, proxies, worker processes and a
// fault schedule, then the check of the merged history.
type run struct {
	Backend    string
	Procs      int
	Goroutines int
	Duration   time.Duration
	// ReshardAt and Window place the migration from 4 nodes to 5, or with
	// Remove from 5 to 4, n4 leaving (Window 0: none, 5 nodes throughout).
	ReshardAt, Window time.Duration
	Remove            bool
	// Readd makes the migration (4 → 5) add back a node that still holds
	// old values: before the run a prefill process writes over all five
	// nodes (the cold keys included), then n4 leaves at once, recorded as
	// a Reshard of window 0 (its keys out of reach). As a change's
	// publisher does, the harness checks n4 (client.CheckEmpty must refuse
	// it) and flushes it, unless Unflushed: the publisher that skips the
	// check, whose run must show the old values read.
	Readd, Unflushed bool
	Seed             uint64
	// Faults is how many server faults to draw (0: none); a migration adds
	// a client process killed in its middle unless NoClientKill.
	Faults       int
	NoClientKill bool
	// Planned are faults placed by hand, beside the drawn ones: a seeded
	// bug's run puts its faults where the bug matters.
	Planned    []chaos.Planned
	Async      int // processes on AsyncBackfill
	FailOpen   bool
	MetaLeases bool // GetOrLoad's leases taken by its reads
	// Replicas keeps every key on that many nodes (client.Options.Replicas,
	// 0 or 1: one); above 1, GetOrLoad takes no lease (Replicas refuses
	// Lease and MetaLeases) and the schedule pauses a node in a quarter of
	// its faults (replicaPauses).
	Replicas int
	Bug      chaos.Bug
	Tags     string // the worker's build tags
	// SeededBug turns on one of the client's seeded bugs (client/seeded.go,
	// by its name): the worker is built with the tag shardcache_seeded and
	// run with SHARDCACHE_SEEDED_BUG.
	SeededBug string
	// NearCache, above 0, gives every client a near cache of that MaxAge
	// (ClientConfig.NearCache), and the checker a staleness bound
	// (run.staleness).
	NearCache time.Duration
	// SWR, above 0, gives every client StaleWhileRevalidate of that long,
	// GetOrLoad's values a TTL of loadTTL (ClientConfig.LoadTTL).
	SWR time.Duration
	// Gutter gives every client a gutter pool of one server of its own,
	// which no fault touches (client.Options.Gutter).
	Gutter bool
	Keys   int
	// ColdKeys are written once before the migration and read through it
	// (chaos.WorkerConfig.ColdKeys); 0: none.
	ColdKeys int
	Mix      chaos.Mix
}

// replicated reports whether the run keeps keys on several nodes.
func (rc run) replicated() bool { return rc.Replicas > 1 }

// outcome is what a run produced.
type outcome struct {
	h        *chaos.History
	res      *chaos.Result
	schedule chaos.Schedule
	dir      string
	// read and check are how long reading the history and checking it took.
	read, check time.Duration
	// cold is what the run read of its cold keys.
	cold coldStats
}

// replay is the command line that replays the run's schedule, from the
// repository's root (internal/chaos is a module of its own: -C).
func (rc run) replay() string {
	s := fmt.Sprintf("go test -C internal/chaos -run 'TestChaos$' -v -args -chaos.seed=%d -chaos.runs=1 -chaos.backend=%s"+
		" -chaos.async=%d -chaos.duration=%v -chaos.faults=%d -chaos.procs=%d -chaos.goroutines=%d -chaos.replicas=%d",
		rc.Seed, rc.Backend, rc.Async, rc.Duration, rc.Faults, rc.Procs, rc.Goroutines, max(1, rc.Replicas))
	if rc.FailOpen {
		s += " -chaos.failopen"
	}
	if rc.MetaLeases {
		s += " -chaos.metaleases=1"
	} else {
		s += " -chaos.metaleases=0"
	}
	if rc.Tags != "" {
		s += " -chaos.tags=" + rc.Tags
	}
	change := "add"
	switch {
	case rc.Remove:
		change = "remove"
	case rc.Readd:
		change = "readd"
	}
	s += fmt.Sprintf(" -chaos.cold=%d -chaos.change=%s", rc.ColdKeys, change)
	if rc.NearCache > 0 {
		s += fmt.Sprintf(" -chaos.near=%v", rc.NearCache)
	}
	s += fmt.Sprintf(" -chaos.swr=%v", rc.SWR)
	if rc.Gutter {
		s += " -chaos.gutter=1"
	}
	if rc.SeededBug != "" {
		s += " -chaos.bug=" + rc.SeededBug
	}
	return s
}

// do runs rc and checks its history. Servers and proxies are stopped in t's
// cleanup.
func (rc run) do(t *testing.T) outcome {
	t.Helper()
	worker := buildWorker(t, rc.workerTags())
	servers := rc.start(t, 5)
	proxies := make([]*faultproxy.Proxy, len(servers))
	nodes := make([]ring.Node, len(servers))
	for i, s := range servers {
		proxies[i] = faultproxy.New(t, s.Addr)
		nodes[i] = ring.Node{Name: fmt.Sprintf("n%d", i), Addr: proxies[i].Addr}
	}
	sc := chaos.ScheduleConfig{Duration: rc.Duration, Nodes: len(nodes), Procs: rc.Procs,
		Faults: rc.Faults, ReshardAt: rc.ReshardAt, Window: rc.Window, ClientTimeout: clientTimeout}
	if rc.replicated() && rc.Faults > 0 {
		sc.Pauses = max(1, rc.Faults/replicaPauses)
	}
	if rc.NoClientKill {
		sc.Procs = 0
	}
	sched := chaos.NewSchedule(rc.Seed, sc)
	if rc.Faults == 0 {
		sched.Faults = slices.DeleteFunc(sched.Faults, func(p chaos.Planned) bool { return p.Kind != chaos.KillClient })
	}
	sched.Faults = append(sched.Faults, rc.Planned...)
	slices.SortStableFunc(sched.Faults, func(a, b chaos.Planned) int { return cmp.Compare(a.At, b.At) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("schedule: %s", sched)
		}
	})

	dir := t.TempDir()
	clientCfg := chaos.ClientConfig{FailOpen: rc.FailOpen, FailureThreshold: 2,
		ProbeInterval: probeInterval, Timeout: clientTimeout, Lease: lease, MetaLeases: rc.MetaLeases,
		Replicas: rc.Replicas, NearCache: rc.NearCache, StaleWhileRevalidate: rc.SWR}
	if rc.SWR > 0 {
		clientCfg.LoadTTL = loadTTL
	}
	if rc.replicated() {
		clientCfg.Lease = 0
	}
	if rc.Gutter {
		clientCfg.Gutter = []string{rc.start(t, 1)[0].Addr}
	}
	var left int64
	if rc.Readd {
		left = rc.prefill(t, worker, dir, nodes, clientCfg)
	}
	start := time.Now().Add(500 * time.Millisecond)
	end := start.Add(rc.Duration)
	info := chaos.RunInfo{Backend: rc.Backend, Seed: rc.Seed, Start: start.UnixNano(), Schedule: sched.String(), Replicas: rc.Replicas, Gutter: rc.Gutter}
	base := chaos.WorkerConfig{
		Backend: rc.Backend, New: nodes,
		Start: start.UnixNano(), End: end.UnixNano(),
		Goroutines: rc.Goroutines, Keys: rc.Keys, Counters: 8, ColdKeys: rc.ColdKeys, Mix: rc.Mix, Seed: rc.Seed,
		Client:    clientCfg,
		OpTimeout: opTimeout, Bug: rc.Bug,
	}
	if rc.Window > 0 {
		base.Old = nodes[:4]
		if rc.Remove {
			base.Old, base.New = nodes, nodes[:4]
		}
		base.ReshardAt = start.Add(rc.ReshardAt).UnixNano()
		base.Window = rc.Window
		info.MigrationStart = base.ReshardAt
		info.MigrationEnd = start.Add(rc.ReshardAt + rc.Window).UnixNano()
	}

	f, err := os.Create(filepath.Join(dir, "run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec := chaos.NewRecorder(f)
	rec.Info(info)
	if left != 0 {
		// "window 0s," as moves reads a Reshard's window.
		rec.Fault(chaos.Fault{Kind: chaos.Reshard, Target: "harness", Start: left, End: left,
			Detail: "to 4 nodes, window 0s, n4 leaving with its keys (added back by the migration)"})
	}

	procs := make([]*proc, rc.Procs)
	for p := range procs {
		cfg := base
		cfg.Proc = p
		cfg.Client.AsyncBackfill = p < rc.Async
		cfg.Sweep = p == rc.Procs-1 && rc.Window > 0
		procs[p] = &proc{t: t, bin: worker, dir: dir, cfg: cfg, seededBug: rc.SeededBug}
		procs[p].start()
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill()
		}
	})

	applyFaults(t, start, sched, servers, proxies, procs, rec)

	for _, p := range procs {
		p.wait(end.Add(10 * time.Second))
	}
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := chaos.ReadFiles(files...)
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	staleness, staleKinds := rc.staleness()
	res := chaos.CheckWith(h, chaos.CheckOptions{
		Owners:    owners(t, base.Old, base.New, max(1, rc.Replicas)),
		Evictions: evictions(t, servers),
		FailOpen:  rc.FailOpen,
		// A timed-out request may land after a later one on a node no
		// fault touched (memcached's threads, the proxies' goroutines,
		// all starved under load): its failure is trouble too.
		Failures:   true,
		Staleness:  staleness,
		StaleKinds: staleKinds,
	})
	return outcome{h: h, res: res, schedule: sched, dir: dir, read: t1.Sub(t0), check: time.Since(t1),
		cold: coldOf(t, h, base.Old, base.New, max(1, rc.Replicas))}
}

// start starts n servers of rc's backend, stopped in t's cleanup.
func (rc run) start(t *testing.T, n int) []*testserver.Server {
	t.Helper()
	switch rc.Backend {
	case "redis":
		return testserver.Redis(t, n)
	case "memcached":
		return testserver.Memcached(t, n)
	}
	t.Fatalf("backend %q", rc.Backend)
	return nil
}

// prefill runs the prefill of a Readd run: one process (numbered after the
// run's) writing for 2 s over all five nodes, the cold keys first, and no
// counters (the counter rules know no placement change). Then n4
// leaves; the harness checks it as a publisher adding it back must
// (client.CheckEmpty refuses it), and flushes it unless rc.Unflushed. It
// returns when n4 left, for the history.
func (rc run) prefill(t *testing.T, worker, dir string, nodes []ring.Node, cc chaos.ClientConfig) int64 {
	t.Helper()
	ps := time.Now().Add(300 * time.Millisecond)
	cfg := chaos.WorkerConfig{Proc: rc.Procs, Backend: rc.Backend, New: nodes,
		Start: ps.UnixNano(), End: ps.Add(2 * time.Second).UnixNano(),
		Goroutines: 8, Keys: rc.Keys, ColdKeys: rc.ColdKeys, WritesCold: true, Mix: rc.Mix,
		Seed: rc.Seed ^ 0x9e3779b97f4a7c15, Client: cc, OpTimeout: opTimeout}
	p := &proc{t: t, bin: worker, dir: dir, cfg: cfg}
	p.start()
	p.wait(ps.Add(30 * time.Second))
	left := time.Now().UnixNano()

	b := client.Redis
	if rc.Backend == "memcached" {
		b = client.Memcached
	}
	c, err := client.New(client.Options{Backend: b, Nodes: nodes[4:]})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	if err := c.CheckEmpty(ctx, nodes[4:]); !errors.Is(err, client.ErrNodeNotEmpty) {
		t.Fatalf("CheckEmpty of n4 after the prefill: %v, want ErrNodeNotEmpty", err)
	}
	if !rc.Unflushed {
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.CheckEmpty(ctx, nodes[4:]); err != nil {
			t.Fatalf("CheckEmpty of n4 after its flush: %v", err)
		}
	}
	return left
}

// coldStats is what a run read of its cold keys (chaos.ColdKey).
type coldStats struct {
	// Written counts the cold keys whose write was acknowledged.
	Written int
	// Reads, Hits and Misses count the reads of cold keys (a GetMulti's
	// keys one each) that began in the migration's window; Moved the cold
	// keys whose owners the migration changed, and MovedRead those of
	// them read in the window, MovedMisses the misses of those reads.
	Reads, Hits, Misses           int
	Moved, MovedRead, MovedMisses int
}

func (c coldStats) String() string {
	return fmt.Sprintf("%d cold keys written, %d of them moved; in the window %d cold reads (%d hits, %d misses), %d moved keys read (%d misses)",
		c.Written, c.Moved, c.Reads, c.Hits, c.Misses, c.MovedRead, c.MovedMisses)
}

// coldOf counts what h read of its cold keys, a key moved when its owners
// on new differ from those on old.
func coldOf(t *testing.T, h *chaos.History, old, new []ring.Node, replicas int) coldStats {
	t.Helper()
	var c coldStats
	var rings []*ring.Ring
	for _, nodes := range [][]ring.Node{old, new} {
		if len(nodes) == 0 {
			return c
		}
		r, err := ring.New(nodes)
		if err != nil {
			t.Fatal(err)
		}
		rings = append(rings, r)
	}
	movedOf := make(map[string]bool)
	moved := func(key string) bool {
		m, ok := movedOf[key]
		if !ok {
			names := func(r *ring.Ring) string {
				var s []string
				for _, n := range ring.LocateN(r, key, replicas) {
					s = append(s, n.Name)
				}
				slices.Sort(s)
				return strings.Join(s, ",")
			}
			m = names(rings[0]) != names(rings[1])
			movedOf[key] = m
		}
		return m
	}
	lo, hi := h.Info.MigrationStart, h.Info.MigrationEnd
	written := make(map[string]bool)
	read := make(map[string]bool)
	for _, o := range h.Ops {
		if o.Kind == chaos.SetMulti {
			for _, k := range o.Keys {
				if strings.HasPrefix(k, chaos.ColdPrefix) && (o.Status == chaos.OK || o.Results[k] == chaos.AckedKey) {
					written[k] = true
				}
			}
			continue
		}
		if (o.Kind != chaos.Get && o.Kind != chaos.GetMulti) || o.Inv < lo || o.Inv > hi {
			continue
		}
		for _, k := range o.Keys {
			if !strings.HasPrefix(k, chaos.ColdPrefix) {
				continue
			}
			var hit, miss bool
			if o.Kind == chaos.Get {
				hit, miss = o.Status == chaos.OK, o.Status == chaos.Miss
			} else if _, ok := o.Results[k]; ok {
				hit = true
			} else {
				miss = o.Status == chaos.OK
			}
			if !hit && !miss {
				continue
			}
			c.Reads++
			if hit {
				c.Hits++
			} else {
				c.Misses++
			}
			if moved(k) {
				read[k] = true
				if miss {
					c.MovedMisses++
				}
			}
		}
	}
	c.Written, c.MovedRead = len(written), len(read)
	for k := range written {
		if moved(k) {
			c.Moved++
		}
	}
	return c
}

// owners returns, for the checker, every node that may hold a key in a run
// over the placements old (nil: none) and new: its replica set in each.
func owners(t *testing.T, old, new []ring.Node, replicas int) func(string) []string {
	t.Helper()
	var rings []*ring.Ring
	for _, nodes := range [][]ring.Node{old, new} {
		if len(nodes) == 0 {
			continue
		}
		r, err := ring.New(nodes)
		if err != nil {
			t.Fatal(err)
		}
		rings = append(rings, r)
	}
	return func(key string) []string {
		var names []string
		for _, r := range rings {
			for _, n := range ring.LocateN(r, key, replicas) {
				if !slices.Contains(names, n.Name) {
					names = append(names, n.Name)
				}
			}
		}
		return names
	}
}

// evictions reads what each server evicted, by node name ("n0"…): the
// servers are sized so that none does, and the checker's lost-key rule
// counts on it.
func evictions(t *testing.T, servers []*testserver.Server) map[string]int64 {
	t.Helper()
	ev := make(map[string]int64, len(servers))
	for i, s := range servers {
		ev[fmt.Sprintf("n%d", i)] = s.Evictions(t)
	}
	return ev
}

// applyFaults applies the schedule's faults at their times, on the test's
// goroutine (testserver's Restart and the proxies fail the test from it),
// recording each as applied.
func applyFaults(t *testing.T, start time.Time, sched chaos.Schedule, servers []*testserver.Server,
	proxies []*faultproxy.Proxy, procs []*proc, rec *chaos.Recorder) {
	t.Helper()
	type action struct {
		at    time.Duration
		p     chaos.Planned
		begin bool
		begun *chaos.Fault
	}
	var acts []*action
	for _, p := range sched.Faults {
		b := &action{at: p.At, p: p, begin: true, begun: new(chaos.Fault)}
		acts = append(acts, b, &action{at: p.At + p.For, p: p, begun: b.begun})
	}
	slices.SortStableFunc(acts, func(a, b *action) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		if a.begin != b.begin { // an end first, so its node is free again
			if a.begin {
				return 1
			}
			return -1
		}
		return 0
	})
	for _, a := range acts {
		wait(time.Until(start.Add(a.at)))
		now := time.Now().UnixNano()
		p := a.p
		if a.begin {
			*a.begun = chaos.Fault{Kind: p.Kind, Target: fmt.Sprintf("n%d", p.Target), Start: now}
			switch p.Kind {
			case chaos.KillServer:
				servers[p.Target].Stop()
			case chaos.PauseServer:
				servers[p.Target].Pause()
			case chaos.Latency, chaos.Timeout:
				proxies[p.Target].Latency(p.Delay)
				a.begun.Detail = fmt.Sprintf("delay %v", p.Delay)
			case chaos.Reset:
				proxies[p.Target].ResetPeer()
			case chaos.Partition:
				proxies[p.Target].BlackHole()
			case chaos.KillClient:
				a.begun.Target = fmt.Sprintf("p%d", p.Target)
				procs[p.Target].kill()
			}
			continue
		}
		switch p.Kind {
		case chaos.KillServer:
			servers[p.Target].Restart()
		case chaos.PauseServer:
			servers[p.Target].Resume()
		case chaos.KillClient:
			procs[p.Target].restart()
		default:
			proxies[p.Target].Clear()
		}
		a.begun.End = time.Now().UnixNano()
		rec.Fault(*a.begun)
	}
}

// wait waits for d, a step of the schedule.
func wait(d time.Duration) {
	if d <= 0 {
		return
	}
	<-time.After(d)
}

// proc is one worker process and its incarnations.
type proc struct {
	t   *testing.T
	bin string
	dir string
	cfg chaos.WorkerConfig
	// seededBug is the client's seeded bug the process runs with, if any.
	seededBug string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan error
	output string
	killed bool
}

func (p *proc) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	name := fmt.Sprintf("p%d.%d", p.cfg.Proc, p.cfg.Incarnation)
	p.cfg.History = filepath.Join(p.dir, name+".jsonl")
	b, err := json.Marshal(p.cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	p.output = filepath.Join(p.dir, name+".out")
	out, err := os.Create(p.output)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(p.bin)
	cmd.Env = append(os.Environ(), chaos.WorkerEnv+"="+string(b))
	if p.seededBug != "" {
		cmd.Env = append(cmd.Env, "SHARDCACHE_SEEDED_BUG="+p.seededBug)
	}
	testserver.LinkToParent(cmd)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		p.t.Fatalf("start worker: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- cmd.Wait()
		out.Close()
	}()
	p.cmd, p.done, p.killed = cmd, done, false
}

// kill kills the running incarnation with SIGKILL and waits for it.
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd, p.killed = nil, true
}

// restart starts the next incarnation.
func (p *proc) restart() {
	p.cfg.Incarnation++
	p.start()
}

// wait waits for the running incarnation to exit by itself, failing the
// test if it fails or outlives deadline.
func (p *proc) wait(deadline time.Time) {
	p.t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case err := <-done:
		p.mu.Lock()
		p.cmd = nil
		p.mu.Unlock()
		if err != nil {
			out, _ := os.ReadFile(p.output)
			p.t.Fatalf("worker p%d.%d: %v\n%s", p.cfg.Proc, p.cfg.Incarnation, err, out)
		}
	case <-time.After(time.Until(deadline)):
		// SIGQUIT first: the Go runtime prints every goroutine's stack
		// into the output, which says where it hangs.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
			p.mu.Lock()
			p.cmd = nil
			p.mu.Unlock()
		case <-time.After(5 * time.Second):
			p.kill()
		}
		out, _ := os.ReadFile(p.output)
		p.t.Fatalf("worker p%d.%d did not end by itself\n%s", p.cfg.Proc, p.cfg.Incarnation, out)
	}
}

// The workers are built once per set of build tags.
var (
	workersMu sync.Mutex
	workers   = map[string]string{}
	workerDir string
)

// buildWorker builds cmd/chaosworker with tags (the seeded bugs of the
// system under test), without the race detector: the workers are the load,
// and three race-instrumented ones would slow the servers' machine.
func buildWorker(t *testing.T, tags string) string {
	t.Helper()
	workersMu.Lock()
	defer workersMu.Unlock()
	if bin, ok := workers[tags]; ok {
		return bin
	}
	bin := filepath.Join(workerDir, "chaosworker-"+strings.NewReplacer(",", "_", " ", "_").Replace(tags))
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-tags", tags, "-o", bin, "./cmd/chaosworker")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the worker (tags %q): %v\n%s", tags, err, out)
	}
	workers[tags] = bin
	return bin
}

// workerTags are the build tags of the run's workers: Tags, and
// shardcache_seeded for a seeded bug.
func (rc run) workerTags() string {
	if rc.SeededBug == "" {
		return rc.Tags
	}
	return strings.TrimPrefix(rc.Tags+",shardcache_seeded", ",")
}

// staleness is the checker's bound for the run's clients, and the kinds
// of read it applies to (nil: every kind).
//
// With a near cache and several processes, its MaxAge, for the reads a
// near cache answers. A copy's age counts from before its read was sent
// (internal/near's Reserve), so it holds every write over by then and is
// served no longer than MaxAge after: nothing more is allowed for the
// read's own time. A single process drops its own copies as it writes: no
// bound.
//
// With a gutter, gutterLag more, for every read: the processes' breakers
// flip at their own times, and one that holds a node down reads its gutter
// while another writes home (client/gutter.go's bound).
func (rc run) staleness() (time.Duration, []chaos.Kind) {
	var d time.Duration
	kinds := nearKinds
	if rc.NearCache > 0 && rc.Procs >= 2 {
		d = rc.NearCache
	}
	if rc.Gutter {
		d, kinds = d+gutterLag, nil
	}
	return d, kinds
}

// gutterLag is client/gutter.go's bound on how far a read may be behind
// with a gutter pool, for the harness's clients: two ProbeIntervals (a
// tick to find the node marked up elsewhere, or its log written), and the
// bound of a probe and of a replay's round trip.
const gutterLag = 2*probeInterval + 2*clientTimeout

// nearKinds are the reads a near cache may answer, which the staleness
// bound applies to; every other (GetItem's CAS read, counters' Incr) is
// held to what was over when it began.
var nearKinds = []chaos.Kind{chaos.Get, chaos.GetMulti, chaos.GetOrLoad, chaos.GetMultiOrLoad, chaos.RedisGet}
