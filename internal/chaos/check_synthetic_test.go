package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The synthetic histories of issue 42: what a broken client would record,
// each of which the checker must reject, and beside each the nearest
// histories a correct cache may produce, which it must accept. Times are
// milliseconds.

// owners is a placement for CheckOptions.Owners: k's old owner n1 and new
// owner n2, every other key on n3.
func owners(key string) []string {
	if key == "k" {
		return []string{"n1", "n2"}
	}
	return []string{"n3"}
}

// 1. A client whose GetMulti never falls back to the old owner: a key
// written before the migration, on its old owner alone, reads as a miss in
// a GetMulti during the window, with no fault on its owners, no expiry and
// no eviction.
func TestSyntheticGetMultiNoFallback(t *testing.T) {
	build := func() (*builder, *Op, *Op) {
		var b builder
		b.h.Info = RunInfo{MigrationStart: 100e6, MigrationEnd: 10_100e6}
		w := b.set("k", "v1", 0, 10, OK)
		b.set("j", "w1", 0, 10, OK)
		b.fault(KillServer, "n3", 200, 300) // j's node: not k's
		r := b.getMulti([]string{"k", "j"}, map[string]string{}, 500, 510)
		return &b, w, r
	}
	b, w, r := build()
	res := wantWith(t, b, CheckOptions{Owners: owners}, r, LostKey)
	if v := res.Violations[0]; v.Write != w || v.Key != "k" || !strings.Contains(v.Detail, "on n1, n2") {
		t.Errorf("lost %v on %s (%s), want %v on k, owners named", v.Write.ID, v.Key, v.Detail, w.ID)
	}
	if res.Explained[ByFault] != 1 {
		t.Errorf("explained %v, want j's miss by its node's fault", res.Explained)
	}
	// Check knows no owners: a fault on any node explains any miss.
	b, _, _ = build()
	want(t, b, nil)
}

// 2. Reads flip-flopping between two values, each read beginning after the
// previous ended: v2's write began after v1's ended, so once a read has
// seen v2, v1 is gone for good.
func TestSyntheticFlipFlop(t *testing.T) {
	for _, v2Comp := range []int64{25, 5000} { // over before the reads; under way all through
		t.Run(fmt.Sprint(v2Comp), func(t *testing.T) {
			var b builder
			b.set("k", "v1", 0, 10, OK)
			b.set("k", "v2", 20, v2Comp, OK)
			var rules []Rule
			for i := range int64(20) {
				v := []string{"v2", "v1"}[i%2]
				b.get("k", v, 30+20*i, 40+20*i)
				if v == "v1" {
					if v2Comp < 30 {
						rules = append(rules, StaleRead)
					} else {
						rules = append(rules, ReadWentBack)
					}
				}
			}
			res := want(t, &b, nil, rules...)
			if len(res.Violations) != 10 {
				t.Errorf("%d violations, want one per read of v1", len(res.Violations))
			}
		})
	}
}

