package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// TestKillOneOfEight is issue 23's criterion: one node of 8 real
// redis-servers is killed (SIGKILL) under a read-through workload, in three
// runs of the same test, whose figures it logs side by side: FailOpen alone
// (today's figure: the dead node's keys miss and load for as long as it is
// down), FailOpen with a gutter of one node (back to 95% of the steady hit
// rate within 30 s) and Replicas: 2 alone (at least 99% of the steady hit
// rate in every window after the breaker opened, no error to a caller nor
// around a load from the kill on, and a database peak of at most ×1.1 the
// steady load).
//
// The workload is stationary, so that a window after the kill compares with
// the steady ones: 8 goroutines call GetOrLoad, 19 calls in 20 on a Zipf
// over 4000 hot keys that start cached (their misses are what the kill
// causes) and every 20th on a key read once, a miss and one load whatever
// happens (the database's steady load). Windows are counted in calls
// (LoadStats), not in time.
func TestKillOneOfEight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a workload over 9 servers, three times")
	}
	rows := []struct {
		name string
		opts func(nodes []ring.Node, gutter string) Options
	}{
		{"failopen", func(nodes []ring.Node, _ string) Options {
			return Options{Nodes: nodes, FailOpen: true}
		}},
		{"gutter", func(nodes []ring.Node, gutter string) Options {
			return Options{Nodes: nodes, FailOpen: true, Gutter: []ring.Node{{Name: "g", Addr: gutter}}}
		}},
		{"replicas=2", func(nodes []ring.Node, _ string) Options {
			return Options{Nodes: nodes, Replicas: 2}
		}},
	}
	results := make([]availResult, len(rows))
	for i, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			ss := testserver.Redis(t, 9)
			nodes := make([]ring.Node, 8)
			for j := range nodes {
				nodes[j] = ring.Node{Name: fmt.Sprintf("n%d", j), Addr: ss[j].Addr}
			}
			opts := row.opts(nodes, ss[8].Addr)
			opts.FailureThreshold, opts.ProbeInterval = 2, time.Second
			c, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := killOneOfEight(t, c, ss[3], row.name == "gutter")
			results[i] = r
			t.Log(r)
			switch row.name {
			case "failopen":
				if r.minRatio >= 0.99 {
					t.Errorf("failopen: %.3f of steady at the lowest with a node of 8 down: the test shows nothing", r.minRatio)
				}
			case "gutter":
				if r.recovered < 0 {
					t.Errorf("gutter: %.3f of steady in the last window, 30 s after the kill; want 0.95", r.lastRatio)
				}
			case "replicas=2":
				if r.minRatio < 0.99 {
					t.Errorf("replicas=2: %.4f of steady in a window after the breaker opened; want at least 0.99", r.minRatio)
				}
				// A load's store to a key of the dead node reaches its other
				// replica but is not acknowledged (the dead one missed it):
				// a cache error, counted, never the caller's.
				if r.callerErrors != 0 {
					t.Errorf("replicas=2: %d errors returned to callers from the kill on; want none", r.callerErrors)
				}
				if r.peakRatio > 1.1 {
					t.Errorf("replicas=2: the database's peak is ×%.3f its steady load per window; want at most ×1.1", r.peakRatio)
				}
			}
		})
	}
	var b strings.Builder
	for i, row := range rows {
		fmt.Fprintf(&b, "\n%-10s %v", row.name, results[i])
	}
	t.Logf("kill 1 of 8 (n3), the same run:%s", b.String())
}

// availWindow is the calls of one window of calls, as LoadStats counts them.
const availWindow = 5000

// availResult is one run's figures.
type availResult struct {
	steadyHit   float64 // the hit rate over the steady windows
	steadyLoads float64 // the loader calls per window, steady
	steadyRate  float64 // calls per second, steady
	afterRate   float64 // calls per second, in the windows after the breaker opened
	// The kill's window: from the kill until the breaker held the node
	// down, its calls and hit rate.
	killCalls int64
	killHit   float64
	// After the breaker opened, in windows of availWindow calls: the
	// lowest hit rate against steady, the last, the highest loads per
	// window against steady.
	windows              int
	minRatio, lastRatio  float64
	peakRatio            float64
	recovered            time.Duration // from the kill to the end of the first window at 95% of steady; -1 never
	callerErrors         int64         // GetOrLoad errors from the kill on
	cacheErrors          int64         // LoadStats.CacheErrors from the kill on
	guttered, replMissed int64         // Health of the dead node
}

