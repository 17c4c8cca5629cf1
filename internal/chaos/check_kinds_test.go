package chaos

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/client"
)

// The checker's reading of the workload's other kinds (kinds.go): multi-key
// writes, conditional writes, decrements, the other reads, and Touch.
// Times are milliseconds.

// multi records a multi-key operation (SetMulti, DeleteMulti) of keys; a
// failed one lists acked as acknowledged all the same.
func (b *builder) multi(kind Kind, keys []string, value string, inv, comp int64, st Status, acked ...string) *Op {
	o := b.op(1, kind, keys[0], value, inv, comp, st)
	o.Keys = keys
	if len(acked) > 0 {
		o.Results = make(map[string]string)
		for _, k := range acked {
			o.Results[k] = AckedKey
		}
	}
	return o
}

// read records a single-key read of kind (RedisGet, GetItem...): result
// "" is a miss.
func (b *builder) read(kind Kind, key, result string, inv, comp int64) *Op {
	o := b.get(key, result, inv, comp)
	o.Kind = kind
	return o
}

// SetMulti is one write per key, each checked as a Set: acknowledged, it
// supersedes and its loss is a lost key.
func TestSetMultiWritesEachKey(t *testing.T) {
	var b builder
	b.set("a", "v1", 0, 10, OK)
	b.set("b", "w1", 0, 10, OK)
	w := b.multi(SetMulti, []string{"a", "b"}, "m1", 20, 30, OK)
	r := b.get("b", "w1", 40, 50)
	b.get("a", "m1", 40, 50)
	res := want(t, &b, r, StaleRead)
	if v := res.Violations[0]; v.Witness.ID != w.ID || v.Witness.Key() != "b" {
		t.Errorf("witness %v on %s, want the SetMulti's share of b", v.Witness.ID, v.Witness.Key())
	}
	if res.Ops[SetMulti] != 1 {
		t.Errorf("ops %v, want one setmulti", res.Ops)
	}

	// Lost: a miss of one of its keys, no cause.
	var c builder
	c.multi(SetMulti, []string{"a", "b"}, "m1", 0, 10, OK)
	c.get("a", "m1", 20, 30)
	r = c.get("b", "", 20, 30)
	res = want(t, &c, r, LostKey)
	if v := res.Violations[0]; v.Write.Kind != SetMulti || v.Key != "b" {
		t.Errorf("lost %s on %s, want the setmulti on b", v.Write.Kind, v.Key)
	}
	if text := Report(&c.h, res, 1); !strings.Contains(text, `setmulti  b`) || !strings.Contains(text, `wrote "m1"`) {
		t.Errorf("report lacks the setmulti's share of b:\n%s", text)
	}
}

// A failed SetMulti: the keys it lists as acknowledged were written, the
// others may have been, until their successors.
func TestSetMultiFailedPerKey(t *testing.T) {
	var b builder
	b.multi(SetMulti, []string{"a", "b"}, "m1", 0, 10, Failed, "a")
	ra := b.get("a", "", 20, 30) // a was acknowledged: lost
	b.get("b", "", 20, 30)       // b may never have been written
	b.get("b", "m1", 40, 50)     // or later
	want(t, &b, ra, LostKey)

	var c builder
	c.multi(SetMulti, []string{"a", "b"}, "m1", 0, 10, Failed, "a")
	c.set("a", "v2", 20, 30, OK)
	c.set("b", "w2", 20, 30, OK)
	r1 := c.get("a", "m1", 40, 50)
	r2 := c.get("b", "m1", 40, 50)
	res := want(t, &c, nil, StaleRead, StaleFailedRead)
	for _, v := range res.Violations {
		if v.Rule == StaleRead && v.Read != r1 || v.Rule == StaleFailedRead && v.Read != r2 {
			t.Errorf("%s names %v", v.Rule, v.Read.ID)
		}
	}
}

