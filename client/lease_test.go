package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/lease"
)

// testLease outlasts any load the tests hold, so no lease expires by itself.
const testLease = time.Minute

// metaLeases is the Options.MetaLeases of the lease tests' clients:
// TestMetaLeases runs them again with it set.
var metaLeases = false

// TestLeaseOneLoadAcrossProcesses: 8 clients (standing for 8 processes) × 25
// goroutines miss one key; with leases the loader runs once in all.
func TestLeaseOneLoadAcrossProcesses(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		const procs, goroutines = 8, 25
		clients := make([]*Client, procs)
		for i := range clients {
			// Many callers a client dial at once: on a busy machine one
			// took longer than the 500 ms default and failed its read.
			clients[i] = cl.client(t, Options{MetaLeases: metaLeases, Lease: testLease, DialTimeout: 5 * time.Second})
		}
		sum := func(f func(LoadStats) int64) (n int64) {
			for _, c := range clients {
				n += f(c.LoadStats())
			}
			return n
		}
		l := newLoader("loaded", nil)
		vals := make([][]byte, procs*goroutines)
		errs := make([]error, procs*goroutines)
		var wg sync.WaitGroup
		for i := range vals {
			c := clients[i%procs]
			wg.Go(func() { vals[i], errs[i] = c.GetOrLoad(t.Context(), "hot", time.Hour, l.load) })
		}
		<-l.entered // one process holds the lease and loads
		// Every other process waits on the lease; with MetaLeases a caller
		// of the loading process may too, when its read found the lease an
		// instant before its own process's winner registered its load.
		waitFor(t, "the other processes to find the lease taken", func() bool {
			return sum(func(s LoadStats) int64 { return s.LeaseWaits }) >= procs-1 &&
				sum(func(s LoadStats) int64 { return s.Misses }) == procs*goroutines
		})
		close(l.release)
		wg.Wait()
		for i := range vals {
			if errs[i] != nil || string(vals[i]) != "loaded" {
				t.Fatalf("caller %d got %q, %v", i, vals[i], errs[i])
			}
		}
		if got := l.calls.Load(); got != 1 {
			t.Fatalf("loader ran %d times across %d processes, want 1", got, procs)
		}
		if n := sum(func(s LoadStats) int64 { return s.LeasesLost }); n != 0 {
			t.Fatalf("%d leases lost", n)
		}
		mustGet(t, clients[0], "hot", "loaded")
		if h := cl.holders(t, lease.Prefix+"hot"); len(h) != 0 {
			t.Fatalf("lease still held on %v after the store", h)
		}
	})
}

// TestLeaseDeleteDuringLoad: a Delete while a load is under way clears the
// lease, and the loaded value, read before the Delete, is not stored; without
// leases it would be.
func TestLeaseDeleteDuringLoad(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		ctx := t.Context()
		loadThenDelete := func(c, deleter *Client, key string, del func() error) {
			t.Helper()
			l := newLoader("stale", nil)
			done := make(chan error, 1)
			go func() {
				v, err := c.GetOrLoad(ctx, key, time.Hour, l.load)
				if err == nil && string(v) != "stale" {
					err = errors.New("got " + string(v))
				}
				done <- err
			}()
			<-l.entered
			if err := del(); err != nil {
				t.Fatalf("Delete during the load: %v", err)
			}
			close(l.release)
			if err := <-done; err != nil { // the callers still get what was loaded
				t.Fatalf("GetOrLoad: %v", err)
			}
		}

		c := cl.client(t, Options{MetaLeases: metaLeases, Lease: testLease})
		other := cl.client(t, Options{MetaLeases: metaLeases, Lease: testLease})
		loadThenDelete(c, other, "k", func() error { return other.Delete(ctx, "k") })
		mustMiss(t, c, "k")
		if s := c.LoadStats(); s.LeasesLost != 1 {
			t.Fatalf("LoadStats = %+v; want one lease lost", s)
		}
		loadThenDelete(c, other, "m", func() error { return other.DeleteMulti(ctx, []string{"x", "m"}) })
		mustMiss(t, c, "m")

		// The contrast: without leases the stale value is stored.
		plain := cl.client(t, Options{})
		loadThenDelete(plain, plain, "p", func() error { return plain.Delete(ctx, "p") })
		mustGet(t, plain, "p", "stale")

		// A failed load releases its lease: another process loads at once
		// rather than wait for the lease to expire.
		errDB := errors.New("database down")
		if _, err := c.GetOrLoad(ctx, "f", time.Hour, openLoader("", errDB).load); !errors.Is(err, errDB) {
			t.Fatal(err)
		}
		bounded, cancel := context.WithTimeout(ctx, testLease/2)
		defer cancel()
		if v, err := other.GetOrLoad(bounded, "f", time.Hour, openLoader("ok", nil).load); err != nil || string(v) != "ok" {
			t.Fatalf("GetOrLoad after another process's failed load = %q, %v", v, err)
		}
	})
}