// 3. A new value read, then the older one again, the new one's write still
// under way.
func TestSyntheticNewThenOld(t *testing.T) {
	var b builder
	w1 := b.set("k", "v1", 0, 10, OK)
	b.set("k", "v2", 20, 200, OK)
	r1 := b.get("k", "v2", 30, 40)
	r2 := b.op(3, Get, "k", "", 50, 60, OK) // another process
	r2.Result = "v1"
	res := want(t, &b, r2, ReadWentBack)
	if v := res.Violations[0]; v.Write != w1 || v.Witness != r1 {
		t.Errorf("write %v witness %v, want %v and %v", v.Write.ID, v.Witness.ID, w1.ID, r1.ID)
	}

	// The reads in the other order, or overlapping, or v2 failed (it may
	// have reached one replica only), or loaded (maybe never stored): no
	// evidence that v1 is gone.
	for name, mk := range map[string]func(b *builder){
		"old then new": func(b *builder) { b.get("k", "v1", 30, 40); b.get("k", "v2", 50, 60) },
		"overlapping":  func(b *builder) { b.get("k", "v2", 30, 55); b.get("k", "v1", 50, 60) },
		"failed": func(b *builder) {
			b.h.Ops[len(b.h.Ops)-1].Status = Failed
			b.get("k", "v2", 30, 40)
			b.get("k", "v1", 50, 60)
		},
	} {
		t.Run(name, func(t *testing.T) {
			var b builder
			b.set("k", "v1", 0, 10, OK)
			b.set("k", "v2", 20, 200, OK)
			mk(&b)
			want(t, &b, nil)
		})
	}
	var c builder
	c.set("k", "v1", 0, 10, OK)
	c.op(1, Load, "k", "l2", 20, 200, Maybe)
	c.op(2, GetOrLoad, "k", "", 15, 210, OK).Result = "l2"
	c.get("k", "v1", 220, 230)
	want(t, &c, nil)

	// With replicas, v2's read is evidence only once v2's Set returned:
	// while it is in flight, processes reading different members may see
	// either value.
	var d builder
	d.h.Info.Replicas = 2
	d.set("k", "v1", 0, 10, OK)
	d.set("k", "v2", 20, 200, OK)
	d.get("k", "v2", 30, 40)
	d.op(3, Get, "k", "", 50, 60, OK).Result = "v1" // another process, another member
	want(t, &d, nil)
	late := d.op(3, Get, "k", "", 210, 220, OK)
	late.Result = "v1"
	want(t, &d, late, StaleRead)
}

// Two acknowledged writes under way at once may be read in either order,
// and back: the cache promises no order between them (a migration's dual
// write may leave one on the new owner and the other on the old).
func TestSyntheticConcurrentWritesEitherOrder(t *testing.T) {
	var b builder
	b.set("k", "v1", 0, 100, OK)
	b.set("k", "v2", 10, 110, OK)
	for i, v := range []string{"v2", "v1", "v2", "v1"} {
		b.get("k", v, 120+20*int64(i), 130+20*int64(i))
	}
	want(t, &b, nil)
}

// 4. A failed write's value read 10 s later, after 20 acknowledged writes
// that began after it returned.
func TestSyntheticFailedWriteReadLate(t *testing.T) {
	build := func() (*builder, *Op) {
		var b builder
		b.set("k", "v0", 0, 10, OK)
		f := b.set("k", "vf", 20, 220, Failed) // a timeout
		for i := range int64(20) {
			b.set("k", fmt.Sprintf("v%d", i+1), 300+100*i, 350+100*i, OK)
		}
		return &b, f
	}
	b, f := build()
	r := b.get("k", "vf", 10_000, 10_010)
	res := want(t, b, r, StaleFailedRead)
	if v := res.Violations[0]; v.Write != f || v.Witness.Value != "v20" {
		t.Errorf("write %v witness %v, want %v and the last write, v20", v.Write.ID, v.Witness.Value, f.ID)
	}

	// Read before any later write completed: it may just have landed.
	b, _ = build()
	b.get("k", "vf", 230, 240)
	b.get("k", "vf", 320, 340) // v1 under way
	want(t, b, nil)

	// A node of the key stopped while the write was under way may hold it
	// back past its successors, and apply it when continued.
	b, _ = build()
	b.fault(PauseServer, "n1", 100, 2000)
	b.get("k", "vf", 10_000, 10_010)
	wantWith(t, b, CheckOptions{Owners: owners}, nil)
	// A fault on another node does not.
	b, _ = build()
	b.fault(PauseServer, "n3", 100, 2000)
	b.get("k", "vf", 10_000, 10_010)
	wantWith(t, b, CheckOptions{Owners: owners}, nil, StaleFailedRead)
}

// A write cut short by its process's kill returned at the kill: its value
// is bounded as a failed write's. Without a kill recorded, it has no end.
func TestCutShortWriteBoundedByKill(t *testing.T) {
	for _, kill := range []bool{true, false} {
		var b builder
		b.set("k", "vp", 0, 0, Pending) // process 1
		if kill {
			b.fault(KillClient, "p1", 50, 100)
		}
		b.op(3, Set, "k", "v1", 60, 70, OK)
		r := b.get("k", "vp", 80, 90)
		if kill {
			want(t, &b, r, StaleFailedRead)
		} else {
			want(t, &b, nil)
		}
	}
}

