package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// batchLoader is a GetMultiOrLoad loader that records the keys of each
// call and, when blocking, waits for release.
type batchLoader struct {
	mu      sync.Mutex
	calls   [][]string
	entered chan struct{}
	release chan struct{}
}

func newBatchLoader(blocking bool) *batchLoader {
	l := &batchLoader{entered: make(chan struct{}, 1000), release: make(chan struct{})}
	if !blocking {
		close(l.release)
	}
	return l
}

func (l *batchLoader) load(_ context.Context, keys []string) (map[string][]byte, error) {
	l.mu.Lock()
	l.calls = append(l.calls, slices.Sorted(slices.Values(keys)))
	l.mu.Unlock()
	l.entered <- struct{}{}
	<-l.release
	m := make(map[string][]byte, len(keys))
	for _, k := range keys {
		m[k] = []byte("new:" + k)
	}
	return m, nil
}

// loaded returns the loader's calls so far.
func (l *batchLoader) loaded() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// TestGetMultiOrLoadRefresh: GetMultiOrLoad answers the values in their
// refresh window at once and reloads them in one background call of its
// loader; a second call meanwhile starts no other load; a Delete during the
// refresh makes that key's store fail, the others land; a value outside
// the window is left alone.
func TestGetMultiOrLoadRefresh(t *testing.T) {
	for _, kind := range []string{"memcached", "redis-server", "miniredis"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 3)
			ctx := t.Context()
			// Memcached's R compares whole seconds: a window of a minute
			// covers a value of 59 s left within the second.
			c := cl.client(t, Options{Lease: testLease, EarlyRefresh: time.Minute})
			other := cl.client(t, Options{EarlyRefresh: time.Minute})
			keys := []string{"a", "b", "c", "far"}
			for _, k := range keys[:3] {
				if err := c.Set(ctx, k, []byte("old:"+k), 59*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Set(ctx, "far", []byte("old:far"), time.Hour); err != nil {
				t.Fatal(err)
			}
			l := newBatchLoader(true)
			for call := range 2 {
				got, err := c.GetMultiOrLoad(ctx, keys, time.Hour, l.load)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					if string(got[k]) != "old:"+k {
						t.Fatalf("call %d: %s = %q; want the value at once", call, k, got[k])
					}
				}
				if call == 0 {
					// The refresh is loading: the second call finds it under way.
					select {
					case <-l.entered:
					case <-time.After(20 * time.Second): // a bound, not a timing
						t.Fatal("no refresh began")
					}
				}
			}
			if err := other.Delete(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			close(l.release)
			c.refreshes.Wait()
			if calls := l.loaded(); len(calls) != 1 || !slices.Equal(calls[0], []string{"a", "b", "c"}) {
				t.Fatalf("loader calls %q; want one, of the three keys in their window", calls)
			}
			mustGet(t, other, "a", "new:a")
			mustMiss(t, other, "b")
			mustGet(t, other, "c", "new:c")
			mustGet(t, other, "far", "old:far")
			if s := c.LoadStats(); s.Refreshes != 3 || s.LeasesLost != 1 || s.Stale != 6 || s.Loads != 1 {
				t.Fatalf("LoadStats = %+v; want 3 keys refreshed by one load, b's lease lost, 6 stale hits", s)
			}
		})
	}
}

// TestGetMultiOrLoadRefreshHerd: 3 clients (standing for 3 processes) and
// 60 concurrent GetMultiOrLoad calls over 10 keys in their refresh window:
// every call is answered with the values it found, and each key is
// reloaded exactly once across the clients.
func TestGetMultiOrLoadRefreshHerd(t *testing.T) {
	for _, kind := range []string{"memcached", "redis-server"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 3)
			ctx := t.Context()
			clients := make([]*Client, 3)
			for i := range clients {
				clients[i] = cl.client(t, Options{Lease: testLease, MetaLeases: true, EarlyRefresh: time.Minute})
			}
			keys := make([]string, 10)
			for i := range keys {
				keys[i] = fmt.Sprintf("hot%d", i)
				if err := clients[0].Set(ctx, keys[i], []byte("old:"+keys[i]), 59*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			l := newBatchLoader(false)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 60 {
				c := clients[i%3]
				wg.Go(func() {
					<-start
					got, err := c.GetMultiOrLoad(ctx, keys, time.Hour, l.load)
					if err != nil || len(got) != len(keys) {
						t.Errorf("caller %d: %d values, %v", i, len(got), err)
					}
				})
			}
			close(start)
			wg.Wait()
			for _, c := range clients {
				c.refreshes.Wait()
			}
			times := map[string]int{}
			for _, call := range l.loaded() {
				for _, k := range call {
					times[k]++
				}
			}
			for _, k := range keys {
				if times[k] != 1 {
					t.Fatalf("keys reloaded %v; want each key once across the clients", times)
				}
				mustGet(t, clients[1], k, "new:"+k)
			}
		})
	}
}

