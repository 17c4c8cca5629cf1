package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// FaultKind is a kind of fault the harness injects.
type FaultKind string

// Fault kinds. The network ones go through a toxiproxy in front of the node,
// which every client connects through.
const (
	// KillServer kills the node's server with SIGKILL and starts it again,
	// empty, when the fault ends: its keys are gone.
	KillServer FaultKind = "kill"
	// PauseServer stops the server with SIGSTOP and continues it with
	// SIGCONT: requests are accepted and answered only afterwards.
	PauseServer FaultKind = "pause"
	// Latency delays every reply by less than the client's timeouts.
	Latency FaultKind = "latency"
	// Timeout delays every reply by more than the client's timeouts.
	Timeout FaultKind = "timeout"
	// Reset resets each connection as soon as a reply comes through it.
	Reset FaultKind = "reset"
	// Partition drops everything sent to the node, connections kept open.
	Partition FaultKind = "partition"
	// KillClient kills a client process with SIGKILL and starts it again
	// when the fault ends, resuming the migration through MigrateFrom.
	KillClient FaultKind = "kill-client"
)

// ServerFaults are the kinds of fault one node can get, in the order
// NewSchedule draws them from.
var ServerFaults = []FaultKind{KillServer, PauseServer, Latency, Timeout, Reset, Partition}

// Planned is one fault of a schedule, its times counted from the run's
// start.
type Planned struct {
	At, For time.Duration
	Kind    FaultKind
	// Target is the node's index, or the client process's for KillClient.
	Target int
	// Delay is Latency's and Timeout's delay.
	Delay time.Duration
}

// String prints the fault as "+12.5s pause n3 for 800ms".
func (p Planned) String() string {
	target := fmt.Sprintf("n%d", p.Target)
	if p.Kind == KillClient {
		target = fmt.Sprintf("p%d", p.Target)
	}
	s := fmt.Sprintf("+%.1fs %s %s for %v", p.At.Seconds(), p.Kind, target, p.For)
	if p.Delay > 0 {
		s += fmt.Sprintf(" (delay %v)", p.Delay)
	}
	return s
}

// ScheduleConfig is what a schedule is drawn for.
type ScheduleConfig struct {
	// Duration is the run's length; faults start after its first second and
	// end before its last one.
	Duration time.Duration
	// Nodes is how many server nodes there are, Procs client processes.
	Nodes, Procs int
	// Faults is how many server faults to draw, over the whole run, at most
	// one at a time per node. Default one per two seconds.
	Faults int
	// Kinds are the server faults to draw from. Default ServerFaults.
	Kinds []FaultKind
	// Pauses is how many of the server faults, at least, are PauseServer,
	// whatever Kinds says: drawn faults of other kinds become pauses. With
	// replicas, a paused replica misses writes that the others take, and
	// comes back with the values it held: the case to test.
	Pauses int
	// ReshardAt and Window place the migration, if any (Window 0: none):
	// one client process is killed in the middle of its window.
	ReshardAt, Window time.Duration
	// ClientTimeout is the client's read timeout, which Latency stays below
	// and Timeout above.
	ClientTimeout time.Duration
}

// Schedule is a fault schedule, drawn from a seed: the same seed and config
// draw the same schedule, so that a failing run can be replayed.
type Schedule struct {
	Seed   uint64
	Faults []Planned
}

// NewSchedule draws a schedule.
func NewSchedule(seed uint64, c ScheduleConfig) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x5ca1ab1e))
	kinds := c.Kinds
	if len(kinds) == 0 {
		kinds = ServerFaults
	}
	n := c.Faults
	if n == 0 {
		n = int(c.Duration / (2 * time.Second))
	}
	s := Schedule{Seed: seed}
	first, last := time.Second, c.Duration-time.Second
	if n > 0 && c.Nodes > 0 && last > first {
		step := (last - first) / time.Duration(n)
		free := make([]time.Duration, c.Nodes) // when each node is free again
		for i := range n {
			at := first + time.Duration(i)*step + time.Duration(rng.Int64N(int64(step)/2+1))
			var idle []int
			for node, t := range free {
				if t <= at {
					idle = append(idle, node)
				}
			}
			if len(idle) == 0 {
				continue
			}
			node := idle[rng.IntN(len(idle))]
			d := 300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
			d = min(d, last-at)
			p := Planned{At: at, For: d, Kind: kinds[rng.IntN(len(kinds))], Target: node}
			switch p.Kind {
			case Latency:
				p.Delay = c.ClientTimeout / 8 * time.Duration(1+rng.IntN(4))
			case Timeout:
				p.Delay = c.ClientTimeout * time.Duration(2+rng.IntN(3))
			}
			free[node] = at + d + 100*time.Millisecond
			s.Faults = append(s.Faults, p)
		}
	}
	for {
		var others []int
		for i, p := range s.Faults {
			if p.Kind != PauseServer {
				others = append(others, i)
			}
		}
		if len(s.Faults)-len(others) >= c.Pauses || len(others) == 0 {
			break
		}
		p := &s.Faults[others[rng.IntN(len(others))]]
		p.Kind, p.Delay = PauseServer, 0
	}
	if c.Window > 0 && c.Procs > 0 {
		mid := c.ReshardAt + c.Window/2
		s.Faults = append(s.Faults, Planned{
			At:     mid - c.Window/8 + time.Duration(rng.Int64N(int64(c.Window/4)+1)),
			For:    200*time.Millisecond + time.Duration(rng.Int64N(int64(800*time.Millisecond))),
			Kind:   KillClient,
			Target: rng.IntN(c.Procs),
		})
	}
	slices.SortStableFunc(s.Faults, func(a, b Planned) int { return int(a.At - b.At) })
	return s
}

// String prints the seed and one fault a line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %d faults\n", s.Seed, len(s.Faults))
	for _, p := range s.Faults {
		b.WriteString("  " + p.String() + "\n")
	}
	return b.String()
}
