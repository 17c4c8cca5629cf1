package chaos

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// builder makes synthetic histories; times are milliseconds.
type builder struct {
	h   History
	seq uint64
}

func (b *builder) op(proc int, kind Kind, key, value string, inv, comp int64, st Status) *Op {
	b.seq++
	o := &Op{
		ID:   OpID{Proc: proc, Goroutine: 0, Seq: b.seq},
		Kind: kind, Keys: []string{key}, Value: value,
		Inv: inv * int64(time.Millisecond), Comp: comp * int64(time.Millisecond), Status: st,
	}
	if st == Pending {
		o.Comp = 0
	}
	b.h.Ops = append(b.h.Ops, o)
	return o
}

func (b *builder) set(key, value string, inv, comp int64, st Status) *Op {
	return b.op(1, Set, key, value, inv, comp, st)
}

func (b *builder) del(key string, inv, comp int64, st Status) *Op {
	return b.op(1, Delete, key, "", inv, comp, st)
}

func (b *builder) get(key, result string, inv, comp int64) *Op {
	st := OK
	if result == "" {
		st = Miss
	}
	o := b.op(2, Get, key, "", inv, comp, st)
	o.Result = result
	return o
}

func (b *builder) incr(key, result string, inv, comp int64, st Status) *Op {
	o := b.op(3, Incr, key, "", inv, comp, st)
	o.Result = result
	return o
}

func (b *builder) wipe(start, end int64) {
	b.h.Faults = append(b.h.Faults, Fault{Kind: KillServer, Target: "n1",
		Start: start * int64(time.Millisecond), End: end * int64(time.Millisecond)})
}

// fault records a fault of kind on target (a node, "n1", or a process,
// "p1") from start to end.
func (b *builder) fault(kind FaultKind, target string, start, end int64) {
	b.h.Faults = append(b.h.Faults, Fault{Kind: kind, Target: target,
		Start: start * int64(time.Millisecond), End: end * int64(time.Millisecond)})
}

// getMulti records a GetMulti of keys that found hits.
func (b *builder) getMulti(keys []string, hits map[string]string, inv, comp int64) *Op {
	o := b.op(2, GetMulti, "", "", inv, comp, OK)
	o.Keys, o.Results = keys, hits
	return o
}

func (b *builder) check() *Result { return b.checkWith(CheckOptions{}) }

func (b *builder) checkWith(opt CheckOptions) *Result {
	b.h.sort()
	return CheckWith(&b.h, opt)
}

// want checks that the history breaks exactly the rules listed (each once),
// and that each violation names the read given.
func want(t *testing.T, b *builder, read *Op, rules ...Rule) *Result {
	t.Helper()
	return wantWith(t, b, CheckOptions{}, read, rules...)
}

// wantWith is want for CheckWith(opt).
func wantWith(t *testing.T, b *builder, opt CheckOptions, read *Op, rules ...Rule) *Result {
	t.Helper()
	res := b.checkWith(opt)
	got := map[Rule]int{}
	for _, v := range res.Violations {
		got[v.Rule]++
		if read != nil && v.Read != read {
			t.Errorf("%s names read %v, want %v", v.Rule, v.Read.ID, read.ID)
		}
	}
	exp := map[Rule]int{}
	for _, r := range rules {
		exp[r]++
	}
	if len(got) != len(exp) {
		t.Fatalf("violations %v, want %v\n%s", got, exp, Report(&b.h, res, 10))
	}
	for r, n := range exp {
		if got[r] != n {
			t.Fatalf("violations %v, want %v\n%s", got, exp, Report(&b.h, res, 10))
		}
	}
	return res
}

func TestStaleRead(t *testing.T) {
	var b builder
	w1 := b.set("k", "v1", 0, 10, OK)
	w2 := b.set("k", "v2", 20, 30, OK)
	r := b.get("k", "v1", 40, 50)
	res := want(t, &b, r, StaleRead)
	if v := res.Violations[0]; v.Write != w1 || v.Witness != w2 {
		t.Errorf("write %v witness %v, want %v and %v", v.Write.ID, v.Witness.ID, w1.ID, w2.ID)
	}
}

