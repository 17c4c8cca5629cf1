package gutter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/gutter"
	"github.com/shardcache/shardcache/internal/node/health"
	"github.com/shardcache/shardcache/internal/node/nodetest"
)

// server is a node's own client: a map with Flush and Bury, whose deletes
// fail with delErr when it is set.
type server struct {
	*nodetest.Map
	node.Items
	delErr  error
	flushed bool
	buried  []string
}

func (s *server) DeleteMulti(ctx context.Context, keys []string) error {
	if s.delErr != nil {
		return s.delErr
	}
	return s.Map.DeleteMulti(ctx, keys)
}

func (s *server) Flush(context.Context) error {
	s.flushed = true
	return nil
}

func (s *server) Bury(_ context.Context, keys []string, _ time.Duration, _ node.TombKind) ([]bool, error) {
	s.buried = append(s.buried, keys...)
	return make([]bool, len(keys)), nil
}

// returning is a node held down with the keys it missed, its gutter
// holding their copies, and the log of its observer.
func returning(t *testing.T, missed ...string) (gutter.Return, *server, *nodetest.Map, *bytes.Buffer) {
	t.Helper()
	ctx := t.Context()
	var logs bytes.Buffer
	obs := health.New(health.Config{Name: "a", Addr: "a:1", Threshold: 1, ProbeInterval: time.Hour, ProbeCap: time.Hour,
		ProbeTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	obs.Ping = func(context.Context) error { return errors.New("not probed here") }
	t.Cleanup(obs.Close)
	obs.SetDown(true)
	home, copies := &server{Map: nodetest.NewMap()}, nodetest.NewMap()
	r := gutter.Return{Home: home, Gutter: gutter.New(nil, target{copies}, time.Minute, nil), Hints: &gutter.Hints{}, Health: obs}
	for _, k := range append([]string{"kept"}, missed...) {
		_ = home.Set(ctx, k, []byte("before the outage"), 0)
		_ = copies.Set(ctx, k, []byte("written through the gutter"), 0)
	}
	r.Wrote(ctx, missed...)
	return r, home, copies, &logs
}

// TestReturnComeUp: the keys missed are deleted at home and on the
// gutter, in chunks, and the node marked up; a replay that fails leaves it
// down with its hints; past MaxHints home is flushed instead.
func TestReturnComeUp(t *testing.T) {
	var missed []string
	for i := range 2500 { // three chunks
		missed = append(missed, fmt.Sprintf("k%d", i))
	}
	r, home, copies, logs := returning(t, missed...)
	if home.Value("k0") == nil {
		t.Fatal("Wrote deleted a key at home while it was down")
	}
	r.ComeUp(t.Context())
	if r.Health.Down() || home.Value("k0") != nil || home.Value("k2499") != nil || copies.Value("k1000") != nil ||
		home.Value("kept") == nil || copies.Value("kept") == nil {
		t.Fatalf("after ComeUp: down %v, home k0 %q, gutter k1000 %q", r.Health.Down(), home.Value("k0"), copies.Value("k1000"))
	}
	if !strings.Contains(logs.String(), "node up") {
		t.Fatalf("logs:\n%s", logs)
	}

	r, home, _, logs = returning(t, "x", "y")
	home.delErr = errors.New("reset")
	r.ComeUp(t.Context())
	keys, overflow := r.Hints.Take()
	if !r.Health.Down() || len(keys) != 2 || overflow || !strings.Contains(logs.String(), "not replayed") {
		t.Fatalf("a replay that fails: down %v, hints %v %v, logs:\n%s", r.Health.Down(), keys, overflow, logs)
	}

	r, home, _, _ = returning(t)
	for i := range gutter.MaxHints + 1 {
		r.Hints.Add(fmt.Sprint(i))
	}
	r.ComeUp(t.Context())
	if !home.flushed || r.Health.Down() {
		t.Fatalf("past MaxHints: flushed %v, down %v", home.flushed, r.Health.Down())
	}
}

// TestReturnWrote: a key written once the node is up again is deleted at
// home at once (buried with Tomb); a delete that fails holds the node down
// again, its key a hint.
func TestReturnWrote(t *testing.T) {
	ctx := t.Context()
	r, home, _, _ := returning(t)
	r.Health.(*health.Observer).SetDown(false)
	r.Wrote(ctx, "kept")
	if home.Value("kept") != nil {
		t.Fatal("a late key was not deleted at home")
	}
	r.Tomb = time.Minute
	r.Wrote(ctx, "late")
	if len(home.buried) != 1 || home.buried[0] != "late" {
		t.Fatalf("with Tomb: buried %v", home.buried)
	}
	r.Tomb = 0
	home.delErr = errors.New("reset")
	r.Wrote(ctx, "lost")
	if keys, _ := r.Hints.Take(); !r.Health.Down() || len(keys) != 1 || keys[0] != "lost" {
		t.Fatalf("a late delete that fails: down %v, hints %v", r.Health.Down(), keys)
	}
}
