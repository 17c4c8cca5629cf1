package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// loader is a GetOrLoad loader that counts its calls and, until release is
// closed, holds them: tests decide when a load ends, not the clock.
type loader struct {
	calls   atomic.Int64
	entered chan struct{} // one send per call
	release chan struct{}
	value   []byte
	err     error
	ctxErr  atomic.Value // the load's ctx.Err() when it returned, if not nil
}

func newLoader(value string, err error) *loader {
	l := &loader{entered: make(chan struct{}, 1000), release: make(chan struct{}), value: []byte(value), err: err}
	return l
}

// open is a loader that returns at once.
func openLoader(value string, err error) *loader {
	l := newLoader(value, err)
	close(l.release)
	return l
}

func (l *loader) load(ctx context.Context) ([]byte, error) {
	l.calls.Add(1)
	l.entered <- struct{}{}
	<-l.release
	if err := ctx.Err(); err != nil {
		l.ctxErr.Store(err)
	}
	return l.value, l.err
}

// waitFor polls cond until it holds, for at most 20 s (a bound, not a
// timing): the goroutines it waits for are blocked on channels meanwhile.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 20000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// TestGetOrLoadOnce: 200 goroutines miss one key; the loader runs once, all
// get its value, and callers whose context ends return early while the load
// goes on for the others: the first caller, whose call started the load, as
// well as one that joined it.
func TestGetOrLoadOnce(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		l := newLoader("loaded", nil)
		first, cancelFirst := context.WithCancel(t.Context())
		firstErr := make(chan error, 1)
		go func() {
			_, err := c.GetOrLoad(first, "hot", time.Minute, l.load)
			firstErr <- err
		}()
		<-l.entered // the first caller's load is under way

		const n = 200
		vals := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { vals[i], errs[i] = c.GetOrLoad(t.Context(), "hot", time.Minute, l.load) })
		}
		waitFor(t, "every goroutine to miss", func() bool { return c.LoadStats().Misses == n+1 })

		cancelFirst()
		if err := <-firstErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("first caller after its cancel = %v; want context.Canceled while the load is held", err)
		}
		// One more waiter, with a deadline (long enough for its read of the
		// cache, so that it joins the load): it leaves while the load is held.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if v, err := c.GetOrLoad(ctx, "hot", time.Minute, l.load); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiter with a deadline = %q, %v; want DeadlineExceeded while the load is held", v, err)
		}
		if s := c.LoadStats(); s.Misses != n+2 || s.Abandoned != 2 {
			t.Fatalf("LoadStats = %+v; want the waiter with a deadline counted as a miss that gave up", s)
		}
		close(l.release)
		wg.Wait()
		for i := range n {
			if errs[i] != nil || string(vals[i]) != "loaded" {
				t.Fatalf("caller %d got %q, %v", i, vals[i], errs[i])
			}
		}
		if got := l.calls.Load(); got != 1 {
			t.Fatalf("loader ran %d times for %d callers, want 1", got, n+2)
		}
		if err := l.ctxErr.Load(); err != nil {
			t.Fatalf("the load's context ended with its first caller's: %v", err)
		}
		mustGet(t, c, "hot", "loaded") // stored for the next callers
		if v, err := c.GetOrLoad(t.Context(), "hot", time.Minute, l.load); err != nil || string(v) != "loaded" || l.calls.Load() != 1 {
			t.Fatalf("GetOrLoad of a cached key = %q, %v, %d loads", v, err, l.calls.Load())
		}
		s := c.LoadStats()
		if s.Loads != 1 || s.Misses != n+2 || s.Abandoned != 2 || s.Hits != 1 || s.LoadErrors != 0 {
			t.Fatalf("LoadStats = %+v", s)
		}
	})
}