func TestDeletedRead(t *testing.T) {
	var b builder
	b.set("k", "v1", 0, 10, OK)
	d := b.del("k", 20, 30, OK)
	r := b.get("k", "v1", 40, 50)
	res := want(t, &b, r, DeletedRead)
	if res.Violations[0].Witness != d {
		t.Errorf("witness %v, want the delete", res.Violations[0].Witness.ID)
	}
}

// A write or delete whose call overlaps the first write's, or ends after the
// read begins, does not make the first value inadmissible.
func TestConcurrentWriteAllowed(t *testing.T) {
	var b builder
	b.set("k", "v1", 0, 10, OK)
	b.set("k", "v2", 5, 35, OK) // began before v1's write ended
	b.del("k", 20, 45, OK)      // ended after the read began
	b.get("k", "v1", 40, 50)
	b.get("k", "v2", 40, 50)
	b.get("k", "v1", 0, 5) // a read overlapping the write
	want(t, &b, nil)
}

// A miss needs no reason while no write of the key was acknowledged, nor
// when a write or delete under way may have removed the value.
func TestMissWithoutAcknowledgedValue(t *testing.T) {
	var b builder
	b.get("k", "", 0, 5)
	b.set("k", "vf", 10, 20, Failed)
	b.op(1, Load, "k", "l1", 21, 22, Maybe)
	b.get("k", "", 30, 40)
	b.set("k", "v1", 50, 60, OK)
	b.get("k", "", 55, 65) // began before the write was over
	b.get("k", "v1", 70, 80)
	b.del("k", 90, 100, OK)
	b.get("k", "", 95, 105) // the delete under way
	b.get("k", "", 110, 120)
	b.set("k", "v2", 130, 140, OK)
	b.del("k", 135, 150, Failed) // may land any time after
	b.get("k", "", 160, 170)
	res := want(t, &b, nil)
	if res.Explained[ByDelete] != 3 || res.Misses != 6 {
		t.Errorf("%d misses, explained %v; want 6 misses, 3 by deletes", res.Misses, res.Explained)
	}
}

// A failed or cut-short write may be applied at any later time, until an
// acknowledged write or delete that began after it returned has completed:
// its value is admissible until then, and it overwrites nothing for
// certain. A failed delete likewise deletes nothing for certain.
func TestFailedWriteMaybeApplied(t *testing.T) {
	var b builder
	b.set("k", "v1", 0, 10, OK)
	b.set("k", "vf", 20, 30, Failed)
	b.set("k", "vp", 21, 0, Pending) // no kill recorded: no end known
	b.del("k", 31, 32, Failed)
	b.set("k", "v3", 40, 50, OK)
	b.get("k", "vf", 45, 55) // v3 under way
	b.get("k", "vp", 60, 70)
	r := b.get("k", "v1", 60, 70)
	want(t, &b, r, StaleRead)

	var c builder
	c.set("k", "v1", 0, 10, OK)
	c.set("k", "vf", 20, 30, Failed)
	c.del("k", 31, 32, Failed)
	c.get("k", "v1", 60, 70)
	c.get("k", "vf", 60, 70)
	want(t, &c, nil)

	// After v3, which began after the failed write returned, completed.
	var d builder
	d.set("k", "v1", 0, 10, OK)
	f := d.set("k", "vf", 20, 30, Failed)
	v3 := d.set("k", "v3", 40, 50, OK)
	r = d.get("k", "vf", 60, 70)
	res := want(t, &d, r, StaleFailedRead)
	if v := res.Violations[0]; v.Write != f || v.Witness != v3 {
		t.Errorf("write %v witness %v, want %v and %v", v.Write.ID, v.Witness.ID, f.ID, v3.ID)
	}
}

// A loaded value is stored, or not, before GetOrLoad returns it.
func TestLoadMaybeApplied(t *testing.T) {
	var b builder
	b.op(1, Load, "k", "l1", 0, 10, Maybe)
	b.op(1, Load, "k", "l2", 0, 0, Pending) // no caller got it back
	b.set("k", "v2", 20, 30, OK)
	b.get("k", "l2", 40, 50)
	r := b.get("k", "l1", 40, 50)
	want(t, &b, r, StaleRead)
}

