package chaos

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// spanSet answers two questions about a set of intervals in O(log n):
// does one meet [lo, hi], and when does the first one that is not over by t
// begin.
type spanSet struct {
	starts   []int64 // sorted
	maxEnd   []int64 // maxEnd[i]: the latest end among the spans of starts[:i+1]
	ends     []int64 // sorted
	minStart []int64 // minStart[i]: the earliest start among the spans of ends[i:]
}

func newSpanSet(spans []span) spanSet {
	byStart := slices.Clone(spans)
	sort.Slice(byStart, func(i, j int) bool { return byStart[i].start < byStart[j].start })
	byEnd := slices.Clone(spans)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].end < byEnd[j].end })
	n := len(spans)
	s := spanSet{starts: make([]int64, n), maxEnd: make([]int64, n), ends: make([]int64, n), minStart: make([]int64, n)}
	for i, sp := range byStart {
		s.starts[i], s.maxEnd[i] = sp.start, sp.end
		if i > 0 {
			s.maxEnd[i] = max(s.maxEnd[i], s.maxEnd[i-1])
		}
	}
	for i := n - 1; i >= 0; i-- {
		s.ends[i], s.minStart[i] = byEnd[i].end, byEnd[i].start
		if i < n-1 {
			s.minStart[i] = min(s.minStart[i], s.minStart[i+1])
		}
	}
	return s
}

// overlaps reports whether a span meets [lo, hi].
func (s spanSet) overlaps(lo, hi int64) bool {
	i := sort.Search(len(s.starts), func(i int) bool { return s.starts[i] > hi })
	return i > 0 && s.maxEnd[i-1] >= lo
}

// firstAfter returns the earliest start of the spans that end at or after
// t, Never if none: a span meets [t, u] exactly when it is at most u.
func (s spanSet) firstAfter(t int64) int64 {
	i := sort.Search(len(s.ends), func(i int) bool { return s.ends[i] >= t })
	if i == len(s.ends) {
		return Never
	}
	return s.minStart[i]
}

// trouble is what befell a key's nodes: its faults, and with FailOpen its
// failures, apart (for Result.Explained) and together.
type trouble struct {
	faults, failures, all spanSet
	owners                []string // nil: every node
	evicting              bool
}

// firstAfter is all.firstAfter: a failed operation's effect is bounded only
// by a successor that completed before the first trouble after it began.
func (t *trouble) firstAfter(at int64) int64 { return t.all.firstAfter(at) }

// checker holds what the rules of values need beyond a key's operations:
// the run's faults and failures by node, client kills, migrations and
// evictions.
type checker struct {
	h     *History
	opt   CheckOptions
	slack int64
	// faults and failures are by node; every node's under "".
	faults, failures map[string][]span
	// keyFailures are CheckOptions.Failures' failed operations, by key.
	keyFailures map[string][]span
	kills       map[int][]int64 // KillClient starts by process, sorted
	moves       spanSet         // when a key may leave its nodes for good
	evicted     []string
	byOwners    map[string]*trouble // by owner set, joined
	owners      map[string][]string // CheckOptions.Owners, by key
}

// anyNode keys the spans of every node, for keys of unknown owners.
const anyNode = ""

func newChecker(h *History, opt CheckOptions) *checker {
	c := &checker{h: h, opt: opt, faults: make(map[string][]span), failures: make(map[string][]span), keyFailures: make(map[string][]span),
		kills: make(map[int][]int64), byOwners: make(map[string]*trouble), owners: make(map[string][]string)}
	switch {
	case opt.FaultSlack == 0:
		c.slack = int64(DefaultFaultSlack)
	case opt.FaultSlack > 0:
		c.slack = int64(opt.FaultSlack)
	}
	for _, s := range h.Stats {
		if s.Dropped > 0 || s.Missed > 0 {
			c.opt.FailOpen = true // only FailOpen drops writes and misses reads
		}
	}
	for _, f := range h.Faults {
		switch {
		case f.Kind == KillClient:
			if p, err := strconv.Atoi(strings.TrimPrefix(f.Target, "p")); err == nil {
				c.kills[p] = append(c.kills[p], f.Start)
			}
		case !f.Event():
			sp := span{f.Start, after(f.End, c.slack)}
			if f.End == 0 { // never seen to end
				sp.end = Never
			}
			c.faults[f.Target] = append(c.faults[f.Target], sp)
			c.faults[anyNode] = append(c.faults[anyNode], sp)
		}
	}
	for _, ks := range c.kills {
		slices.Sort(ks)
	}
	if c.opt.FailOpen || c.opt.Failures {
		for _, o := range h.Ops {
			if o.Status != Failed {
				continue
			}
			sp := span{o.Inv, after(o.Comp, c.slack)}
			if o.Comp == 0 { // failed without a recorded return
				sp.end = Never
			}
			if !c.opt.FailOpen {
				// Without FailOpen a failure befalls its own keys: a
				// request that may land late, a replica purged. As trouble
				// on every key of its nodes it excused nearly any miss of a
				// key written long before.
				for _, k := range o.Keys {
					c.keyFailures[k] = append(c.keyFailures[k], sp)
				}
				continue
			}
			c.failures[anyNode] = append(c.failures[anyNode], sp)
			if opt.Owners == nil {
				continue
			}
			for _, k := range o.Keys {
				for _, n := range c.ownersOf(k) {
					c.failures[n] = append(c.failures[n], sp)
				}
			}
		}
	}
	c.moves = newSpanSet(moves(h))
	for n, e := range opt.Evictions {
		if e > 0 {
			c.evicted = append(c.evicted, n)
		}
	}
	slices.Sort(c.evicted)
	return c
}