// TestGetOrLoadError: a loader's error reaches every waiter, is not cached,
// and the next call loads again.
func TestGetOrLoadError(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{NegativeTTL: time.Minute})
		errDB := errors.New("database down")
		l := newLoader("", errDB)
		const n = 50
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { _, errs[i] = c.GetOrLoad(t.Context(), "k", time.Minute, l.load) })
		}
		<-l.entered
		waitFor(t, "every goroutine to miss", func() bool { return c.LoadStats().Misses == n })
		close(l.release)
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, errDB) {
				t.Fatalf("caller %d: %v, want the loader's error", i, err)
			}
		}
		if l.calls.Load() != 1 {
			t.Fatalf("%d loads, want 1", l.calls.Load())
		}
		mustMiss(t, c, "k") // an error is never cached, not even as "not found"

		ok := openLoader("v", nil)
		if v, err := c.GetOrLoad(t.Context(), "k", time.Minute, ok.load); err != nil || string(v) != "v" || ok.calls.Load() != 1 {
			t.Fatalf("GetOrLoad after a failed load = %q, %v, %d loads; want a new load", v, err, ok.calls.Load())
		}
		if s := c.LoadStats(); s.Loads != 2 || s.LoadErrors != 1 {
			t.Fatalf("LoadStats = %+v", s)
		}

		// A panicking loader is an error for every waiter, not a crash.
		p := func(context.Context) ([]byte, error) { panic("bug") }
		if _, err := c.GetOrLoad(t.Context(), "p", time.Minute, p); !errors.Is(err, ErrLoadPanic) {
			t.Fatalf("panicking loader: %v, want ErrLoadPanic", err)
		}
	})
}