func TestFutureAndUnknownValues(t *testing.T) {
	var b builder
	r1 := b.get("k", "v1", 0, 10)
	b.set("k", "v1", 20, 30, OK)
	r2 := b.get("k", "nobody", 40, 50)
	res := want(t, &b, nil, FutureRead, UnknownValue)
	if res.Violations[0].Read != r1 || res.Violations[1].Read != r2 {
		t.Errorf("violations name the wrong reads:\n%s", Report(&b.h, res, 10))
	}
}

func TestGetMultiStaleRead(t *testing.T) {
	var b builder
	b.set("a", "v1", 0, 10, OK)
	b.set("a", "v2", 20, 30, OK)
	b.set("b", "w1", 0, 10, OK)
	b.seq++
	r := &Op{ID: OpID{Proc: 2, Seq: b.seq}, Kind: GetMulti, Keys: []string{"a", "b", "c"},
		Inv: 40e6, Comp: 50e6, Status: OK, Results: map[string]string{"a": "v1", "b": "w1"}}
	b.h.Ops = append(b.h.Ops, r)
	res := want(t, &b, r, StaleRead)
	if res.Violations[0].Key != "a" || res.Reads != 2 || res.Misses != 1 {
		t.Errorf("key %s, %d reads %d misses; want a, 2 and 1", res.Violations[0].Key, res.Reads, res.Misses)
	}
}

func TestCounterBackwards(t *testing.T) {
	var b builder
	b.incr("c", "1", 0, 10, OK)
	b.incr("c", "2", 20, 30, OK)
	r := b.get("c", "1", 40, 50)
	want(t, &b, r, CounterBackwards)

	// A delete or a restart in between may reset the counter.
	for _, reset := range []func(*builder){
		func(b *builder) { b.del("c", 32, 35, OK) },
		func(b *builder) { b.del("c", 1, 2, Failed) }, // may land any time after
		func(b *builder) { b.wipe(31, 36) },
		func(b *builder) { b.h.Info.MigrationEnd = 35e6 },
	} {
		var b builder
		b.incr("c", "1", 0, 10, OK)
		b.incr("c", "2", 20, 30, OK)
		reset(&b)
		b.get("c", "1", 40, 50)
		b.incr("c", "1", 40, 50, OK)
		want(t, &b, nil)
	}
}

// A counter restarts from zero after a restart, and counts on.
func TestCounterRestartsAfterWipe(t *testing.T) {
	var b builder
	for i, v := range []string{"1", "2", "3"} {
		b.incr("c", v, int64(10*i), int64(10*i+5), OK)
	}
	b.wipe(31, 40)
	b.incr("c", "1", 50, 55, OK)
	b.incr("c", "2", 60, 65, OK)
	b.get("c", "2", 70, 75)
	r := b.get("c", "1", 80, 85)
	want(t, &b, r, CounterBackwards)
}

// With a gutter pool, the deletes sent to a node's gutter are replayed
// when it is back, a restarted node included: a counter incremented there
// meanwhile may restart once more within WindowSlack of the fault's end;
// without a gutter, that is a counter going backwards.
func TestCounterRestartsAfterGutterReplay(t *testing.T) {
	for _, gutter := range []bool{false, true} {
		var b builder
		b.h.Info.Gutter = gutter
		b.wipe(10, 20)
		b.incr("c", "1", 25, 30, OK)
		b.incr("c", "2", 35, 40, OK)
		r := b.incr("c", "1", 500, 505, OK) // the replay deleted it
		if gutter {
			want(t, &b, nil)
		} else {
			want(t, &b, r, CounterBackwards, CounterDuplicate)
		}
	}
}

