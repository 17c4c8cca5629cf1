package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The rules of values against porcupine's linearizability of a register
// whose reads may miss at any time (registerModel), on small random
// histories of one key. The cache promises less than linearizability (two
// writes under way at once may be read in either order, and back), so the
// rules must reject only what porcupine rejects; and where the writes and
// deletes are acknowledged and one after the other, exactly that.

// linearHistory is a random history of one key over n operations, its
// times in milliseconds: a writer (process 1) and readers (2 and 3) whose
// own calls follow each other; the writer's calls overlap each other when
// concurrent, fail when failures.
func linearHistory(rng *rand.Rand, n int, concurrent, failures bool) *builder {
	var b builder
	next := map[int]int64{1: 0, 2: int64(rng.IntN(5)), 3: int64(rng.IntN(5))}
	var writes []*Op
	for range n {
		proc := 1 + rng.IntN(3)
		inv := next[proc] + int64(rng.IntN(4))
		comp := inv + 1 + int64(rng.IntN(6))
		next[proc] = comp + 1
		if proc == 1 && concurrent && rng.IntN(2) == 0 {
			next[proc] = inv + 1 // the next write begins before this one ends
		}
		if proc != 1 {
			o := b.op(proc, Get, "k", "", inv, comp, Miss)
			var known []*Op
			for _, w := range writes {
				if w.Inv <= o.Comp {
					known = append(known, w)
				}
			}
			if len(known) > 0 && rng.IntN(5) > 0 {
				o.Status, o.Result = OK, known[rng.IntN(len(known))].Value
			}
			continue
		}
		st := OK
		if failures {
			switch rng.IntN(6) {
			case 0:
				st = Failed
			case 1:
				st = Pending
			}
		}
		if rng.IntN(4) == 0 {
			b.op(1, Delete, "k", "", inv, comp, st)
			continue
		}
		kind := Set
		if failures && rng.IntN(5) == 0 {
			kind, st = Load, Maybe
		}
		w := b.op(1, kind, "k", fmt.Sprintf("v%d", len(writes)+1), inv, comp, st)
		writes = append(writes, w)
	}
	return &b
}

// linearizable checks the history with porcupine. A failed or cut-short
// operation may take effect from its start until just before its first
// successor began (an acknowledged write or delete begun after it
// returned), or never; a load until it returned.
func linearizable(h *History) bool {
	var ops []porcupine.Operation
	const far = int64(1) << 60
	for _, o := range h.Ops {
		in := regInput{kind: o.Kind, value: o.Value, maybe: o.Status != OK}
		out := regOutput{}
		ret := 2 * o.Comp
		switch o.Kind {
		case Get:
			in.kind = Get
			out = regOutput{hit: o.Status == OK, value: o.Result}
		case Set, Delete:
			if o.Status == OK {
				break
			}
			ret = far
			if o.Status == Pending {
				break
			}
			for _, x := range h.Ops {
				if (x.Kind == Set || x.Kind == Delete) && x.Status == OK && x.Inv > o.Comp {
					ret = min(ret, 2*x.Inv-1)
				}
			}
		}
		ops = append(ops, porcupine.Operation{ClientId: len(ops), Input: in, Output: out, Call: 2 * o.Inv, Return: ret})
	}
	return porcupine.CheckOperations(registerModel, ops)
}

// valueViolations are the violations of the rules porcupine's model
// shares: all but LostKey (a register may miss at any time).
func valueViolations(res *Result) []Violation {
	return slices.DeleteFunc(slices.Clone(res.Violations), func(v Violation) bool { return v.Rule == LostKey })
}

func describeOps(h *History) string {
	var b strings.Builder
	for _, o := range h.Ops {
		fmt.Fprintf(&b, "  %s\n", OpLine(h, o, "k"))
	}
	return b.String()
}

// Every history the rules reject is not linearizable, failures, loads and
// concurrent writes included.
func TestRulesSoundAgainstPorcupine(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 1))
	rejected, nonlin := 0, 0
	rules := map[Rule]int{}
	for i := range 3000 {
		b := linearHistory(rng, 4+rng.IntN(10), true, true)
		res := b.check()
		if !linearizable(&b.h) {
			nonlin++
		}
		if vs := valueViolations(res); len(vs) > 0 {
			rejected++
			rules[vs[0].Rule]++
			if linearizable(&b.h) {
				t.Fatalf("history %d: %s, yet linearizable:\n%s\n%s", i, vs[0].Rule, describeOps(&b.h), Report(&b.h, res, 3))
			}
		}
	}
	t.Logf("rejected %d of 3000 (%d not linearizable), first violations %v", rejected, nonlin, rules)
	if rejected < 300 || rules[ReadWentBack] == 0 || rules[StaleFailedRead] == 0 {
		t.Errorf("rejected %d of 3000, first violations %v: too few to say anything", rejected, rules)
	}
}

// Where every write and delete is acknowledged and none overlaps another,
// the rules reject exactly the histories that are not linearizable: a read
// returns the last value written before it began or one written while it
// ran, and no read returns a value older than one an earlier read
// returned (Lamport's regular register without new-old inversion is
// atomic).
func TestRulesCompleteForSequentialWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 2))
	rejected := 0
	rules := map[Rule]int{}
	for i := range 3000 {
		b := linearHistory(rng, 4+rng.IntN(10), false, false)
		res := b.check()
		vs := valueViolations(res)
		lin := linearizable(&b.h)
		if lin == (len(vs) > 0) {
			t.Fatalf("history %d: linearizable %v, rules found %d:\n%s\n%s", i, lin, len(vs), describeOps(&b.h), Report(&b.h, res, 3))
		}
		if !lin {
			rejected++
			rules[vs[0].Rule]++
		}
	}
	t.Logf("rejected %d of 3000, first violations %v", rejected, rules)
	if rejected < 300 || rules[ReadWentBack] == 0 {
		t.Errorf("rejected %d of 3000, first violations %v: too few to say anything", rejected, rules)
	}
}

// CheckWith over 300,000 operations on 20 keys, every read its key's last
// acknowledged value: no violation (its time, O(n log n), is logged).
func TestCheckLargeHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var b builder
	const n = 300_000
	last := map[string]string{}
	for i := range int64(n) {
		k := fmt.Sprintf("k%d", rng.IntN(20))
		inv := i
		switch rng.IntN(10) {
		case 0:
			b.set(k, fmt.Sprintf("v%d", i), inv, inv+3, Failed)
		case 1, 2:
			last[k] = fmt.Sprintf("v%d", i)
			b.set(k, last[k], inv, inv+3, OK)
		case 3:
			st := []Status{OK, Failed}[rng.IntN(2)]
			if st == OK {
				last[k] = ""
			}
			b.del(k, inv, inv+3, st)
		default:
			b.get(k, last[k], inv+1, inv+3)
		}
	}
	b.fault(PauseServer, "n1", 1000, 2000)
	start := time.Now()
	res := b.checkWith(CheckOptions{Owners: func(string) []string { return []string{"n1", "n2"} }})
	// The time is logged, not bounded (a busy machine stretches it); every
	// read returns the key's last acknowledged value, so nothing is a
	// violation.
	t.Logf("%d operations checked in %v: %s", n, time.Since(start), strings.TrimSpace(res.Summary()))
	if len(res.Violations) > 0 {
		t.Errorf("%d violations in a history of last values:\n%s", len(res.Violations), Report(&b.h, res, 3))
	}
}