// TestGetOrLoadBadInput: bad keys, TTLs and options are typed errors before
// anything is loaded.
func TestGetOrLoadBadInput(t *testing.T) {
	cl := newCluster(t, "miniredis", 1)
	c := cl.client(t, Options{})
	l := openLoader("v", nil)
	if _, err := c.GetOrLoad(t.Context(), "", time.Minute, l.load); !errors.Is(err, ErrMalformedKey) {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := c.GetOrLoad(t.Context(), "k", -time.Second, l.load); !errors.Is(err, ErrBadTTL) {
		t.Fatalf("negative TTL: %v", err)
	}
	batch := func(context.Context, []string) (map[string][]byte, error) { return nil, nil }
	if _, err := c.GetMultiOrLoad(t.Context(), []string{"a", ""}, time.Minute, batch); !errors.Is(err, ErrMalformedKey) {
		t.Fatalf("GetMultiOrLoad with an empty key: %v", err)
	}
	if _, err := c.GetMultiOrLoad(t.Context(), []string{"a"}, -1, batch); !errors.Is(err, ErrBadTTL) {
		t.Fatalf("GetMultiOrLoad with a negative TTL: %v", err)
	}
	if l.calls.Load() != 0 {
		t.Fatal("loader called for bad input")
	}
	for _, o := range []Options{
		{LoadLimit: &LoadLimit{PerSecond: 0}},
		{LoadLimit: &LoadLimit{PerSecond: 10, Burst: -1}},
		{Lease: -time.Second},
		{NegativeTTL: -time.Second},
	} {
		o.Nodes = cl.nodes()
		if _, err := New(o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("New(%+v) = %v, want ErrBadOptions", o, err)
		}
	}
	c.Close()
	if _, err := c.GetOrLoad(t.Context(), "k", time.Minute, l.load); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestNegativeCaching: ErrNotFound is remembered in the cache for
// NegativeTTL and no longer, for every process; plain reads see a miss.
func TestNegativeCaching(t *testing.T) {
	t.Parallel()
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		t.Parallel()
		var ttl, wait time.Duration
		switch cl.kind {
		case "miniredis":
			ttl, wait = time.Minute, 2*time.Minute
		case "redis-server": // long enough for the checks below on a loaded machine
			ttl, wait = 2*time.Second, 2500*time.Millisecond
		case "memcached", "memcached-classic": // whole seconds, on a clock that ticks once a second
			ttl, wait = 3*time.Second, 4100*time.Millisecond
		}
		ctx := t.Context()
		c := cl.client(t, Options{NegativeTTL: ttl})
		other := cl.client(t, Options{NegativeTTL: ttl}) // another process
		l := openLoader("", fmt.Errorf("row 42: %w", ErrNotFound))
		for _, cc := range []*Client{c, c, other} {
			if v, err := cc.GetOrLoad(ctx, "user:42", time.Hour, l.load); !errors.Is(err, ErrNotFound) || v != nil {
				t.Fatalf("GetOrLoad of a missing row = %q, %v; want ErrNotFound", v, err)
			}
		}
		if l.calls.Load() != 1 {
			t.Fatalf("%d loads of a missing row within NegativeTTL, want 1", l.calls.Load())
		}
		if s := other.LoadStats(); s.NegativeHits != 1 || s.Loads != 0 {
			t.Fatalf("other process's LoadStats = %+v; want one negative hit", s)
		}
		// In the cache: the documented marker; plain reads see a miss.
		raw, err := cl.raw(c.Locate("user:42").Addr).get("user:42")
		if err != nil || string(raw) != "\x00shardcache:not-found\x00" {
			t.Fatalf("negative entry on the server = %q, %v", raw, err)
		}
		mustMiss(t, c, "user:42")
		if hits, err := c.GetMulti(ctx, []string{"user:42"}); err != nil || len(hits) != 0 {
			t.Fatalf("GetMulti of a negative entry = %q, %v; want no hit", hits, err)
		}

		cl.advance(wait)
		if _, err := c.GetOrLoad(ctx, "user:42", time.Hour, l.load); !errors.Is(err, ErrNotFound) || l.calls.Load() != 2 {
			t.Fatalf("after NegativeTTL: %v, %d loads; want a new load", err, l.calls.Load())
		}
		// A Set replaces a negative entry.
		if err := c.Set(ctx, "user:42", []byte("Ada"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if v, err := c.GetOrLoad(ctx, "user:42", time.Hour, l.load); err != nil || string(v) != "Ada" {
			t.Fatalf("after Set: %q, %v", v, err)
		}

		// Without NegativeTTL nothing is cached: every call loads.
		plain := cl.client(t, Options{})
		for range 2 {
			if _, err := plain.GetOrLoad(ctx, "user:43", time.Hour, l.load); !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
		}
		if l.calls.Load() != 4 {
			t.Fatalf("%d loads; want 2 more without NegativeTTL", l.calls.Load())
		}
	})
}

// TestGetMultiOrLoad: one batch load of exactly the misses; hits are not
// reloaded; missing rows are cached as such with NegativeTTL.
func TestGetMultiOrLoad(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		ctx := t.Context()
		c := cl.client(t, Options{NegativeTTL: time.Hour})
		if err := c.SetMulti(ctx, map[string][]byte{"a": []byte("A"), "c": []byte("C")}, time.Hour); err != nil {
			t.Fatal(err)
		}
		db := map[string][]byte{"a": []byte("db-A"), "b": []byte("B"), "d": []byte("D"), "e": nil}
		var asked [][]string
		load := func(_ context.Context, missing []string) (map[string][]byte, error) {
			asked = append(asked, slices.Clone(missing))
			m := map[string][]byte{}
			for _, k := range missing {
				if v, ok := db[k]; ok {
					m[k] = v
				}
			}
			return m, nil
		}
		keys := []string{"a", "b", "c", "d", "b", "e", "gone"}
		got, err := c.GetMultiOrLoad(ctx, keys, time.Hour, load)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]byte{"a": []byte("A"), "b": []byte("B"), "c": []byte("C"), "d": []byte("D"), "e": {}}
		if !mapsEqual(got, want) {
			t.Fatalf("GetMultiOrLoad = %q, want %q", got, want)
		}
		if len(asked) != 1 || !slices.Equal(asked[0], []string{"b", "d", "e", "gone"}) {
			t.Fatalf("loader asked for %q; want one batch of exactly the misses [b d e gone]", asked)
		}
		// Stored in one bulk store: plain reads hit, and "gone" is cached
		// as not found, so a second call loads nothing.
		mustGet(t, c, "b", "B")
		mustGet(t, c, "e", "")
		mustMiss(t, c, "gone")
		got, err = c.GetMultiOrLoad(ctx, append(keys, "gone"), time.Hour, load)
		if err != nil || !mapsEqual(got, want) || len(asked) != 1 {
			t.Fatalf("second GetMultiOrLoad = %q, %v, %d loads; want the same from the cache alone", got, err, len(asked))
		}
		if _, err := c.GetOrLoad(ctx, "gone", time.Hour, openLoader("x", nil).load); !errors.Is(err, ErrNotFound) {
			t.Fatalf("GetOrLoad of a key the batch found missing: %v, want ErrNotFound", err)
		}

		// A loader's error comes back with the hits; nothing is stored.
		errDB := errors.New("database down")
		failing := func(context.Context, []string) (map[string][]byte, error) { return nil, errDB }
		got, err = c.GetMultiOrLoad(ctx, []string{"a", "new"}, time.Hour, failing)
		if !errors.Is(err, errDB) || string(got["a"]) != "A" || len(got) != 1 {
			t.Fatalf("failing batch = %q, %v; want the hit and the error", got, err)
		}
		mustMiss(t, c, "new")
		s := c.LoadStats()
		if s.Loads != 2 || s.LoadErrors != 1 || s.NotFound != 1 {
			t.Fatalf("LoadStats = %+v", s)
		}
	})
}

func mapsEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// TestLoadLimit: with a limit of one load per 10 s and a burst of N, a burst
// of distinct misses gets N loads and the rest ErrLoadThrottled at once; N
// tokens later, N more. The limiter reads the client's clock (Options.Now),
// which the test moves, so the counts do not depend on the machine's speed;
// the callers' deadline (5 s, ample for the cache's round trips) is shorter
// than the wait for the next token (10 s).
func TestLoadLimit(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		ctx := t.Context()
		clock := newFakeClock()
		const n, every = 5, 10 * time.Second
		c := cl.client(t, Options{Now: clock.Now, LoadLimit: &LoadLimit{PerSecond: float64(time.Second) / float64(every), Burst: n}})
		l := openLoader("v", nil)
		short := func() context.Context {
			ctx, cancel := context.WithTimeout(ctx, every/2)
			t.Cleanup(cancel)
			return ctx
		}
		burst := func(prefix string) (loaded, throttled int) {
			for i := range 50 {
				_, err := c.GetOrLoad(short(), fmt.Sprintf("%s%d", prefix, i), time.Hour, l.load)
				switch {
				case err == nil:
					loaded++
				case errors.Is(err, ErrLoadThrottled):
					throttled++
				default:
					t.Fatalf("GetOrLoad: %v", err)
				}
			}
			return loaded, throttled
		}
		if loaded, throttled := burst("first:"); loaded != n || throttled != 50-n {
			t.Fatalf("first burst: %d loaded, %d throttled; want %d and %d", loaded, throttled, n, 50-n)
		}
		clock.Advance(n * every)
		if loaded, throttled := burst("second:"); loaded != n || throttled != 50-n {
			t.Fatalf("%v later: %d loaded, %d throttled; want %d and %d", n*every, loaded, throttled, n, 50-n)
		}
		if got := l.calls.Load(); got != 2*n {
			t.Fatalf("loader ran %d times, want %d", got, 2*n)
		}
		if s := c.LoadStats(); s.Throttled != 2*(50-n) || s.Loads != 2*n {
			t.Fatalf("LoadStats = %+v", s)
		}
		// Hits take no token.
		if _, err := c.GetOrLoad(short(), "first:0", time.Hour, l.load); err != nil {
			t.Fatalf("hit while throttled: %v", err)
		}
		// A throttled key was not stored: it loads once a token is back.
		clock.Advance(every)
		if v, err := c.GetOrLoad(short(), "first:49", time.Hour, l.load); err != nil || string(v) != "v" {
			t.Fatalf("throttled key a token later: %q, %v", v, err)
		}
		// A batch takes one token, and is throttled as a whole.
		batch := func(_ context.Context, missing []string) (map[string][]byte, error) {
			m := map[string][]byte{}
			for _, k := range missing {
				m[k] = []byte("v")
			}
			return m, nil
		}
		clock.Advance(2 * every)
		for i := range 2 {
			if _, err := c.GetMultiOrLoad(short(), []string{fmt.Sprintf("batch:%d:a", i), fmt.Sprintf("batch:%d:b", i)}, time.Hour, batch); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
		}
		if got, err := c.GetMultiOrLoad(short(), []string{"first:0", "batch:x"}, time.Hour, batch); !errors.Is(err, ErrLoadThrottled) || len(got) != 1 {
			t.Fatalf("batch past the limit = %q, %v; want the hit and ErrLoadThrottled", got, err)
		}

		// MaxWait < 0: never wait, even without a deadline.
		nowait := cl.client(t, Options{Now: clock.Now, LoadLimit: &LoadLimit{PerSecond: 1, Burst: 1, MaxWait: -1}})
		if _, err := nowait.GetOrLoad(ctx, "nowait:1", time.Hour, l.load); err != nil {
			t.Fatal(err)
		}
		if _, err := nowait.GetOrLoad(ctx, "nowait:2", time.Hour, l.load); !errors.Is(err, ErrLoadThrottled) {
			t.Fatalf("MaxWait -1 without a token: %v, want ErrLoadThrottled", err)
		}
		// Without a deadline or MaxWait a load waits for its token (1ms at
		// 1000 per second) and runs.
		waits := cl.client(t, Options{Now: clock.Now, LoadLimit: &LoadLimit{PerSecond: 1000, Burst: 1}})
		for i := range 3 {
			if _, err := waits.GetOrLoad(ctx, fmt.Sprintf("waits:%d", i), time.Hour, l.load); err != nil {
				t.Fatalf("load %d without a deadline: %v", i, err)
			}
		}
	})
}