// TestLeaseLostNotServedLater: a GetOrLoad that begins after a Delete, and
// finds a load of the key under way that began before it, does not get the
// value the Delete removed: that load's lease was lost, so the later caller
// loads again. The caller that started the load, concurrent with the
// Delete, gets what it loaded.
func TestLeaseLostNotServedLater(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := notServedLater(t, cl, nil)
		mustGet(t, c, "k", "after")
	})
}

// TestLeaseStoreFailedNotServedLater: as TestLeaseLostNotServedLater, but
// the load's store fails (the server is gone by then), so nothing says
// whether the Delete cleared its lease: a caller that began after the
// Delete still gets a load of its own, not the value loaded before it.
func TestLeaseStoreFailedNotServedLater(t *testing.T) {
	forEachCluster(t, 1, func(t *testing.T, cl *cluster) {
		c := notServedLater(t, cl, func() { cl.stop(0) })
		if st := c.LoadStats(); st.CacheErrors == 0 {
			t.Errorf("the failed store was not counted: %+v", st)
		}
	})
}

// notServedLater starts a load of "k", deletes the key from another client
// meanwhile, starts a second GetOrLoad of it that joins the load, runs
// fault (if any) and lets the load end: the first caller must get what it
// loaded ("before"), the second a load of its own ("after"). It returns
// the client of both.
func notServedLater(t *testing.T, cl *cluster, fault func()) *Client {
	t.Helper()
	ctx := t.Context()
	c := cl.client(t, Options{MetaLeases: metaLeases, Lease: testLease})
	other := cl.client(t, Options{MetaLeases: metaLeases, Lease: testLease})
	before := newLoader("before", nil)
	first := make(chan string, 1)
	go func() {
		v, err := c.GetOrLoad(ctx, "k", time.Hour, before.load)
		first <- fmt.Sprintf("%s %v", v, err)
	}()
	<-before.entered
	if err := other.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	later := make(chan string, 1)
	go func() {
		v, err := c.GetOrLoad(ctx, "k", time.Hour, openLoader("after", nil).load)
		later <- fmt.Sprintf("%s %v", v, err)
	}()
	waitFor(t, "the later caller to wait on the load", func() bool { return c.LoadStats().Misses == 2 })
	if fault != nil {
		fault()
	}
	close(before.release)
	if got := <-first; got != "before <nil>" {
		t.Errorf("the caller that started the load got %q, want what it loaded", got)
	}
	if got := <-later; got != "after <nil>" {
		t.Errorf("a GetOrLoad begun after the Delete got %q, want a load of its own (\"after\")", got)
	}
	return c
}

// TestLeaseDuringMigration: with leases during a migration, a Delete during
// the load leaves the value on neither owner, and a load that completes is
// stored on both.
func TestLeaseDuringMigration(t *testing.T) {
	forEachCluster(t, 8, func(t *testing.T, cl *cluster) {
		ctx := t.Context()
		from, to := cl.nodes(0, 1, 2, 3, 4, 5, 6, 7), cl.nodes(0, 1, 2, 3, 4, 5)
		c := cl.client(t, Options{Nodes: from, MetaLeases: metaLeases, Lease: testLease})
		if err := c.Reshard(to, time.Hour); err != nil {
			t.Fatal(err)
		}
		keys := dualKeys(t, cl.kind, from, to, 2)
		l := newLoader("stale", nil)
		done := make(chan error, 1)
		go func() {
			_, err := c.GetOrLoad(ctx, keys[0], time.Hour, l.load)
			done <- err
		}()
		<-l.entered
		if err := c.Delete(ctx, keys[0]); err != nil {
			t.Fatal(err)
		}
		close(l.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if h := cl.holders(t, keys[0]); len(h) != 0 {
			t.Fatalf("value loaded before a Delete stored on %v", h)
		}
		if v, err := c.GetOrLoad(ctx, keys[1], time.Hour, openLoader("fresh", nil).load); err != nil || string(v) != "fresh" {
			t.Fatalf("GetOrLoad = %q, %v", v, err)
		}
		oldOwner, newOwner := mustRing(t, from).Locate(keys[1]).Addr, mustRing(t, to).Locate(keys[1]).Addr
		if h := cl.holders(t, keys[1]); !slices.Contains(h, oldOwner) || !slices.Contains(h, newOwner) {
			t.Fatalf("value on %v; want both owners", h)
		}
		if st := c.Migration(); st.DualWrites < 2 {
			t.Fatalf("copies to the old owner not counted as dual writes: %+v", st)
		}
	})
}

// TestLeaseWaitEndsAtClose: a process waiting for another's lease stops at
// Close, without loading.
func TestLeaseWaitEndsAtClose(t *testing.T) {
	cl := newCluster(t, "miniredis", 2)
	holder, waiter := cl.client(t, Options{MetaLeases: metaLeases, Lease: testLease}), cl.client(t, Options{Lease: testLease})
	l := newLoader("v", nil)
	held := make(chan error, 1)
	go func() {
		_, err := holder.GetOrLoad(t.Context(), "k", time.Hour, l.load)
		held <- err
	}()
	<-l.entered
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.GetOrLoad(t.Context(), "k", time.Hour, l.load)
		waited <- err
	}()
	waitFor(t, "the waiter to find the lease taken", func() bool { return waiter.LoadStats().LeaseWaits == 1 })
	waiter.Close()
	if err := <-waited; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiter after Close: %v, want ErrClosed", err)
	}
	close(l.release)
	if err := <-held; err != nil || l.calls.Load() != 1 {
		t.Fatalf("holder: %v, %d loads; want its one load", err, l.calls.Load())
	}
}

