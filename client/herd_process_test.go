package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// The herd across processes: TestHerdAcrossProcesses is TestHerdOnExpiredKey
// with its three clients in three OS processes of their own, each this test
// binary re-run as TestHerdChild. A child makes one client on the nodes the
// parent gives it, and then runs rounds: on a line "herd <key> <ttl>" it
// starts its callers, blocked, and prints "ready"; on "go" (which the parent
// sends to all three once all are ready) it lets them call GetOrLoad at once,
// waits for them and for its background refreshes, and prints a JSON
// herdReport. It ends when its standard input does.

// herdChildEnv names the environment variable that carries a child's
// herdParams, as JSON; unset, TestHerdChild does nothing.
const herdChildEnv = "SHARDCACHE_HERD_CHILD"

// herdParams is what a child process is told.
type herdParams struct {
	Backend  Backend
	Nodes    []ring.Node
	SWR      time.Duration // Options.StaleWhileRevalidate
	Callers  int           // goroutines calling GetOrLoad in each round
	LoadTime time.Duration // how long the loader takes
}

// herdReport is what a child did in one round.
type herdReport struct {
	Loads     int64           // loader calls
	Latencies []time.Duration // one per caller, as GetOrLoad took
	Values    map[string]int  // callers per value answered
	Errors    []string        // callers that failed
	Stats     LoadStats       // what the round added to the client's LoadStats
}

// TestHerdChild is a process of TestHerdAcrossProcesses; it does nothing in
// a normal run.
func TestHerdChild(t *testing.T) {
	env := os.Getenv(herdChildEnv)
	if env == "" {
		t.Skip("run by TestHerdAcrossProcesses")
	}
	var p herdParams
	if err := json.Unmarshal([]byte(env), &p); err != nil {
		t.Fatal(err)
	}
	opts := herdOptions(p.SWR)
	opts.Backend, opts.Nodes = p.Backend, p.Nodes
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var loads atomic.Int64
	load := func(context.Context) ([]byte, error) {
		loads.Add(1)
		time.Sleep(p.LoadTime) // the database's time, not a synchronisation
		return []byte("fresh"), nil
	}
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var key string
		var ttl time.Duration
		if _, err := fmt.Sscanf(in.Text(), "herd %s %d", &key, &ttl); err != nil {
			t.Fatalf("line %q: %v", in.Text(), err)
		}
		rep := herdReport{Latencies: make([]time.Duration, p.Callers), Values: map[string]int{}}
		values := make([]string, p.Callers)
		errs := make([]error, p.Callers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range p.Callers {
			wg.Go(func() {
				<-start
				t0 := time.Now()
				v, err := c.GetOrLoad(context.Background(), key, ttl, load)
				rep.Latencies[i] = time.Since(t0)
				values[i], errs[i] = string(v), err
			})
		}
		loads.Store(0)
		before := c.LoadStats()
		fmt.Println("ready")
		if !in.Scan() || in.Text() != "go" {
			close(start)
			wg.Wait()
			t.Fatalf("want a line go, got %q (%v)", in.Text(), in.Err())
		}
		close(start)
		wg.Wait()
		c.refreshes.Wait() // a refresh this process won has stored
		rep.Loads = loads.Load()
		rep.Stats = c.LoadStats().minus(before)
		for i, v := range values {
			if errs[i] != nil {
				rep.Errors = append(rep.Errors, errs[i].Error())
				continue
			}
			rep.Values[v]++
		}
		if err := out.Encode(rep); err != nil {
			t.Fatal(err)
		}
	}
}

// herdOptions are the options of every client of the herd, the parent's
// and its children's: leases in the read's round trip, and with swr
// StaleWhileRevalidate. The pools hold a third of a herd's callers.
func herdOptions(swr time.Duration) Options {
	return Options{
		Lease: testLease, MetaLeases: true, PoolSize: 64, StaleWhileRevalidate: swr,
		// Generous, as cluster.client's: the machine is shared.
		DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	}
}

// herdProcess is one child process, seen from the parent.
type herdProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr strings.Builder
}

// herdFleet is the parent's end of three child processes.
type herdFleet struct {
	t     *testing.T
	procs []*herdProcess
}

// startHerd starts n child processes with p, and stops them when the test
// ends.
func startHerd(t *testing.T, n int, p herdParams) *herdFleet {
	t.Helper()
	env, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	f := &herdFleet{t: t}
	for range n {
		h := &herdProcess{lines: make(chan string, 4)}
		h.cmd = exec.Command(os.Args[0], "-test.run=^TestHerdChild$", "-test.count=1")
		h.cmd.Env = append(os.Environ(), herdChildEnv+"="+string(env))
		testserver.LinkToParent(h.cmd)
		h.cmd.Stderr = &h.stderr
		if h.stdin, err = h.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := h.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := h.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(nil, 1<<20) // a report's latencies
			for sc.Scan() {
				h.lines <- sc.Text()
			}
			close(h.lines)
		}()
		f.procs = append(f.procs, h)
	}
	t.Cleanup(func() {
		for i, h := range f.procs {
			h.stdin.Close() // the child's last round is over: it exits
			for range h.lines {
			}
			if err := h.cmd.Wait(); err != nil {
				t.Errorf("process %d: %v\n%s", i, err, h.stderr.String())
			}
		}
	})
	return f
}

// line returns process i's next line of its own (the test framework's
// "PASS" and the like are skipped), within a bound of 3 minutes: a hang
// detector, far above a round's time on a busy machine.
func (f *herdFleet) line(i int) string {
	f.t.Helper()
	h := f.procs[i]
	timeout := time.After(3 * time.Minute)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				f.t.Fatalf("process %d ended early: %v\n%s", i, h.cmd.Wait(), h.stderr.String())
			}
			if l == "ready" || strings.HasPrefix(l, "{") {
				return l
			}
		case <-timeout:
			f.t.Fatalf("process %d: no line within 3 minutes\n%s", i, h.stderr.String())
		}
	}
}

// round has every process's callers GetOrLoad key with ttl at once, and
// returns the processes' reports and the latencies of all their callers,
// sorted.
func (f *herdFleet) round(key string, ttl time.Duration) ([]herdReport, []time.Duration) {
	f.t.Helper()
	send := func(line string) {
		for i, h := range f.procs {
			if _, err := io.WriteString(h.stdin, line+"\n"); err != nil {
				f.t.Fatalf("process %d: %v\n%s", i, err, h.stderr.String())
			}
		}
	}
	send(fmt.Sprintf("herd %s %d", key, ttl))
	for i := range f.procs {
		if l := f.line(i); l != "ready" {
			f.t.Fatalf("process %d: %q, want ready", i, l)
		}
	}
	send("go") // every process's callers are blocked on it
	reps := make([]herdReport, len(f.procs))
	var lat []time.Duration
	for i := range f.procs {
		if err := json.Unmarshal([]byte(f.line(i)), &reps[i]); err != nil {
			f.t.Fatalf("process %d: %v", i, err)
		}
		for _, e := range reps[i].Errors {
			f.t.Errorf("process %d: a caller failed: %s", i, e)
		}
		lat = append(lat, reps[i].Latencies...)
	}
	slices.Sort(lat)
	return reps, lat
}

// herdTotals adds up the processes' loads and the callers answered with value.
func herdTotals(reps []herdReport, value string) (loads int64, answered int) {
	for _, r := range reps {
		loads += r.Loads
		answered += r.Values[value]
	}
	return loads, answered
}