// DeleteMulti is one delete per key: acknowledged, a value of any of its
// keys read after it is a deleted value read; failed, only those it lists
// as acknowledged.
func TestDeleteMultiDeletesEachKey(t *testing.T) {
	var b builder
	b.set("a", "v1", 0, 10, OK)
	b.set("b", "w1", 0, 10, OK)
	d := b.multi(DeleteMulti, []string{"a", "b"}, "", 20, 30, OK)
	b.get("a", "", 40, 50) // explained by the delete
	r := b.get("b", "w1", 40, 50)
	res := want(t, &b, r, DeletedRead)
	if !sameOp(res.Violations[0].Witness, d) {
		t.Errorf("witness %v, want the deletemulti", res.Violations[0].Witness.ID)
	}
	if res.Explained[ByDelete] != 1 {
		t.Errorf("explained %v, want a's miss by the delete", res.Explained)
	}

	var c builder
	c.set("a", "v1", 0, 10, OK)
	c.set("b", "w1", 0, 10, OK)
	c.multi(DeleteMulti, []string{"a", "b"}, "", 20, 30, Failed, "b")
	c.get("a", "v1", 40, 50) // the failed delete of a may never land
	r = c.get("b", "w1", 40, 50)
	want(t, &c, r, DeletedRead)
}

// An acknowledged Add or StoreCAS is a write, as Set's; a refused one
// (NotStored) wrote nothing: its value is nobody's, and it supersedes
// nothing.
func TestConditionalWrites(t *testing.T) {
	for _, kind := range []Kind{Add, StoreCAS} {
		t.Run(string(kind), func(t *testing.T) {
			var b builder
			b.set("k", "v1", 0, 10, OK)
			b.op(1, kind, "k", "c1", 20, 30, NotStored)
			b.get("k", "v1", 40, 50) // not superseded
			r := b.get("k", "c1", 40, 50)
			want(t, &b, r, UnknownValue)

			var c builder
			c.set("k", "v1", 0, 10, OK)
			w := c.op(1, kind, "k", "c1", 20, 30, OK)
			r = c.get("k", "v1", 40, 50)
			res := want(t, &c, r, StaleRead)
			if res.Violations[0].Witness != w {
				t.Errorf("witness %v, want the %s", res.Violations[0].Witness.ID, kind)
			}

			// Acknowledged, it is evidence, and its loss a lost key.
			var d builder
			d.set("k", "v1", 0, 10, OK)
			d.op(1, kind, "k", "c1", 20, 100, OK) // under way until after the reads
			d.get("k", "c1", 40, 50)
			back := d.get("k", "v1", 60, 70)
			lost := d.get("k", "", 110, 120)
			res = want(t, &d, nil, ReadWentBack, LostKey)
			for _, v := range res.Violations {
				if v.Rule == ReadWentBack && v.Read != back || v.Rule == LostKey && v.Read != lost {
					t.Errorf("%s names %v", v.Rule, v.Read.ID)
				}
			}

			// Failed, it may have been applied.
			var e builder
			e.set("k", "v1", 0, 10, OK)
			e.op(1, kind, "k", "c1", 20, 30, Failed)
			e.get("k", "c1", 40, 50)
			e.get("k", "v1", 60, 70)
			want(t, &e, nil)
		})
	}
}

// RedisGet and GetItem read as Get: a stale value, or an unexplained miss.
func TestOtherReads(t *testing.T) {
	for _, kind := range []Kind{RedisGet, GetItem} {
		t.Run(string(kind), func(t *testing.T) {
			var b builder
			b.set("k", "v1", 0, 10, OK)
			b.set("k", "v2", 20, 30, OK)
			r := b.read(kind, "k", "v1", 40, 50)
			want(t, &b, r, StaleRead)

			var c builder
			c.set("k", "v1", 0, 10, OK)
			r = c.read(kind, "k", "", 20, 30)
			res := want(t, &c, r, LostKey)
			if res.Misses != 1 {
				t.Errorf("%d misses, want 1", res.Misses)
			}
		})
	}
}

