package gutter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
)

// flushMap is a home node that counts its flushes (node.Items' Flush; the
// other item calls are not used here).
type flushMap struct {
	*nodetest.Map
	flushes int
}

func (f *flushMap) Flush(ctx context.Context) error {
	f.flushes++
	return nil
}
func (f *flushMap) GetItem(context.Context, string) (node.Item, error) {
	return node.Item{}, node.ErrUnsupported
}
func (f *flushMap) Store(context.Context, node.StoreOp, node.Item) error { return node.ErrUnsupported }
func (f *flushMap) GetAndTouch(context.Context, string, time.Duration) (node.Item, error) {
	return node.Item{}, node.ErrUnsupported
}
func (f *flushMap) IncrDecr(context.Context, string, uint64, bool) (uint64, error) {
	return 0, node.ErrUnsupported
}
func (f *flushMap) DeleteFound(context.Context, string) (bool, error) {
	return false, node.ErrUnsupported
}

func newHome(t *testing.T, keys ...string) *flushMap {
	t.Helper()
	h := &flushMap{Map: nodetest.NewMap()}
	for _, k := range keys {
		if err := h.Set(context.Background(), k, []byte("old"), 0); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func mustApply(t *testing.T, l *Log, to, home node.Node) {
	t.Helper()
	if err := l.Apply(context.Background(), to, home); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// pending is l.Pending on what a tick reads on to.
func pending(l *Log, to *nodetest.Map) bool {
	return l.Pending(to.Value(l.SeqKey()), to.Value(l.EpochKey()))
}

// TestLog: what one process writes through the gutter is deleted at home
// by another before it reads there; each process applies each entry once,
// and a process that starts applies the entries still there (their writer
// may be gone, and no process may have had home up since).
func TestLog(t *testing.T) {
	ctx := context.Background()
	to, home := nodetest.NewMap(), newHome(t, "a", "b", "k:with\nnewline")
	writer, reader := NewLog("h 1", time.Hour), NewLog("h 1", time.Hour)
	if pending(reader, to) {
		t.Fatal("nothing published, the reader finds entries pending")
	}
	if err := writer.Publish(ctx, to, []string{"a", "k:with\nnewline"}); err != nil {
		t.Fatal(err)
	}
	if to.Value(writer.EpochKey()) == nil {
		t.Fatal("a first entry without an epoch")
	}
	if !pending(reader, to) {
		t.Fatal("an entry published, the reader finds none pending")
	}
	mustApply(t, reader, to, home)
	if home.Value("a") != nil || home.Value("k:with\nnewline") != nil || home.Value("b") == nil {
		t.Errorf("after Apply home holds a=%q nl=%q b=%q; want the logged keys deleted, b kept", home.Value("a"), home.Value("k:with\nnewline"), home.Value("b"))
	}
	if pending(reader, to) || home.flushes != 0 {
		t.Errorf("applied: pending %v, %d flushes; want neither", pending(reader, to), home.flushes)
	}

	// Applied once: a later value at home is not deleted again by this
	// process; a process that starts applies what is still logged.
	home.Set(ctx, "a", []byte("new"), 0)
	mustApply(t, reader, to, home)
	if string(home.Value("a")) != "new" {
		t.Errorf("a = %q after a second Apply; want the applied entry skipped", home.Value("a"))
	}
	late := NewLog("h 1", time.Hour)
	if !pending(late, to) {
		t.Error("a process that starts finds nothing pending in a log with entries")
	}
	mustApply(t, late, to, home)
	if home.Value("a") != nil {
		t.Errorf("a = %q after a new process's Apply; want the logged key deleted", home.Value("a"))
	}

	// Many keys: entries of entryKeys keys, read readEntries at a time.
	var many []string
	for i := range 2500 {
		many = append(many, fmt.Sprintf("m%d", i))
	}
	for range 120 { // 360 entries: four reads
		if err := writer.Publish(ctx, to, many); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range many {
		home.Set(ctx, k, []byte("old"), 0)
	}
	mustApply(t, late, to, home)
	if i := slices.IndexFunc(many, func(k string) bool { return home.Value(k) != nil }); i >= 0 {
		t.Errorf("%q kept at home after its entries were applied", many[i])
	}
	if pending(late, to) || home.flushes != 0 {
		t.Errorf("all applied: pending %v, %d flushes; want neither", pending(late, to), home.flushes)
	}
}

// TestLogAbsent: an entry counted but not yet written holds this
// process's cursor, not the entries after it, until its grace; past it
// (its writer died, or it expired or was evicted) home is flushed.
func TestLogAbsent(t *testing.T) {
	ctx := context.Background()
	to, home := nodetest.NewMap(), newHome(t, "b")
	writer, reader := NewLog("h", time.Hour), NewLog("h", time.Hour)
	if err := writer.Publish(ctx, to, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := to.Incr(ctx, writer.SeqKey(), 1); err != nil { // a writer between its count and its entry
		t.Fatal(err)
	}
	if err := writer.Publish(ctx, to, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, reader, to, home)
	if home.Value("b") != nil || home.flushes != 0 {
		t.Errorf("behind an absent entry: b = %q, %d flushes; want b deleted, no flush", home.Value("b"), home.flushes)
	}
	if !pending(reader, to) {
		t.Error("an entry waited for, none pending")
	}
	// The entry lands: applied at the next Apply.
	home.Set(ctx, "c", []byte("old"), 0)
	to.Set(ctx, writer.entryKey(2), encodeKeys([]string{"c"}), 0)
	mustApply(t, reader, to, home)
	if home.Value("c") != nil || pending(reader, to) || home.flushes != 0 {
		t.Errorf("the late entry: c = %q, pending %v, %d flushes; want c deleted, nothing pending, no flush", home.Value("c"), pending(reader, to), home.flushes)
	}

	// Absent past its grace: home flushed, once.
	impatient := NewLog("h", 0)
	mustApply(t, impatient, to, home)
	if home.flushes != 0 {
		t.Fatalf("every entry there: %d flushes", home.flushes)
	}
	to.Incr(ctx, writer.SeqKey(), 1)
	mustApply(t, impatient, to, home)
	mustApply(t, impatient, to, home)
	if home.flushes != 1 {
		t.Errorf("an entry absent past its grace: %d flushes; want 1", home.flushes)
	}
	// Expired (or evicted) before this process read it: the same.
	if err := writer.Publish(ctx, to, []string{"d"}); err != nil {
		t.Fatal(err)
	}
	to.Delete(ctx, writer.entryKey(5))
	mustApply(t, impatient, to, home)
	if home.flushes != 2 {
		t.Errorf("an entry gone: %d flushes; want 2", home.flushes)
	}
}

// TestLogLost: a log the gutter lost (restarted: a counter created anew
// brings a new epoch; or its epoch evicted), an entry that does not
// decode, or more entries behind than MaxHints flush home: what the log
// held is unknown, or too much to replay.
func TestLogLost(t *testing.T) {
	ctx := context.Background()
	to, home := nodetest.NewMap(), newHome(t)
	l := NewLog("h", time.Hour)
	if err := l.Publish(ctx, to, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, l, to, home)
	to.Clear() // the gutter restarted, empty
	if err := l.Publish(ctx, to, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if !pending(l, to) {
		t.Fatal("a new epoch, nothing pending")
	}
	mustApply(t, l, to, home)
	if home.flushes != 1 {
		t.Errorf("after the gutter restarted: %d flushes; want 1", home.flushes)
	}
	mustApply(t, l, to, home)
	if home.flushes != 1 {
		t.Errorf("the new log adopted: %d flushes; want still 1", home.flushes)
	}
	to.Delete(ctx, l.EpochKey()) // evicted
	if !pending(l, to) {
		t.Fatal("the epoch gone, nothing pending")
	}
	mustApply(t, l, to, home)
	if home.flushes != 2 {
		t.Errorf("after the epoch was evicted: %d flushes; want 2", home.flushes)
	}
	to.Set(ctx, l.EpochKey(), []byte("e"), 0)
	mustApply(t, l, to, home) // adopts "e", the log having been flushed for
	n, _ := to.Incr(ctx, l.SeqKey(), 1)
	to.Set(ctx, l.entryKey(n), []byte("9:short"), 0)
	mustApply(t, l, to, home)
	if home.flushes != 3 {
		t.Errorf("after a malformed entry: %d flushes; want 3", home.flushes)
	}
	to.Incr(ctx, l.SeqKey(), MaxHints+1)
	mustApply(t, l, to, home)
	if home.flushes != 4 || pending(l, to) {
		t.Errorf("more than MaxHints entries behind: %d flushes, pending %v; want 4, none", home.flushes, pending(l, to))
	}
}

// failIncr is a gutter node whose counter fails.
type failIncr struct{ *nodetest.Map }

func (failIncr) Incr(context.Context, string, int64) (int64, error) { return 0, node.ErrNodeDown }

type logTarget struct{ n node.Node }

func (t logTarget) Conn() node.Node    { return t.n }
func (t logTarget) Down() bool         { return false }
func (t logTarget) Standin() node.Node { return t.n }

// TestNodePublishes: a write through the gutter is logged before it is
// sent; one whose log fails is not sent, and is hinted at home all the
// same; a log entry that lands too late fails the write too.
func TestNodePublishes(t *testing.T) {
	ctx := context.Background()
	to := nodetest.NewMap()
	h := &testHome{}
	g := New(h, logTarget{to}, time.Minute, NewLog("h", time.Hour))
	if err := g.SetMulti(ctx, []node.Item{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	if ks, err := decodeKeys(to.Value(g.Log().entryKey(1))); err != nil || !slices.Equal(ks, []string{"a", "b"}) {
		t.Errorf("the log's first entry: %q, %v; want [a b]", ks, err)
	}
	if err := g.Delete(ctx, "a"); err != nil || to.Value(g.Log().entryKey(2)) == nil {
		t.Errorf("Delete: %v, entry 2 %q; want it logged", err, to.Value(g.Log().entryKey(2)))
	}

	bad := failIncr{nodetest.NewMap()}
	h = &testHome{}
	g = New(h, logTarget{bad}, time.Minute, NewLog("h", time.Hour))
	if err := g.Set(ctx, "c", []byte("v"), 0); !errors.Is(err, node.ErrNodeDown) {
		t.Errorf("Set with the log failing: %v; want its error", err)
	}
	if bad.Value("c") != nil {
		t.Error("a write sent though its keys were not logged")
	}
	if keys, _ := h.hints.Take(); !slices.Equal(keys, []string{"c"}) {
		t.Errorf("hints %q; want [c]: the write may have been sent", keys)
	}

	g = New(&testHome{}, logTarget{nodetest.NewMap()}, time.Minute, NewLog("h", 0))
	if err := g.Set(ctx, "c", []byte("v"), 0); !errors.Is(err, ErrSlowPublish) {
		t.Errorf("Set whose entry landed past half its grace: %v; want ErrSlowPublish", err)
	}
}

// TestDecodeKeys: an entry that does not decode is an error, not a panic.
func TestDecodeKeys(t *testing.T) {
	for _, b := range []string{"3:ab", ":a", "x:a", "-1:a", "2"} {
		if _, err := decodeKeys([]byte(b)); err == nil {
			t.Errorf("decodeKeys(%q): no error", b)
		}
	}
	if ks, err := decodeKeys(encodeKeys([]string{"", "a:b", "c"})); err != nil || !slices.Equal(ks, []string{"", "a:b", "c"}) {
		t.Errorf("round trip: %q, %v", ks, err)
	}
}