// TestCounterGutterDeleteLag: in a gutter run a delete sent through the
// gutter reaches the counter's node only when the other processes replay
// the gutter's log, within the run's staleness bound: until then their
// increments go on counting what it deleted; after it, not.
func TestCounterGutterDeleteLag(t *testing.T) {
	opt := CheckOptions{Staleness: 100 * time.Millisecond}
	for _, gutter := range []bool{false, true} {
		var b builder
		b.h.Info.Gutter = gutter
		b.incr("c", "1", 0, 10, OK)
		b.incr("c", "2", 11, 20, OK)
		b.del("c", 30, 40, OK) // through the gutter
		b.incr("c", "3", 50, 60, OK)
		b.get("c", "3", 70, 80) // within the bound: not applied yet
		if !gutter {
			wantWith(t, &b, opt, nil, CounterAbove, CounterAbove) // the Incr and the read
			continue
		}
		wantWith(t, &b, opt, nil)
		b.incr("c", "4", 200, 210, OK) // the delete is applied by now
		b.get("c", "4", 220, 230)
		wantWith(t, &b, opt, nil, CounterAbove, CounterAbove)
	}
}

// Two increments that both return 1 lost one of them.
func TestCounterLostIncrement(t *testing.T) {
	var b builder
	b.incr("c", "1", 0, 10, OK)
	b.incr("c", "1", 0, 10, OK) // concurrent: not backwards, but a duplicate
	r := b.get("c", "1", 20, 30)
	res := want(t, &b, nil, CounterDuplicate, CounterBelow)
	for _, v := range res.Violations {
		if v.Rule == CounterBelow && v.Read != r {
			t.Errorf("below names %v, want the read", v.Read.ID)
		}
	}
}

func TestCounterAbove(t *testing.T) {
	var b builder
	b.incr("c", "1", 0, 10, OK)
	b.incr("c", "", 20, 30, Failed) // may have counted
	b.get("c", "2", 40, 50)
	r := b.get("c", "3", 40, 50)
	want(t, &b, r, CounterAbove)

	// What an acknowledged delete removed cannot count again.
	var c builder
	c.incr("c", "1", 0, 10, OK)
	c.incr("c", "2", 11, 20, OK)
	c.del("c", 30, 40, OK)
	c.incr("c", "1", 50, 60, OK)
	r = c.get("c", "2", 70, 80)
	want(t, &c, r, CounterAbove)
}

func TestCounterGarbage(t *testing.T) {
	var b builder
	b.incr("c", "1", 0, 10, OK)
	r := b.get("c", "p1.0.g0.s1", 20, 30)
	want(t, &b, r, CounterGarbage)
}

// Recorder's files merge back into the operations they recorded, an
// operation cut short by a kill included, and a last line cut short skipped.
func TestRecorderRoundTrip(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for p := range 2 {
		path := filepath.Join(dir, "p.jsonl")
		path = strings.Replace(path, "p.", string(rune('a'+p))+".", 1)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		rec := NewRecorder(f)
		id := OpID{Proc: p, Seq: 1}
		rec.Invoke(id, Set, []string{"k"}, Value(id))
		rec.Complete(id, OK, nil, nil, nil)
		id2 := OpID{Proc: p, Seq: 2}
		rec.Invoke(id2, Get, []string{"k"}, "")
		if p == 0 {
			v := Value(id)
			rec.Complete(id2, OK, &v, nil, nil)
			if _, err := f.WriteString(`{"t":"ret","id":{"p":0,"s`); err != nil { // cut by a kill
				t.Fatal(err)
			}
		}
		if err := rec.Err(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		paths = append(paths, path)
	}
	h, err := ReadFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Ops) != 4 {
		t.Fatalf("%d ops, want 4", len(h.Ops))
	}
	statuses := map[Status]int{}
	for _, o := range h.Ops {
		statuses[o.Status]++
		if o.Kind == Get && o.Status == OK && o.Result != "p0.0.g0.s1" {
			t.Errorf("read %q, want p0.0.g0.s1", o.Result)
		}
	}
	if statuses[OK] != 3 || statuses[Pending] != 1 {
		t.Errorf("statuses %v, want 3 ok and 1 pending", statuses)
	}
	if res := Check(h); len(res.Violations) != 0 {
		t.Errorf("violations in a clean history:\n%s", Report(h, res, 10))
	}

	if _, err := Read(strings.NewReader("{bad\n{\"t\":\"info\"}\n")); err == nil {
		t.Error("a bad line before the last read without error")
	}
}