// TestGetMultiOrLoadPanic: a loader's panic is ErrLoadPanic, in the
// caller's call and in a background refresh (which must not take the
// process down), and its leases are released: the next call loads.
func TestGetMultiOrLoadPanic(t *testing.T) {
	for _, kind := range []string{"memcached", "redis-server"} {
		t.Run(kind, func(t *testing.T) {
			cl := newCluster(t, kind, 1)
			ctx := t.Context()
			c := cl.client(t, Options{Lease: testLease, MetaLeases: true, StaleWhileRevalidate: time.Minute})
			boom := func(context.Context, []string) (map[string][]byte, error) { panic("boom") }
			if _, err := c.GetMultiOrLoad(ctx, []string{"p"}, time.Hour, boom); !errors.Is(err, ErrLoadPanic) {
				t.Fatalf("a panicking loader: %v; want ErrLoadPanic", err)
			}
			got, err := c.GetMultiOrLoad(ctx, []string{"p"}, time.Hour, newBatchLoader(false).load)
			if err != nil || string(got["p"]) != "new:p" {
				t.Fatalf("after the panic: %q, %v; want the key loaded (its lease released)", got, err)
			}
			// A refresh that panics: the value is answered, the load counted failed.
			if err := c.Set(ctx, "q", []byte("old"), 30*time.Second); err != nil {
				t.Fatal(err)
			}
			got, err = c.GetMultiOrLoad(ctx, []string{"q"}, time.Hour, boom)
			if err != nil || string(got["q"]) != "old" {
				t.Fatalf("in the window: %q, %v", got, err)
			}
			c.refreshes.Wait()
			if s := c.LoadStats(); s.Refreshes != 1 || s.LoadErrors != 2 {
				t.Fatalf("LoadStats = %+v; want a refresh whose load failed, and the first call's", s)
			}
			mustGet(t, c, "q", "old")
		})
	}
}

// TestMetaLeaseBatchCommands counts the commands a memcached sees for a
// GetMultiOrLoad of missing keys under leases: with MetaLeases, the read,
// then one round trip of an add and an mg per key, then one ms per key.
func TestMetaLeaseBatchCommands(t *testing.T) {
	cl := newCluster(t, "memcached", 1)
	const n = 5
	for _, meta := range []bool{false, true} {
		c := cl.client(t, Options{Lease: testLease, MetaLeases: meta})
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("cold-%v-%d", meta, i)
		}
		g0, s0 := serverCounts(t, cl.addrs[0])
		got, err := c.GetMultiOrLoad(t.Context(), keys, time.Hour, newBatchLoader(false).load)
		if err != nil || len(got) != n {
			t.Fatalf("%d values, %v", len(got), err)
		}
		g1, s1 := serverCounts(t, cl.addrs[0])
		t.Logf("MetaLeases %v: %d missing keys cost %d gets and %d sets", meta, n, g1-g0, s1-s0)
		if meta && (g1-g0 != n || s1-s0 != 2*n) {
			t.Errorf("MetaLeases: %d gets and %d sets; want %d and %d (the leases' add+mg, the first read; store)", g1-g0, s1-s0, n, 2*n)
		}
		for _, k := range keys {
			mustGet(t, c, k, "new:"+k)
		}
	}
}

// TestSetDuringLoad: a Set while a load runs under a lease, or while a
// background refresh reloads a value in its window, is newer than what the
// load read: the load's store must not replace it, on either backend, with
// the lease of Lease, of MetaLeases, and a refresh's.
func TestSetDuringLoad(t *testing.T) {
	for _, kind := range []string{"memcached", "memcached-classic", "redis-server", "miniredis"} {
		for _, meta := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/meta=%v", kind, meta), func(t *testing.T) {
				cl := newCluster(t, kind, 1)
				ctx := t.Context()
				opts := Options{Lease: testLease, MetaLeases: meta, EarlyRefresh: time.Minute}
				c, writer := cl.client(t, opts), cl.client(t, opts)

				// A miss's load.
				l := newLoader("loaded", nil)
				done := make(chan error, 1)
				go func() {
					_, err := c.GetOrLoad(ctx, "miss", time.Hour, l.load)
					done <- err
				}()
				<-l.entered
				if err := writer.Set(ctx, "miss", []byte("newer"), time.Hour); err != nil {
					t.Fatal(err)
				}
				close(l.release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				mustGet(t, writer, "miss", "newer")

				// A refresh's load, of a value in its window (meta servers:
				// a classic memcached has no refresh).
				if kind == "memcached-classic" {
					return
				}
				if err := c.Set(ctx, "old", []byte("stale"), 59*time.Second); err != nil {
					t.Fatal(err)
				}
				l = newLoader("loaded", nil)
				if v, err := c.GetOrLoad(ctx, "old", time.Hour, l.load); err != nil || string(v) != "stale" {
					t.Fatalf("in the window: %q, %v", v, err)
				}
				<-l.entered
				if err := writer.Set(ctx, "old", []byte("newer"), time.Hour); err != nil {
					t.Fatal(err)
				}
				close(l.release)
				c.refreshes.Wait()
				mustGet(t, writer, "old", "newer")
			})
		}
	}
}
