package health

import (
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/node"
)

// Bounds are the latency histograms' bucket bounds: from a loopback round
// trip to the longest default timeout.
var Bounds = [...]time.Duration{
	25 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond,
	500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
}

// Kind is a cause of failure, as the counters count them.
type Kind uint8

// Kinds of failure.
const (
	None    Kind = iota // no failure: an answer, a miss, a key not stored
	Timeout             // a deadline passed
	Refused             // the connection was refused
	Down                // the node was held down: the call never left the client
	Other               // anything else
	numKinds
)

// KindOf says how the counters count err, the result of one call.
func KindOf(err error) Kind {
	switch {
	case err == nil, err == node.ErrCacheMiss, err == node.ErrNotStored:
		return None
	case err == node.ErrNodeDown:
		return Down
	case node.Timeout(err):
		return Timeout
	case node.Refused(err):
		return Refused
	}
	return Other
}

// Counts are the counts of one kind of call to one node.
type Counts struct {
	Op               node.Op
	OK, Hits, Misses int64
	Errors           [numKinds]int64 // by Kind; None unused
	Latency          [len(Bounds) + 1]int64
	LatencySum       time.Duration
}

// counters are the live Counts of one kind of call.
type counters struct {
	ok, hits, misses atomic.Int64
	errs             [numKinds]atomic.Int64
	latency          [len(Bounds) + 1]atomic.Int64
	latencySum       atomic.Int64 // ns
}

// Counters are the counters of one node, by kind of call: one atomic add
// per counter, no lock, no allocation. A nil *Counters counts nothing.
type Counters struct {
	ops [node.NumOps]counters
}

// Begin returns the start of a call, zero when nothing is counted.
func (s *Counters) Begin() time.Time {
	if s == nil {
		return time.Time{}
	}
	return time.Now()
}

// Record counts one call of kind o that began at start (zero: not timed)
// and ended with err. A "get" also counts its key as a hit or a miss;
// multi-key reads count theirs with Keys.
func (s *Counters) Record(o node.Op, start time.Time, err error) {
	if s == nil || o >= node.NumOps {
		return
	}
	c := &s.ops[o]
	if k := KindOf(err); k != None {
		c.errs[k].Add(1)
	} else {
		c.ok.Add(1)
		if o == node.OpGet {
			if err == nil {
				c.hits.Add(1)
			} else {
				c.misses.Add(1)
			}
		}
	}
	if start.IsZero() {
		return
	}
	d := time.Since(start)
	c.latency[Bucket(d)].Add(1)
	c.latencySum.Add(int64(d))
}

// Bucket returns the index of the histogram bucket of d: the first bound d
// does not exceed, or len(Bounds) above them all.
func Bucket(d time.Duration) int {
	i := 0
	for i < len(Bounds) && d > Bounds[i] {
		i++
	}
	return i
}

// Keys counts the keys a multi-key read of kind o found and missed.
func (s *Counters) Keys(o node.Op, hits, misses int) {
	if s == nil || o >= node.NumOps {
		return
	}
	c := &s.ops[o]
	c.hits.Add(int64(hits))
	c.misses.Add(int64(misses))
}

// Snapshot returns the counts of every kind of call made so far, those of
// no call and no key left out; nil when nothing is counted.
func (s *Counters) Snapshot() []Counts {
	if s == nil {
		return nil
	}
	var out []Counts
	for o := range node.NumOps {
		c := &s.ops[o]
		st := Counts{Op: o, OK: c.ok.Load(), Hits: c.hits.Load(), Misses: c.misses.Load(),
			LatencySum: time.Duration(c.latencySum.Load())}
		any := st.OK+st.Hits+st.Misses > 0
		for k := range c.errs {
			st.Errors[k] = c.errs[k].Load()
			any = any || st.Errors[k] > 0
		}
		for i := range c.latency {
			st.Latency[i] = c.latency[i].Load()
		}
		if any {
			out = append(out, st)
		}
	}
	return out
}