// after returns t+d, Never for Never.
func after(t, d int64) int64 {
	if t == Never || t > math.MaxInt64-d {
		return Never
	}
	return t + d
}

// ownersOf returns CheckOptions.Owners(key), once per key.
func (c *checker) ownersOf(key string) []string {
	o, ok := c.owners[key]
	if !ok {
		o = c.opt.Owners(key)
		c.owners[key] = o
	}
	return o
}

// troubleOf returns what befell key's nodes.
func (c *checker) troubleOf(key string) *trouble {
	var owners []string
	if c.opt.Owners != nil {
		owners = slices.Clone(c.ownersOf(key))
		slices.Sort(owners)
		owners = slices.Compact(owners)
	}
	id := strings.Join(owners, "\x00")
	if len(owners) == 0 {
		owners, id = nil, "\x01" // every node
	}
	own := c.keyFailures[key]
	if t := c.byOwners[id]; t != nil && len(own) == 0 {
		return t
	}
	t := &trouble{owners: owners}
	var faults, failures []span
	if owners == nil {
		faults, failures = c.faults[anyNode], c.failures[anyNode]
		t.evicting = len(c.evicted) > 0
	} else {
		for _, n := range owners {
			faults = append(faults, c.faults[n]...)
			failures = append(failures, c.failures[n]...)
			t.evicting = t.evicting || slices.Contains(c.evicted, n)
		}
	}
	failures = append(failures, own...)
	t.faults, t.failures = newSpanSet(faults), newSpanSet(failures)
	t.all = newSpanSet(append(slices.Clone(faults), failures...))
	if len(own) == 0 { // shared by every key of these owners
		c.byOwners[id] = t
	}
	return t
}

// returned returns when o's call was over: its completion, or for one cut
// short the first kill of its process after it began (Never if none, or if
// a failed operation's return was not recorded).
func (c *checker) returned(o *Op) int64 {
	switch o.Status {
	case Pending:
		ks := c.kills[o.ID.Proc]
		if i := sort.Search(len(ks), func(i int) bool { return ks[i] >= o.Inv }); i < len(ks) {
			return ks[i]
		}
		return Never
	case Failed:
		if o.Comp == 0 {
			return Never
		}
	}
	return o.Comp
}

// moves are the times at which keys may leave their nodes for good, each
// WindowSlack either side: a migration's end (what the old owners alone
// held is out of reach), a topology applied without a migration (a node
// dropped), and the start and end of a Reshard a worker called; one whose
// window cannot be read counts from its start on.
func moves(h *History) []span {
	var out []span
	around := func(t int64) {
		out = append(out, span{t - int64(WindowSlack), after(t, int64(WindowSlack))})
	}
	if e := h.Info.MigrationEnd; e != 0 {
		around(e)
	}
	for _, e := range h.Topologies {
		switch {
		case e.Start != 0:
			around(e.Start + int64(e.Window))
		case e.Kind == TopologyApplied:
			around(e.At)
		}
	}
	for _, f := range h.Faults {
		if f.Kind != Reshard {
			continue
		}
		w, ok := reshardWindow(f.Detail)
		if !ok {
			out = append(out, span{f.Start, Never})
			continue
		}
		around(f.Start)
		around(f.Start + int64(w))
	}
	return out
}

// reshardWindow reads the window of a Reshard event's Detail ("to 4 nodes,
// window 10s"), false if it has none or the Reshard failed.
func reshardWindow(detail string) (time.Duration, bool) {
	if strings.Contains(detail, "error:") {
		return 0, false
	}
	_, rest, ok := strings.Cut(detail, "window ")
	if !ok {
		return 0, false
	}
	tok, _, _ := strings.Cut(rest, " ")
	w, err := time.ParseDuration(strings.TrimRight(tok, ",;"))
	return w, err == nil
}
