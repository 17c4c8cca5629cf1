package bench

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/testserver"
)

// Paired rows: on a machine whose cores the servers and other processes
// share, two rows run a minute apart see different loads, and their ratio
// moves with it (0.3× to 3× between runs, for the same code). A paired row
// runs the baseline and ours in alternating blocks of calls, pairRounds
// rounds of each, so both see the same load, and reports:
//
//   - cpu-ns/op and base-cpu-ns/op: the process's CPU time per call of ours
//     and of the baseline (getrusage, servers excluded);
//   - cpu-ratio: ours over the baseline, the figure to read;
//   - wall-ratio: the same for wall time (ns/op is ours alone);
//   - server-cpu-ns/op and base-server-cpu-ns/op, when the row names its
//     servers: their processes' CPU time per call of each side (the
//     threads' schedstat; left out where there is no /proc). The servers'
//     own background work is charged to the side that runs while it
//     happens, so a side slower by wall time gets a little more of it. On
//     a machine the servers share with the client, wall time follows the
//     two together.
//
// b.N is the calls of each side. Allocations are the unpaired rows' to
// report: a paired row's would count both sides.

// pairRounds is how many blocks of each side a paired row runs.
const pairRounds = 16

// side is one side of a pair: its calls' CPU and wall time so far.
type side struct {
	op             func(int) error
	cpu, wall, srv time.Duration
	next           int // the next call's index
}

// pairedSerial pairs base and ours, one call at a time; servers are the
// processes both call, whose CPU is reported too.
func pairedSerial(base, ours func(int) error, servers ...*testserver.Server) func(*testing.B) {
	return paired(servers, func(b *testing.B, s *side, n int) {
		for range n {
			if err := s.op(s.next); err != nil {
				b.Fatal(err)
			}
			s.next++
		}
	}, base, ours)
}

// pairedParallel pairs base and ours, each block from parallelism goroutines
// per CPU, as the parallel rows run.
func pairedParallel(base, ours func(int) error, servers ...*testserver.Server) func(*testing.B) {
	return pairedConcurrent(parallelism*runtime.GOMAXPROCS(0), base, ours, servers...)
}

// pairedConcurrent pairs base and ours, each block from g goroutines at
// once; wall-ratio is the inverse of ours' throughput over the baseline's.
func pairedConcurrent(g int, base, ours func(int) error, servers ...*testserver.Server) func(*testing.B) {
	return paired(servers, func(b *testing.B, s *side, n int) {
		var wg sync.WaitGroup
		var left atomic.Int64
		left.Store(int64(n))
		var failed atomic.Bool
		for w := range g {
			wg.Go(func() {
				i := s.next + w*7919 // goroutines start apart, as in parallel
				for left.Add(-1) >= 0 && !failed.Load() {
					if err := s.op(i); err != nil {
						b.Error(err)
						failed.Store(true)
						return
					}
					i++
				}
			})
		}
		wg.Wait()
		s.next += n
		if failed.Load() {
			b.FailNow()
		}
	}, base, ours)
}

// paired runs block(b, side, calls) for each side in turn, pairRounds
// rounds, and reports the metrics above.
func paired(servers []*testserver.Server, block func(*testing.B, *side, int), base, ours func(int) error) func(*testing.B) {
	serverCPU := func() (t time.Duration) {
		for _, s := range servers {
			t += s.CPU()
		}
		return t
	}
	return func(b *testing.B) {
		sides := [2]*side{{op: base}, {op: ours}}
		per := max(b.N/pairRounds, 1)
		b.ResetTimer()
		for r := range pairRounds {
			for k := range sides {
				s := sides[(r+k)%2] // alternate which side goes first
				srv, cpu, wall := serverCPU(), cpuTime(b), time.Now()
				block(b, s, per)
				s.cpu += cpuTime(b) - cpu
				s.wall += time.Since(wall)
				s.srv += serverCPU() - srv
			}
		}
		b.StopTimer()
		calls := float64(per * pairRounds)
		b.ReportMetric(float64(sides[1].cpu)/calls, "cpu-ns/op")
		b.ReportMetric(float64(sides[0].cpu)/calls, "base-cpu-ns/op")
		b.ReportMetric(float64(sides[1].cpu)/float64(sides[0].cpu), "cpu-ratio")
		b.ReportMetric(float64(sides[1].wall)/float64(sides[0].wall), "wall-ratio")
		b.ReportMetric(float64(sides[1].wall)/calls, "ns/op")
		if len(servers) > 0 && sides[0].srv > 0 { // 0: no /proc to read the servers' CPU from
			b.ReportMetric(float64(sides[1].srv)/calls, "server-cpu-ns/op")
			b.ReportMetric(float64(sides[0].srv)/calls, "base-server-cpu-ns/op")
		}
	}
}
