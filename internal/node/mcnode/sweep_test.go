package mcnode

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/testserver"
)

// fill stores count keys "prefix<i>" on n, a small value each, in
// pipelined batches from a few goroutines.
func fill(t *testing.T, n *Node, prefix string, from, count int, ttl time.Duration) {
	t.Helper()
	const batch = 1000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := from; i < from+count; i += batch {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			items := make([]node.Item, 0, batch)
			for j := i; j < min(i+batch, from+count); j++ {
				items = append(items, node.Item{Key: fmt.Sprintf("%s%d", prefix, j), Value: []byte("v"), TTL: ttl})
			}
			if err := n.SetMulti(t.Context(), items); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// TestScan: a Scan pages the keys of its prefix through fn, n at a time,
// with the listing's TTL; fn's error ends it; and a Dump and Restore copy
// the keys to another node with their flags and TTL.
func TestScan(t *testing.T) {
	ss := testserver.Memcached(t, 2)
	src, _ := newNode(t, ss[0], Config{})
	dst, _ := newNode(t, ss[1], Config{})
	ctx := t.Context()
	fill(t, src, "keep:", 0, 250, time.Hour)
	fill(t, src, "other:", 0, 100, 0)
	if err := src.Store(ctx, node.StoreSet, node.Item{Key: "keep:flags", Value: []byte("f"), Flags: 77}); err != nil {
		t.Fatal(err)
	}
	var pages []int
	var all []node.Item
	err := src.Scan(ctx, node.ScanOptions{Prefix: "keep:", Page: 100}, func(page []node.Item) error {
		pages = append(pages, len(page))
		all = append(all, page...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(pages) != "[100 100 51]" {
		t.Errorf("pages of %v; want 100, 100, 51", pages)
	}
	for _, it := range all {
		if !strings.HasPrefix(it.Key, "keep:") || !it.TTLKnown {
			t.Fatalf("listed %+v", it)
		}
		if it.Key != "keep:flags" && (it.TTL < time.Hour-5*time.Second || it.TTL > time.Hour) {
			t.Errorf("%s: TTL %v, want about an hour", it.Key, it.TTL)
		}
	}
	// Limit ends the listing there: one key, not the node's 351.
	var limited []node.Item
	if err := src.Scan(ctx, node.ScanOptions{Page: 10, Limit: 1}, func(page []node.Item) error {
		limited = append(limited, page...)
		return nil
	}); err != nil || len(limited) != 1 {
		t.Errorf("Scan with Limit 1: %d keys, %v; want 1", len(limited), err)
	}
	if _, err := src.Get(ctx, "keep:flags"); err != nil { // the pool's next call, after a listing cut short
		t.Errorf("Get after a limited Scan: %v", err)
	}
	stop := errors.New("stop")
	if err := src.Scan(ctx, node.ScanOptions{Page: 10}, func([]node.Item) error { return stop }); err != stop {
		t.Errorf("Scan whose fn fails: %v", err)
	}
	dumped, err := src.Dump(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := dst.Restore(ctx, dumped)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range stored {
		if !ok {
			t.Fatalf("%s not restored", dumped[i].Key)
		}
	}
	keys := make([]string, len(all))
	for i := range all {
		keys[i] = all[i].Key
	}
	copied, err := dst.GetMulti(ctx, keys, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range copied {
		want := dumped[i]
		if !it.Found || string(it.Value) != string(want.Value) || it.Flags != want.Flags || it.TTL < want.TTL-2*time.Second || it.TTL > want.TTL {
			t.Fatalf("copy of %s: %+v; want %+v", keys[i], it, want)
		}
	}
	if again, err := dst.Restore(ctx, dumped[:1]); err != nil || again[0] {
		t.Errorf("a second Restore over the copy: %v, %v; want not stored", again, err)
	}
	if found, err := dst.Exists(ctx, []string{keys[0], "absent"}); err != nil || !found[0] || found[1] {
		t.Errorf("Exists = %v, %v", found, err)
	}
	if size, err := src.Size(ctx); err != nil || size != 351 {
		t.Errorf("Size = %d, %v; want 351", size, err)
	}
}

// TestScanHoldsNoLock: while a Scan's fn works on a page, the server
// answers another client's reads of every key at once: the listing was read
// whole before the first page. A listing left unread holds memcached's
// crawler, and before 1.6.39 an item lock with it, so that a read of a key
// under that lock waits until the listing is read on (here: never).
func TestScanHoldsNoLock(t *testing.T) {
	const keys = 100_000 // a listing of several MB: more than the sockets buffer
	s := testserver.MemcachedArgs(t, 1, "-m", "256")[0]
	n, _ := newNode(t, s, Config{})
	other, _ := newNode(t, s, Config{ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, DialTimeout: 3 * time.Second})
	fill(t, n, "lock:", 0, keys, 0)
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("lock:%d", i)
	}
	ctx := t.Context()
	pages, listed := 0, 0
	err := n.Scan(ctx, node.ScanOptions{Page: 1000}, func(page []node.Item) error {
		listed += len(page)
		if pages++; pages > 1 {
			return nil
		}
		for i := 0; i < keys; i += 1000 {
			got, err := other.GetMulti(ctx, names[i:i+1000], false)
			if err != nil {
				return fmt.Errorf("another client's read of keys %d+ while the Scan's fn runs: %w", i, err)
			}
			for _, it := range got {
				if !it.Found {
					return fmt.Errorf("%s not found while the Scan's fn runs", it.Key)
				}
			}
		}
		return nil
	})
	if err != nil || listed != keys {
		t.Fatalf("Scan listed %d of %d keys: %v", listed, keys, err)
	}
}

// TestScanMemoryFlat: a Scan's memory does not grow with the node: the
// heap it keeps live (measured after collections, over the listing's
// spooling and its paging both) while listing ten times the keys is about
// the same, far below what holding the listing would take; the peak heap
// in use without those collections is logged. The keys are 10k and 100k,
// or with SHARDCACHE_BIG=1 100k and 1M.
func TestScanMemoryFlat(t *testing.T) {
	small, large := 10_000, 100_000
	if os.Getenv("SHARDCACHE_BIG") != "" {
		small, large = 100_000, 1_000_000
	}
	s := testserver.MemcachedArgs(t, 1, "-m", "1024")[0]
	n, _ := newNode(t, s, Config{})
	// scan returns the most the heap grew during a Scan of want keys: the
	// live heap, with collect, else the heap in use. A sampler runs beside
	// the listing's phase, until fn is first called; then fn samples, in
	// step with the pages (a collection beside them would count a page
	// being built as live).
	scan := func(want int, collect bool) uint64 {
		t.Helper()
		runtime.GC()
		var mu sync.Mutex
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base, top := ms.HeapAlloc, ms.HeapAlloc
		if !collect {
			base, top = ms.HeapInuse, ms.HeapInuse
		}
		sample := func() {
			var ms runtime.MemStats
			if collect {
				runtime.GC()
			}
			runtime.ReadMemStats(&ms)
			v := ms.HeapInuse
			if collect {
				v = ms.HeapAlloc
			}
			mu.Lock()
			top = max(top, v)
			mu.Unlock()
		}
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					sample()
				}
			}
		}()
		listed, pages := 0, 0
		err := n.Scan(t.Context(), node.ScanOptions{Page: 1000}, func(page []node.Item) error {
			if pages == 0 {
				close(stop)
				<-stopped
			}
			listed += len(page)
			if pages++; !collect || pages%10 == 0 {
				sample()
			}
			return nil
		})
		if pages == 0 {
			close(stop)
			<-stopped
		}
		if err != nil || listed != want {
			t.Fatalf("Scan listed %d keys of %d: %v", listed, want, err)
		}
		return top - base
	}
	fill(t, n, "mem:", 0, small, 0)
	liveSmall, peakSmall := scan(small, true), scan(small, false)
	fill(t, n, "mem:", small, large-small, 0)
	start := time.Now()
	liveLarge := scan(large, true)
	took := time.Since(start)
	peakLarge := scan(large, false)
	held := uint64(large) * uint64(len("mem:1000000")+16+8) // the keys and their TTLs alone, held whole
	t.Logf("a Scan's heap growth, live and in use at its peak: %d keys %.2f and %.1f MB, %d keys %.2f and %.1f MB (%v); "+
		"holding the %d keys would take at least %.1f MB",
		small, mb(liveSmall), mb(peakSmall), large, mb(liveLarge), mb(peakLarge), took.Round(time.Millisecond), large, mb(held))
	if liveLarge > liveSmall+held/20 {
		t.Errorf("the live heap grew %.2f MB listing %d keys, %.2f MB listing %d: the listing is held",
			mb(liveLarge), large, mb(liveSmall), small)
	}
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }
