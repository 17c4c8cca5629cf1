package gutter

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node/nodetest"
)

// TestLog: what one process writes through the gutter is deleted at home
// by another before it reads there (a process killed after its write
// included, since the log is on the gutter); each process applies each
// entry once, a process started later begins after what was applied, and
// an entry counted but not yet written holds the others back until its
// grace ends.
func TestLog(t *testing.T) {
	ctx := context.Background()
	to, home := nodetest.NewMap(), nodetest.NewMap()
	for _, k := range []string{"a", "b", "c", "d", "k:with\nnewline"} {
		if err := home.Set(ctx, k, []byte("old"), 0); err != nil {
			t.Fatal(err)
		}
	}
	writer, reader := NewLog("h:1", time.Hour), NewLog("h:1", time.Hour)
	if err := writer.Publish(ctx, to, []string{"a", "k:with\nnewline"}); err != nil {
		t.Fatal(err)
	}
	if !reader.Pending(to.Value(reader.SeqKey())) {
		t.Fatal("an entry published, the reader finds none pending")
	}
	if err := reader.Apply(ctx, to, home); err != nil {
		t.Fatal(err)
	}
	if home.Value("a") != nil || home.Value("k:with\nnewline") != nil || home.Value("b") == nil {
		t.Errorf("after Apply home holds a=%q nl=%q b=%q; want the logged keys deleted, b kept", home.Value("a"), home.Value("k:with\nnewline"), home.Value("b"))
	}
	if reader.Pending(to.Value(reader.SeqKey())) {
		t.Error("applied, still pending")
	}
	if to.Value(writer.entryKey(1)) != nil {
		t.Error("an applied entry kept on the gutter")
	}

	// Applied once: a later value at home is not deleted again.
	home.Set(ctx, "a", []byte("new"), 0)
	if err := reader.Apply(ctx, to, home); err != nil || string(home.Value("a")) != "new" {
		t.Errorf("a second Apply: %v, a=%q; want nothing done", err, home.Value("a"))
	}

	// A process started later begins after the applied entries.
	late := NewLog("h:1", time.Hour)
	if err := late.Apply(ctx, to, home); err != nil || string(home.Value("a")) != "new" {
		t.Errorf("a new process's Apply: %v, a=%q; want the applied entries skipped", err, home.Value("a"))
	}

	// An entry counted, not yet written: the one after it waits.
	if _, err := to.Incr(ctx, writer.SeqKey(), 1); err != nil {
		t.Fatal(err)
	}
	if err := writer.Publish(ctx, to, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if err := reader.Apply(ctx, to, home); err != nil || home.Value("b") == nil {
		t.Errorf("Apply behind an absent entry: %v, b=%q; want b kept until the entry's grace ends", err, home.Value("b"))
	}
	short := NewLog("h:1", 0) // no grace: the absent entry is skipped
	if err := short.Apply(ctx, to, home); err != nil || home.Value("b") != nil {
		t.Errorf("Apply past an absent entry: %v, b=%q; want b deleted", err, home.Value("b"))
	}

	// Many keys: entries of entryKeys keys each.
	var many []string
	for i := range 2500 {
		many = append(many, "m"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)))
	}
	for _, k := range many {
		home.Set(ctx, k, []byte("old"), 0)
	}
	if err := writer.Publish(ctx, to, many); err != nil {
		t.Fatal(err)
	}
	if err := late.Apply(ctx, to, home); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(many, func(k string) bool { return home.Value(k) != nil }); i >= 0 {
		t.Errorf("%q kept at home after its entry was applied", many[i])
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