func (r availResult) String() string {
	back := "never"
	if r.recovered >= 0 {
		back = r.recovered.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("steady hit %.4f, %.0f loads per %d calls, %.0f calls/s (after: %.0f); kill to breaker open: %d calls at hit %.3f; after, %d windows: min hit ×%.4f of steady, last ×%.4f, loads peak ×%.3f of steady; 95%% of steady after %s; errors to callers %d, cache errors %d; guttered %d, replica missed %d",
		r.steadyHit, r.steadyLoads, availWindow, r.steadyRate, r.afterRate, r.killCalls, r.killHit, r.windows, r.minRatio, r.lastRatio, r.peakRatio, back,
		r.callerErrors, r.cacheErrors, r.guttered, r.replMissed)
}

// killOneOfEight runs the workload on c, kills victim once it is steady,
// and measures the windows after: at least six, and with a gutter until
// the hit rate is back to 95% of steady, 30 s at most.
func killOneOfEight(t *testing.T, c *Client, victim *testserver.Server, gutter bool) availResult {
	const hot = 4000
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	prefill := make(map[string][]byte, hot)
	for k := range hot {
		prefill[fmt.Sprintf("row:%d", k)] = []byte("row")
	}
	if err := c.SetMulti(ctx, prefill, time.Hour); err != nil {
		t.Fatal(err)
	}
	load := func(context.Context) ([]byte, error) { return []byte("row"), nil }
	var errs atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			z := rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 1)), 1.1, 1, hot-1)
			for n := 0; ctx.Err() == nil; n++ {
				key := fmt.Sprintf("row:%d", z.Uint64())
				if n%20 == 19 {
					key = fmt.Sprintf("once:%d:%d", g, n)
				}
				if _, err := c.GetOrLoad(ctx, key, time.Hour, load); err != nil && ctx.Err() == nil {
					errs.Add(1)
				}
			}
		})
	}
	defer wg.Wait()
	defer cancel()

	// next waits for n more calls from s0 on, and returns the snapshot.
	next := func(s0 LoadStats, n int64) LoadStats {
		var s LoadStats
		waitFor(t, "the workload's calls", func() bool {
			s = c.LoadStats()
			return s.Hits+s.Misses-s0.Hits-s0.Misses >= n
		})
		return s
	}
	calls := func(a, b LoadStats) int64 { return b.Hits + b.Misses - a.Hits - a.Misses }
	hit := func(a, b LoadStats) float64 { return float64(b.Hits-a.Hits) / float64(calls(a, b)) }
	// loads is the loader calls between a and b, per availWindow calls.
	loads := func(a, b LoadStats) float64 {
		return float64(b.Loads-a.Loads) * availWindow / float64(calls(a, b))
	}

	s := next(c.LoadStats(), availWindow) // warm: connections, the loader's first keys
	steady0, t0 := s, time.Now()
	s = next(s, 4*availWindow)
	r := availResult{steadyHit: hit(steady0, s), steadyLoads: loads(steady0, s), recovered: -1,
		steadyRate: float64(calls(steady0, s)) / time.Since(t0).Seconds()}

	errs0, killed := errs.Load(), s
	victim.Stop()
	killedAt := time.Now()
	dead := healthIndex(c, victim.Addr)
	waitFor(t, "the node held down", func() bool { return c.Health()[dead].Down })
	opened := c.LoadStats()
	r.killCalls, r.killHit = calls(killed, opened), hit(killed, opened)
	r.minRatio = 2
	t0 = time.Now()
	for s = opened; ; {
		w := next(s, availWindow)
		ratio := hit(s, w) / r.steadyHit
		r.windows++
		r.minRatio, r.lastRatio = min(r.minRatio, ratio), ratio
		r.peakRatio = max(r.peakRatio, loads(s, w)/r.steadyLoads)
		if r.recovered < 0 && ratio >= 0.95 {
			r.recovered = time.Since(killedAt)
		}
		s = w
		if r.windows >= 6 && (!gutter || r.recovered >= 0) || time.Since(killedAt) > 30*time.Second {
			break
		}
	}
	r.afterRate = float64(calls(opened, s)) / time.Since(t0).Seconds()
	r.callerErrors, r.cacheErrors = errs.Load()-errs0, s.CacheErrors-killed.CacheErrors
	h := c.Health()[dead]
	r.guttered, r.replMissed = h.Guttered, h.ReplicaMissed
	return r
}

// healthIndex is the index in c.Health() of the node at addr.
func healthIndex(c *Client, addr string) int {
	for i, h := range c.Health() {
		if h.Node.Addr == addr {
			return i
		}
	}
	panic("no node " + addr)
}