// TestLeaseReleasedWhenThrottled: a load refused by LoadLimit gives its
// lease back, so another process loads at once.
func TestLeaseReleasedWhenThrottled(t *testing.T) {
	cl := newCluster(t, "miniredis", 1)
	clock := newFakeClock()
	guarded := cl.client(t, Options{MetaLeases: metaLeases, Lease: testLease, Now: clock.Now, LoadLimit: &LoadLimit{PerSecond: 1, MaxWait: -1}})
	other := cl.client(t, Options{MetaLeases: metaLeases, Lease: testLease})
	l := openLoader("v", nil)
	if _, err := guarded.GetOrLoad(t.Context(), "a", time.Hour, l.load); err != nil { // the one token
		t.Fatal(err)
	}
	if _, err := guarded.GetOrLoad(t.Context(), "b", time.Hour, l.load); !errors.Is(err, ErrLoadThrottled) {
		t.Fatalf("second load: %v, want ErrLoadThrottled", err)
	}
	if h := cl.holders(t, lease.Prefix+"b"); len(h) != 0 {
		t.Fatalf("a throttled load kept its lease on %v", h)
	}
	bounded, cancel := context.WithTimeout(t.Context(), testLease/2)
	defer cancel()
	if v, err := other.GetOrLoad(bounded, "b", time.Hour, l.load); err != nil || string(v) != "v" {
		t.Fatalf("other process: %q, %v", v, err)
	}
}

// TestLeaseBatch: with leases, 4 clients (processes) asking GetMultiOrLoad
// for the same 10 missing keys load each key once in all, whichever process
// holds its lease; a Delete during a batch load keeps that key from being
// stored.
func TestLeaseBatch(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		ctx := t.Context()
		const procs = 4
		keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"}
		clients := make([]*Client, procs)
		for i := range clients {
			// Many callers a client dial at once: on a busy machine one
			// took longer than the 500 ms default and failed its read.
			clients[i] = cl.client(t, Options{MetaLeases: metaLeases, Lease: testLease, DialTimeout: 5 * time.Second})
		}
		var mu sync.Mutex
		loadedKeys := map[string]int{}
		var inLoad atomic.Int64
		release := make(chan struct{})
		load := func(_ context.Context, missing []string) (map[string][]byte, error) {
			mu.Lock()
			m := map[string][]byte{}
			for _, k := range missing {
				loadedKeys[k]++
				m[k] = []byte("v:" + k)
			}
			mu.Unlock()
			inLoad.Add(int64(len(missing)))
			<-release
			return m, nil
		}
		results := make([]map[string][]byte, procs)
		errs := make([]error, procs)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() { results[i], errs[i] = c.GetMultiOrLoad(ctx, keys, time.Hour, load) })
		}
		// Every process has taken the leases it could and loads them, or
		// waits for the others' keys.
		waitFor(t, "every process to load or wait for each key", func() bool {
			var waits int64
			for _, c := range clients {
				waits += c.LoadStats().LeaseWaits
			}
			return waits+inLoad.Load() == procs*int64(len(keys))
		})
		close(release)
		wg.Wait()
		for i := range clients {
			if errs[i] != nil || len(results[i]) != len(keys) {
				t.Fatalf("process %d: %d values, %v", i, len(results[i]), errs[i])
			}
			for _, k := range keys {
				if string(results[i][k]) != "v:"+k {
					t.Fatalf("process %d: %s = %q", i, k, results[i][k])
				}
			}
		}
		for _, k := range keys {
			if loadedKeys[k] != 1 {
				t.Fatalf("key loads %v: want each key loaded once across %d processes", loadedKeys, procs)
			}
		}

		// A Delete during the batch load: that key is not stored, the other is.
		c, other := clients[0], clients[1]
		entered, hold := make(chan struct{}), make(chan struct{})
		slow := func(_ context.Context, missing []string) (map[string][]byte, error) {
			close(entered)
			<-hold
			return map[string][]byte{"x": []byte("stale"), "y": []byte("fresh")}, nil
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.GetMultiOrLoad(ctx, []string{"x", "y"}, time.Hour, slow)
			done <- err
		}()
		<-entered
		if err := other.Delete(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		close(hold)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mustMiss(t, c, "x")
		mustGet(t, c, "y", "fresh")
		if s := c.LoadStats(); s.LeasesLost != 1 {
			t.Fatalf("LoadStats = %+v; want one lease lost", s)
		}
	})
}
