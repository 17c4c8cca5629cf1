package client

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu      sync.Mutex
	records []logged
}

type logged struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	l := logged{level: rec.Level, msg: rec.Message, attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	r.records = append(r.records, l)
	r.mu.Unlock()
	return nil
}

// find returns the records whose message contains msg.
func (r *logRecorder) find(msg string) []logged {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logged
	for _, l := range r.records {
		if strings.Contains(l.msg, msg) {
			out = append(out, l)
		}
	}
	return out
}

func (r *logRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.records)
}

// TestLogger checks the events Options.Logger receives on real
// redis-servers: a node down and up again, with its name and address, a
// migration started and its window over, a cut-over; and that calls log
// nothing.
func TestLogger(t *testing.T) {
	ss := testserver.Redis(t, 2)
	nodes := []ring.Node{{Name: "a", Addr: ss[0].Addr}, {Name: "b", Addr: ss[1].Addr}}
	rec := &logRecorder{}
	clock := newFakeClock()
	// b comes back holding what it held: SkipEmptyCheck.
	c, err := New(Options{Nodes: nodes, Logger: slog.New(rec), FailureThreshold: 1, ProbeInterval: 10 * time.Millisecond,
		Now: clock.Now, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, SkipEmptyCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	kb := keysOn(c, ss[1].Addr, "log:", 1)[0]
	for range 50 {
		c.Set(ctx, kb, []byte("v"), time.Hour)
		c.Get(ctx, kb)
		c.Get(ctx, "log:missing")
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("%d log lines from calls; want none", n)
	}

	ss[1].Stop()
	if _, err := c.Get(ctx, kb); err == nil {
		t.Fatal("Get on a stopped node succeeded")
	}
	down := rec.find("node down")
	if len(down) != 1 || down[0].level != slog.LevelWarn || down[0].attrs["node"] != "b" || down[0].attrs["addr"] != ss[1].Addr || down[0].attrs["cause"] == "" {
		t.Fatalf("node down lines %+v; want one warning naming b at %s with its cause", down, ss[1].Addr)
	}
	ss[1].Restart()
	for i := 0; len(rec.find("node up")) == 0; i++ {
		if i == 1000 {
			t.Fatal("no node up line after the server came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if up := rec.find("node up")[0]; up.attrs["node"] != "b" || up.attrs["addr"] != ss[1].Addr {
		t.Fatalf("node up line %+v", up)
	}

	if err := c.Set(ctx, kb, []byte("v"), time.Hour); err != nil { // b came back empty
		t.Fatal(err)
	}
	if err := c.Reshard(nodes[:1], time.Hour); err != nil {
		t.Fatal(err)
	}
	started := rec.find("migration started")
	if len(started) != 1 || !strings.Contains(started[0].attrs["old"], "b="+ss[1].Addr) || strings.Contains(started[0].attrs["new"], "b=") {
		t.Fatalf("migration started lines %+v; want one, b in the old placement alone", started)
	}
	c.Get(ctx, kb)
	clock.Advance(time.Hour)
	c.Get(ctx, kb) // sees the window over
	if over := rec.find("window over"); len(over) != 1 || over[0].attrs["fallback_hits"] != "1" {
		t.Fatalf("window over lines %+v; want one, with the fallback hit", over)
	}
	if err := c.Reshard(nodes, 0); err != nil {
		t.Fatal(err)
	}
	if at := rec.find("resharded at once"); len(at) != 1 || !strings.Contains(at[0].attrs["new"], "b="+ss[1].Addr) {
		t.Fatalf("cut-over lines %+v; want one, b in the new placement", at)
	}
}

// goRedisLog records what go-redis's process-wide logger is given.
type goRedisLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *goRedisLog) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *goRedisLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// TestGoRedisLoggerUntouched: New leaves go-redis's process-wide logger as
// the application set it, and the client's own failed dials never reach it
// (they are errors the caller and Health see), while an unrelated go-redis
// client in the same process logs its failed dials as before.
func TestGoRedisLoggerUntouched(t *testing.T) {
	rec := &goRedisLog{}
	redis.SetLogger(rec)
	t.Cleanup(func() { redis.SetLogger(&goRedisLog{}) }) // go-redis has no getter for the previous one
	closed := blackHoleClosed(t)
	c, err := New(Options{Nodes: []ring.Node{{Name: "a", Addr: closed}}, FailureThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		if _, err := c.Get(t.Context(), "k"); err == nil {
			t.Fatal("Get from a closed port succeeded")
		}
	}
	if n := rec.count(closed); n != 0 {
		t.Errorf("go-redis logged %d lines about the client's node:\n%q", n, rec.lines)
	}
	other := redis.NewClient(&redis.Options{Addr: closed, DialerRetries: 1, MaxRetries: -1})
	defer other.Close()
	if err := other.Ping(t.Context()).Err(); err == nil {
		t.Fatal("Ping of a closed port succeeded")
	}
	if n := rec.count("failed to dial"); n == 0 {
		t.Errorf("an unrelated go-redis client's failed dial was not logged: the client replaced go-redis's logger (%q)", rec.lines)
	}
}

// blackHoleClosed returns the address of a port nothing listens on.
func blackHoleClosed(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