// 5. An acknowledged value read as a miss 50 times: no fault, no expiry, no
// eviction, no delete. One violation, the lost write's.
func TestSyntheticLostValue(t *testing.T) {
	var b builder
	w := b.set("k", "v1", 0, 10, OK)
	var first *Op
	for i := range int64(50) {
		m := b.get("k", "", 100+20*i, 110+20*i)
		if first == nil {
			first = m
		}
	}
	res := want(t, &b, first, LostKey)
	if v := res.Violations[0]; v.Write != w || !strings.Contains(v.Detail, "missed by 50 reads") {
		t.Errorf("lost %v (%s), want %v missed by 50 reads", v.Write.ID, v.Detail, w.ID)
	}
	if len(res.Explained) != 0 {
		t.Errorf("explained %v, want nothing", res.Explained)
	}
}

// Misses a correct cache may produce once a value was acknowledged, each
// with its cause, and the same histories rejected once the cause is gone.
func TestMissExplained(t *testing.T) {
	sec := int64(time.Second / time.Millisecond)
	cases := []struct {
		name  string
		opt   CheckOptions
		build func(b *builder)
		cause Cause // "": rejected as lost
	}{
		{"fault on an owner", CheckOptions{Owners: owners}, func(b *builder) { b.fault(KillServer, "n2", 50, 60) }, ByFault},
		{"fault on no owner", CheckOptions{Owners: owners}, func(b *builder) { b.fault(KillServer, "n3", 50, 60) }, ""},
		{"fault on any node, owners unknown", CheckOptions{}, func(b *builder) { b.fault(Partition, "n3", 50, 60) }, ByFault},
		{"fault ended just before the write", CheckOptions{}, func(b *builder) { b.fault(Partition, "n1", -1000, -500) }, ByFault},
		{"fault long before the write", CheckOptions{}, func(b *builder) { b.fault(Partition, "n1", -9000, -8000) }, ""},
		{"fault after the miss", CheckOptions{}, func(b *builder) { b.fault(KillServer, "n1", 3*sec, 4*sec) }, ""},
		{"a client killed", CheckOptions{}, func(b *builder) { b.fault(KillClient, "p1", 50, 60) }, ""},
		{"a sweep", CheckOptions{}, func(b *builder) { b.fault(Sweep, "p1", 50, 60) }, ""},
		{"eviction on an owner", CheckOptions{Owners: owners, Evictions: map[string]int64{"n1": 3}}, nil, ByEviction},
		{"eviction on no owner", CheckOptions{Owners: owners, Evictions: map[string]int64{"n3": 3}}, nil, ""},
		{"expiry", CheckOptions{}, func(b *builder) { b.h.Ops[0].TTL = 2 * time.Second }, ByExpiry},
		{"expiry not yet", CheckOptions{}, func(b *builder) { b.h.Ops[0].TTL = 4 * time.Second }, ""},
		{"migration's end", CheckOptions{}, func(b *builder) { b.h.Info.MigrationEnd = sec * 1e6 }, ByMigration},
		{"migration's end long after", CheckOptions{}, func(b *builder) { b.h.Info.MigrationEnd = 20 * sec * 1e6 }, ""},
		{"topology applied", CheckOptions{}, func(b *builder) {
			b.h.Topologies = append(b.h.Topologies, TopologyEvent{Kind: TopologyApplied, At: 1500e6})
		}, ByMigration},
		{"reshard's window ends", CheckOptions{}, func(b *builder) {
			b.h.Faults = append(b.h.Faults, Fault{Kind: Reshard, Target: "p1", Detail: "to 4 nodes, window 10s", Start: -8 * sec * 1e6})
		}, ByMigration},
		{"reshard's window ends later", CheckOptions{}, func(b *builder) {
			b.h.Faults = append(b.h.Faults, Fault{Kind: Reshard, Target: "p1", Detail: "to 4 nodes, window 10s", Start: -20 * sec * 1e6})
		}, ""},
		{"fail-open failure on an owner", CheckOptions{Owners: owners, FailOpen: true}, func(b *builder) {
			b.op(3, Get, "k2", "", 100, 300, Failed).Keys = []string{"k"}
		}, ByFailure},
		{"fail-open failure elsewhere", CheckOptions{Owners: owners, FailOpen: true}, func(b *builder) {
			b.op(3, Get, "j", "", 100, 300, Failed)
		}, ""},
		{"failure without FailOpen", CheckOptions{Owners: owners}, func(b *builder) {
			b.op(3, Get, "k", "", 100, 300, Failed)
		}, ""},
		{"drops seen: FailOpen", CheckOptions{}, func(b *builder) {
			b.h.Stats = append(b.h.Stats, WorkerStats{Dropped: 1})
			b.op(3, Get, "j", "", 100, 300, Failed)
		}, ByFailure},
		{"acknowledged delete", CheckOptions{}, func(b *builder) { b.del("k", 1000, 1100, OK) }, ByDelete},
		{"failed delete, no successor", CheckOptions{}, func(b *builder) { b.del("k", 1000, 1100, Failed) }, ByDelete},
		{"failed delete before the write", CheckOptions{}, func(b *builder) {
			b.del("k", -100, -50, Failed) // the write began after it returned
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b builder
			b.set("k", "v1", 0, 10, OK)
			if tc.build != nil {
				tc.build(&b)
			}
			m := b.get("k", "", 2500, 2510)
			if tc.cause == "" {
				wantWith(t, &b, tc.opt, m, LostKey)
				return
			}
			res := wantWith(t, &b, tc.opt, nil)
			if res.Explained[tc.cause] != 1 {
				t.Errorf("explained %v, want 1 by %s", res.Explained, tc.cause)
			}
		})
	}
}

// 6. A deleted value back after a failed delete. A failed delete may have
// happened, but before any acknowledged write or delete that began after
// it returned: after one, it explains no miss (a), and a value a
// successor deleted cannot come back (b).
func TestSyntheticDeletedValueBack(t *testing.T) {
	// (a) v1, then a failed delete, then v2 written after it returned: a
	// miss of v2 is the failed delete's no more.
	var a builder
	a.set("k", "v1", 0, 10, OK)
	a.del("k", 20, 30, Failed)
	w2 := a.set("k", "v2", 40, 50, OK)
	m := a.get("k", "", 100, 110)
	res := want(t, &a, m, LostKey)
	if res.Violations[0].Write != w2 {
		t.Errorf("lost %v, want v2's write", res.Violations[0].Write.ID)
	}
	// v2 begun before the delete returned: the delete may have landed
	// after it.
	var a2 builder
	a2.set("k", "v1", 0, 10, OK)
	a2.del("k", 20, 30, Failed)
	a2.set("k", "v2", 25, 50, OK)
	a2.get("k", "", 100, 110)
	want(t, &a2, nil)

	// (b) A failed write's value, a failed delete, an acknowledged delete
	// begun after both returned: the value read after it is back from the
	// dead.
	var b builder
	f := b.set("k", "vf", 0, 10, Failed)
	b.del("k", 20, 30, Failed)
	x := b.del("k", 40, 50, OK)
	r := b.get("k", "vf", 60, 70)
	res = want(t, &b, r, StaleFailedRead)
	if v := res.Violations[0]; v.Write != f || v.Witness != x {
		t.Errorf("write %v witness %v, want %v and the acknowledged delete", v.Write.ID, v.Witness.ID, f.ID)
	}
}

// Report prints the new rules' violations with their operations.
func TestReportNewRules(t *testing.T) {
	var b builder
	b.set("k", "v1", 0, 10, OK)
	b.set("k", "v2", 20, 200, OK)
	b.get("k", "v2", 30, 40)
	b.get("k", "v1", 50, 60)
	b.get("k", "", 300, 310)
	b.get("k", "", 320, 330)
	res := want(t, &b, nil, ReadWentBack, LostKey)
	text := Report(&b.h, res, 10)
	for _, s := range []string{"read went back: key k", `read "v2" before`, "acknowledged value lost: key k",
		"missed by 2 reads", `wrote "v2"`} {
		if !strings.Contains(text, s) {
			t.Errorf("report lacks %q:\n%s", s, text)
		}
	}
}