// TestHerdAcrossProcesses: 500 callers in 3 OS processes, each with its
// own client, on a hot key just past its TTL, on real servers. Exactly one
// load in the fleet, with or without StaleWhileRevalidate; without it every
// caller misses and the herd waits for the load (its p99 is at least the
// load's time, and well under the lease's: the waiters see the value when
// it lands, not when a lease runs out); with it every caller is answered at
// once (counted: no miss, no wait on a lease, the refresh's caller served
// stale), and the value is fresh after. Latencies are logged, not bounded:
// a busy machine stretches them.
func TestHerdAcrossProcesses(t *testing.T) {
	if os.Getenv(herdChildEnv) != "" {
		t.Skip("a child process")
	}
	const (
		procs    = 3
		callers  = 500
		loadTime = 50 * time.Millisecond
		long     = time.Minute // the TTL of the herd's loads: no second load within the test
	)
	for _, kind := range []string{"memcached", "redis-server"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 3)
			for _, swr := range []bool{false, true} {
				var soft time.Duration
				if swr {
					soft = time.Minute
				}
				// The hot key's TTL, and how long it takes the servers'
				// clocks to pass it. Memcached's TTLs are whole seconds and
				// its clock ticks whole seconds: an item of 1 s is gone
				// within 2 s, and its R compares whole seconds left.
				ttl, past := 300*time.Millisecond, 500*time.Millisecond
				switch {
				case kind == "memcached" && swr:
					ttl, past = time.Second, 3200*time.Millisecond
				case kind == "memcached":
					ttl, past = time.Second, 2200*time.Millisecond
				}
				t.Run(fmt.Sprintf("SWR=%v", swr), func(t *testing.T) {
					fleet := startHerd(t, procs, herdParams{
						Backend: cl.backend, Nodes: cl.nodes(), SWR: soft,
						Callers: (callers + procs - 1) / procs, LoadTime: loadTime,
					})
					setup := cl.client(t, herdOptions(soft))
					old := func(context.Context) ([]byte, error) { return []byte("old"), nil }
					// A plain hit, measured as the herd is: a key well within
					// its TTL on the hot key's node, whose connections a first
					// round dials.
					hot := fmt.Sprintf("hot-%v", swr)
					plain := ""
					for i := 0; plain == "" || setup.Locate(plain) != setup.Locate(hot); i++ {
						plain = fmt.Sprintf("plain-%d", i)
					}
					if _, err := setup.GetOrLoad(t.Context(), plain, long, old); err != nil {
						t.Fatal(err)
					}
					fleet.round(plain, long)
					// The hot key, just past its TTL.
					if _, err := setup.GetOrLoad(t.Context(), hot, ttl, old); err != nil {
						t.Fatal(err)
					}
					time.Sleep(past) // the servers' clocks must pass the TTL
					// and did: a late clock tick on a busy machine would leave the
					// old value.
					if !swr {
						waitFor(t, "the hot key's expiry", func() bool { return rawGet(t, kind, setup.Locate(hot).Addr, hot) == "" })
					}
					// The plain hits just before the herd, after the same
					// idle time.
					reps, base := fleet.round(plain, long)
					if loads, n := herdTotals(reps, "old"); loads != 0 || n != len(base) {
						t.Fatalf("plain hits: %d loads, %d of %d callers answered the value", loads, n, len(base))
					}
					reps, lat := fleet.round(hot, long)
					loads, stale := herdTotals(reps, "old")
					var st LoadStats
					for _, r := range reps {
						st = st.plus(r.Stats)
					}
					t.Logf("%s SWR %v, %d processes (race %v): %d loads (per process %v); %d of %d callers served stale; %+v; herd p50 %v p99 %v max %v, plain hit p99 %v",
						kind, swr, procs, raceEnabled, loads, loadsOf(reps), stale, len(lat), st, lat[len(lat)/2], p99(lat), lat[len(lat)-1], p99(base))
					if loads != 1 {
						t.Errorf("%d loads across %d processes, want exactly 1", loads, procs)
					}
					if swr {
						// Every caller is answered at once with the value it
						// has, the one that refreshes included.
						if _, fresh := herdTotals(reps, "fresh"); stale == 0 || stale+fresh != len(lat) {
							t.Errorf("%d callers served stale, %d fresh, of %d: want the stale value for the refresh's caller at least", stale, fresh, len(lat))
						}
						if st.Misses != 0 || st.LeaseWaits != 0 || st.Hits != int64(len(lat)) || st.Stale == 0 {
							t.Errorf("LoadStats of the herd %+v: want %d hits, stale ones among them, no miss and no wait", st, len(lat))
						}
					} else {
						if stale != 0 {
							t.Errorf("%d callers answered the expired value", stale)
						}
						// Callers a busy machine started late may find the
						// load's value already there: hits, fresh.
						if st.Misses == 0 || st.Stale != 0 {
							t.Errorf("LoadStats of the herd %+v: want misses, nothing stale", st)
						}
						if p99(lat) < loadTime {
							t.Errorf("herd p99 %v under the load's %v: the herd did not wait for it", p99(lat), loadTime)
						}
						// A waiter sees the value once it lands (polling every
						// LeaseRetry), not when the lease (testLease) runs out.
						if p99(lat) > testLease/2 {
							t.Errorf("herd p99 %v: the waiters waited out the lease (%v), not the load (%v)", p99(lat), testLease, loadTime)
						}
					}
					mustGet(t, setup, hot, "fresh")
				})
			}
		})
	}
}

// loadsOf lists each process's loads.
func loadsOf(reps []herdReport) []int64 {
	var l []int64
	for _, r := range reps {
		l = append(l, r.Loads)
	}
	return l
}