// TestLoadLimitDuringMigration: LoadLimit.DuringMigration limits loads only
// while a window is open.
func TestLoadLimitDuringMigration(t *testing.T) {
	cl := newCluster(t, "miniredis", 3)
	clock := newFakeClock()
	c := cl.client(t, Options{Nodes: cl.nodes(0, 1), Now: clock.Now, LoadLimit: &LoadLimit{PerSecond: 2, DuringMigration: true, MaxWait: -1}})
	l := openLoader("v", nil)
	count := func(prefix string) (throttled int) {
		for i := range 10 {
			if _, err := c.GetOrLoad(t.Context(), fmt.Sprintf("%s%d", prefix, i), time.Hour, l.load); errors.Is(err, ErrLoadThrottled) {
				throttled++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		return throttled
	}
	if n := count("before:"); n != 0 {
		t.Fatalf("%d throttled with no migration, want 0", n)
	}
	if err := c.Reshard(cl.nodes(0, 1, 2), time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := count("during:"); n != 8 {
		t.Fatalf("%d of 10 throttled during the migration, want 8 (burst 2)", n)
	}
	clock.Advance(2 * time.Hour)
	if n := count("after:"); n != 0 {
		t.Fatalf("%d throttled after the window, want 0", n)
	}
}

// TestGetOrLoadDuringMigration: a miss on the new owner falls back to the
// old owner before loading; a loaded value is stored on both owners.
func TestGetOrLoadDuringMigration(t *testing.T) {
	forEachCluster(t, 8, func(t *testing.T, cl *cluster) {
		ctx := t.Context()
		_, from, to, c := eightToSix(t, cl)
		keys := dualKeys(t, cl.kind, from, to, 3)
		if err := c.Set(ctx, keys[0], []byte("on the old owner"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := c.Reshard(to, time.Hour); err != nil {
			t.Fatal(err)
		}
		l := openLoader("loaded", nil)
		if v, err := c.GetOrLoad(ctx, keys[0], time.Hour, l.load); err != nil || string(v) != "on the old owner" || l.calls.Load() != 0 {
			t.Fatalf("GetOrLoad of a key on its old owner = %q, %v, %d loads; want the old owner's value, no load", v, err, l.calls.Load())
		}
		if v, err := c.GetOrLoad(ctx, keys[1], time.Hour, l.load); err != nil || string(v) != "loaded" {
			t.Fatalf("GetOrLoad of a missing key = %q, %v", v, err)
		}
		oldOwner, newOwner := mustRing(t, from).Locate(keys[1]).Addr, mustRing(t, to).Locate(keys[1]).Addr
		if h := cl.holders(t, keys[1]); !slices.Contains(h, oldOwner) || !slices.Contains(h, newOwner) {
			t.Fatalf("loaded value on %v; want both owners %s and %s", h, oldOwner, newOwner)
		}
		got, err := c.GetMultiOrLoad(ctx, keys, time.Hour, func(_ context.Context, missing []string) (map[string][]byte, error) {
			if !slices.Equal(missing, keys[2:]) {
				t.Errorf("batch loader asked for %q, want %q", missing, keys[2:])
			}
			return map[string][]byte{keys[2]: []byte("batch")}, nil
		})
		if err != nil || len(got) != 3 || string(got[keys[2]]) != "batch" {
			t.Fatalf("GetMultiOrLoad during the window = %q, %v", got, err)
		}
		if h := cl.holders(t, keys[2]); len(h) != 2 {
			t.Fatalf("batch-loaded value on %v; want both owners", h)
		}
	})
}