func TestReportAndVisualize(t *testing.T) {
	var b builder
	b.h.Info = RunInfo{Backend: "redis", Seed: 7}
	b.set("k", "v1", 0, 10, OK)
	b.del("k", 20, 30, OK)
	b.set("k", "vf", 25, 26, Failed).Err = "i/o timeout"
	b.get("k", "v1", 15, 35) // under way when the delete began: listed
	b.wipe(32, 38)
	r := b.get("k", "v1", 40, 50)
	res := want(t, &b, r, DeletedRead)
	text := Report(&b.h, res, 10)
	for _, s := range []string{"deleted value read: key k", "p2.0 g0 #5", "p2.0 g0 #4", `read "v1"`, `wrote "v1"`,
		"then", "delete", "meanwhile", "failed", "fault: kill n1", "seed 7"} {
		if !strings.Contains(text, s) {
			t.Errorf("report lacks %q:\n%s", s, text)
		}
	}
	var html bytes.Buffer
	if err := Visualize(&html, &b.h, res.Violations[0]); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), "deleted value read") || !strings.Contains(html.String(), "<html") {
		t.Errorf("visualisation lacks the violation (%d bytes)", html.Len())
	}
	paths, err := SaveReport(t.TempDir(), "run", &b.h, res)
	if err != nil || len(paths) != 2 {
		t.Fatalf("SaveReport: %v, %v", paths, err)
	}
}

func TestScheduleReplays(t *testing.T) {
	c := ScheduleConfig{Duration: 60 * time.Second, Nodes: 5, Procs: 3, Faults: 36,
		ReshardAt: 15 * time.Second, Window: 30 * time.Second, ClientTimeout: 200 * time.Millisecond}
	a, b := NewSchedule(42, c), NewSchedule(42, c)
	if a.String() != b.String() {
		t.Fatalf("one seed, two schedules:\n%s\n%s", a, b)
	}
	if NewSchedule(43, c).String() == a.String() {
		t.Error("two seeds, one schedule")
	}
	if len(a.Faults) < 30 {
		t.Errorf("%d faults, want at least 30:\n%s", len(a.Faults), a)
	}
	busy := map[int]time.Duration{}
	clients := 0
	for _, f := range a.Faults {
		if f.Kind == KillClient {
			clients++
			if f.At < c.ReshardAt || f.At+f.For > c.ReshardAt+c.Window {
				t.Errorf("client killed outside the window: %s", f)
			}
			continue
		}
		if f.At < busy[f.Target] {
			t.Errorf("two faults at once on n%d: %s", f.Target, f)
		}
		if f.At < time.Second || f.At+f.For > c.Duration-time.Second {
			t.Errorf("fault outside the run's middle: %s", f)
		}
		busy[f.Target] = f.At + f.For
	}
	if clients != 1 {
		t.Errorf("%d client kills, want 1", clients)
	}
}

// Pauses turns drawn faults into pauses, and changes nothing without it.
func TestSchedulePauses(t *testing.T) {
	c := ScheduleConfig{Duration: 20 * time.Second, Nodes: 5, Faults: 11, ClientTimeout: 200 * time.Millisecond,
		Kinds: []FaultKind{Latency, Reset}}
	plain := NewSchedule(7, c)
	c.Pauses = 3
	paused := NewSchedule(7, c)
	pauses := 0
	for i, f := range paused.Faults {
		if f.Kind == PauseServer {
			pauses++
			if f.Delay != 0 {
				t.Errorf("a pause with a delay: %s", f)
			}
			continue
		}
		if f != plain.Faults[i] {
			t.Errorf("fault %d: %s, want %s as drawn", i, f, plain.Faults[i])
		}
	}
	if pauses != 3 || len(paused.Faults) != len(plain.Faults) {
		t.Errorf("%d pauses among %d faults, want 3 among %d:\n%s", pauses, len(paused.Faults), len(plain.Faults), paused)
	}
}

// Fields that hold the format's separators come back as they were written.
func TestRecorderQuotes(t *testing.T) {
	var buf bytes.Buffer
	rec := NewRecorder(&buf)
	id := OpID{Proc: 1, Goroutine: -1, Seq: 9}
	odd := "a\tb,c=d\n\"e\\"
	rec.Invoke(id, GetMulti, []string{odd, "k1"}, odd)
	empty := ""
	rec.Complete(id, Failed, &empty, map[string]string{odd: odd, "k1": ""}, errors.New("two\nlines"))
	h, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	o := h.Ops[0]
	if o.ID != id || o.Keys[0] != odd || o.Value != odd || o.Result != "" || o.Results[odd] != odd ||
		o.Results["k1"] != "" || len(o.Results) != 2 || o.Err != "two\nlines" || o.Status != Failed {
		t.Errorf("read back %+v", o)
	}
}

// The witness reported is the acknowledged write that completed last
// before the read: the value the reader should have seen at least.
func TestWitnessIsLatest(t *testing.T) {
	var b builder
	b.set("k", "v1", 0, 10, OK)
	b.set("k", "v2", 20, 30, OK)
	w3 := b.set("k", "v3", 32, 38, OK)
	b.set("k", "v4", 35, 60, OK) // not over when the read began
	r := b.get("k", "v1", 40, 50)
	res := want(t, &b, r, StaleRead)
	if res.Violations[0].Witness != w3 {
		t.Errorf("witness %v, want %v", res.Violations[0].Witness.ID, w3.ID)
	}
}

// TestStaleKinds: the bound applies to the kinds of read listed, and any
// other kind is held to what was over when it began.
func TestStaleKinds(t *testing.T) {
	opt := CheckOptions{Staleness: 20 * time.Millisecond, StaleKinds: []Kind{Get}}
	var b builder
	b.set("k", "v1", 0, 10, OK)
	b.set("k", "v2", 20, 30, OK)
	b.get("k", "v1", 45, 50) // within the bound: admissible
	r := b.op(2, GetItem, "k", "", 45, 50, OK)
	r.Result = "v1"
	wantWith(t, &b, opt, r, StaleRead)
}

// TestStaleness: with a staleness bound, a read may return what was
// overwritten, deleted or seen newer by another read less than the bound
// before it began, and not what was so longer before.
func TestStaleness(t *testing.T) {
	opt := CheckOptions{Staleness: 20 * time.Millisecond}
	for _, tc := range []struct {
		name  string
		inv   int64 // the stale read's start; the newer value's write or the delete is over at 30
		rules []Rule
	}{
		{"within", 45, nil},
		{"beyond", 55, []Rule{StaleRead}},
	} {
		t.Run("stale "+tc.name, func(t *testing.T) {
			var b builder
			b.set("k", "v1", 0, 10, OK)
			b.set("k", "v2", 20, 30, OK)
			r := b.get("k", "v1", tc.inv, tc.inv+5)
			wantWith(t, &b, opt, r, tc.rules...)
			want(t, &b, r, StaleRead) // without the bound, either is stale
		})
		t.Run("deleted "+tc.name, func(t *testing.T) {
			var b builder
			b.set("k", "v1", 0, 10, OK)
			b.del("k", 20, 30, OK)
			r := b.get("k", "v1", tc.inv, tc.inv+5)
			rules := tc.rules
			if rules != nil {
				rules = []Rule{DeletedRead}
			}
			wantWith(t, &b, opt, r, rules...)
		})
		t.Run("lost "+tc.name, func(t *testing.T) {
			var b builder
			b.set("k", "v1", 20, 30, OK)
			r := b.get("k", "", tc.inv, tc.inv+5)
			var rules []Rule
			if tc.rules != nil {
				rules = []Rule{LostKey}
			}
			wantWith(t, &b, opt, r, rules...)
		})
		t.Run("went back "+tc.name, func(t *testing.T) {
			var b builder
			b.set("k", "v1", 0, 10, OK)
			b.set("k", "v2", 20, 100, OK)                   // acknowledged after both reads
			b.op(3, Get, "k", "", 25, 30, OK).Result = "v2" // seen, over at 30
			r := b.get("k", "v1", tc.inv, tc.inv+5)
			var rules []Rule
			if tc.rules != nil {
				rules = []Rule{ReadWentBack}
			}
			wantWith(t, &b, opt, r, rules...)
		})
	}
}