// GetMultiOrLoad's answers are reads, checked as GetMulti's hits; a key
// it did not answer was loaded or failed, no miss.
func TestGetMultiOrLoad(t *testing.T) {
	var b builder
	b.set("a", "v1", 0, 10, OK)
	b.set("a", "v2", 20, 30, OK)
	b.set("b", "w1", 0, 10, OK)
	b.op(1, Load, "c", "l1", 41, 45, Maybe)
	r := b.getMulti([]string{"a", "b", "c"}, map[string]string{"a": "v1", "c": "l1"}, 40, 50)
	r.Kind = GetMultiOrLoad
	res := want(t, &b, r, StaleRead)
	if res.Reads != 2 || res.Misses != 0 {
		t.Errorf("%d reads, %d misses; want 2 and none", res.Reads, res.Misses)
	}
}

// Touch changes no value: the checker reads nothing from it, a miss
// included, and it explains nothing.
func TestTouchIgnored(t *testing.T) {
	var b builder
	b.set("k", "v1", 0, 10, OK)
	b.op(2, Touch, "k", "", 20, 30, Miss)
	b.op(2, Touch, "k", "", 20, 30, Failed)
	b.get("k", "v1", 40, 50)
	r := b.get("k", "", 60, 70)
	res := want(t, &b, r, LostKey)
	if res.Ops[Touch] != 2 || res.Misses != 1 {
		t.Errorf("ops %v, %d misses; want 2 touches, 1 miss", res.Ops, res.Misses)
	}
}

// decr records a Decr of key that returned result.
func (b *builder) decr(key, result string, inv, comp int64, st Status) *Op {
	o := b.op(3, Decr, key, "", inv, comp, st)
	o.Result = result
	return o
}

// A counter that Decr takes back goes down by the decrements that may fall
// between two observations, and no further.
func TestCounterDecrements(t *testing.T) {
	var b builder
	b.incr("c", "1", 0, 10, OK)
	b.incr("c", "2", 20, 30, OK)
	b.decr("c", "1", 40, 50, OK)
	b.get("c", "1", 60, 70)
	b.incr("c", "2", 80, 90, OK) // 2 again: a decrement between
	b.decr("c", "", 100, 110, Failed)
	b.get("c", "1", 120, 130) // the failed one may have counted
	b.get("c", "2", 120, 130) // or not
	want(t, &b, nil)

	// Without a decrement between, a counter does not go back.
	var c builder
	c.incr("c", "1", 0, 10, OK)
	c.incr("c", "2", 20, 30, OK)
	c.decr("c", "1", 40, 50, OK)
	r := c.get("c", "0", 60, 70)
	res := want(t, &c, r, CounterBackwards)
	if !strings.Contains(res.Violations[0].Detail, "at most 1 decrements between") {
		t.Errorf("detail %q", res.Violations[0].Detail)
	}

	// A decrement under way with the earlier observation counts.
	var d builder
	d.incr("c", "1", 0, 10, OK)
	d.incr("c", "2", 20, 30, OK)
	d.decr("c", "1", 25, 50, OK)
	d.get("c", "1", 60, 70)
	want(t, &d, nil)

	// Two increments return one value only with a decrement between, two
	// decrements only with an increment between (or at 0: Memcached stops
	// there).
	var e builder
	e.incr("c", "1", 0, 10, OK)
	e.incr("c", "2", 20, 30, OK)
	e.decr("c", "1", 40, 50, OK)
	e.incr("c", "2", 60, 70, OK)
	e.decr("c", "1", 80, 90, OK)
	e.decr("c", "0", 100, 110, OK)
	e.decr("c", "0", 120, 130, OK)
	e.incr("c", "1", 140, 150, OK)
	want(t, &e, nil)

	var f builder
	f.incr("c", "1", 0, 10, OK)
	f.incr("c", "2", 11, 19, OK)
	f.decr("c", "1", 20, 30, OK)
	f.decr("c", "1", 25, 35, OK) // concurrent: one lost
	want(t, &f, nil, CounterDuplicate)

	var g builder
	g.incr("c", "1", 0, 10, OK)
	g.decr("c", "", 15, 18, Failed) // may land any time after
	g.incr("c", "1", 20, 30, OK)
	want(t, &g, nil)

	// A decrement never raises a counter above its increments.
	var h builder
	h.incr("c", "1", 0, 10, OK)
	r = h.decr("c", "2", 20, 30, OK)
	want(t, &h, r, CounterAbove)
}

// Below, with decrements: acknowledged increments less every decrement
// that may have counted since the counter last started.
func TestCounterBelowWithDecrements(t *testing.T) {
	var b builder
	b.incr("c", "1", 0, 10, OK)
	b.incr("c", "1", 0, 10, OK) // a lost increment, seen by the read
	b.decr("c", "", 0, 10, Failed)
	b.get("c", "1", 20, 30) // two increments, one decrement may count
	res := b.check()
	if res.Count(CounterBelow) != 0 {
		t.Errorf("below with a decrement that may count:\n%s", Report(&b.h, res, 5))
	}

	var c builder
	c.incr("c", "1", 0, 10, OK)
	c.incr("c", "2", 12, 20, OK)
	c.decr("c", "1", 0, 5, OK)       // over before the delete began
	c.del("c", 6, 8, OK)             // the counter starts again
	r := c.get("c", "-1", 30, 40)    // the decrement before it does not count
	want(t, &c, r, CounterBackwards) // reported first: 2 was seen
}

// The history format carries the new kinds and NotStored.
func TestRecorderNewKinds(t *testing.T) {
	var buf bytes.Buffer
	rec := NewRecorder(&buf)
	id := OpID{Proc: 1, Seq: 1}
	rec.Invoke(id, SetMulti, []string{"a", "b"}, Value(id))
	rec.Complete(id, Failed, nil, map[string]string{"a": AckedKey}, errors.New("n1: timeout"))
	id2 := OpID{Proc: 1, Seq: 2}
	rec.Invoke(id2, Add, []string{"a"}, Value(id2))
	rec.Complete(id2, NotStored, nil, nil, errors.New("not stored"))
	h, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Ops) != 2 {
		t.Fatalf("%d ops", len(h.Ops))
	}
	m, a := h.Ops[0], h.Ops[1]
	if m.Kind != SetMulti || len(m.Keys) != 2 || m.Results["a"] != AckedKey || m.Status != Failed {
		t.Errorf("setmulti read back %+v", m)
	}
	if a.Kind != Add || a.Status != NotStored || a.End() != a.Comp {
		t.Errorf("add read back %+v", a)
	}
	if s := keyShare(m, "a"); s.Status != OK || s.Key() != "a" || keyShare(m, "b").Status != Failed {
		t.Errorf("shares: a %s, b %s", s.Status, keyShare(m, "b").Status)
	}
}

// Memcached pads a counter that a decrement shortened ("9 " after 10): the
// same number.
func TestCounterPadded(t *testing.T) {
	var b builder
	for i := range 10 {
		b.incr("c", strconv.Itoa(i+1), int64(10*i), int64(10*i+5), OK)
	}
	b.decr("c", "9", 100, 105, OK)
	b.get("c", "9 ", 110, 115)
	r := b.get("c", "9x", 120, 125)
	want(t, &b, r, CounterGarbage)
}

// A failed multi-key write's acknowledged keys are those no NodeError
// names, and only when every NodeError names keys of the call: a
// DeleteMulti whose leases could not be cleared deleted nothing, its
// error naming the lease keys.
func TestFailedKeys(t *testing.T) {
	keys := []string{"a", "b", "c"}
	ne := func(keys ...string) error {
		return &client.NodeError{Op: "set_multi", Keys: keys, Err: client.ErrNodeDown}
	}
	failed, ok := failedKeys(errors.Join(ne("a"), ne("c")), keys)
	if !ok || len(failed) != 2 || !failed["a"] || failed["b"] || !failed["c"] {
		t.Errorf("failed %v, %v; want a and c", failed, ok)
	}
	for _, err := range []error{
		ne("shardcache:lease:b"),
		errors.Join(ne("a"), context.DeadlineExceeded),
		client.ErrClosed,
	} {
		if _, ok := failedKeys(err, keys); ok {
			t.Errorf("%v: per-key outcomes trusted", err)
		}
	}
}
