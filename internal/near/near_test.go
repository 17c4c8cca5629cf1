package near

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fill reserves key and fulfills the reservation with value (nil: a miss
// held), and fails the test unless the copy is kept.
func fill(t *testing.T, c *Cache, key string, value []byte, owner uint64) {
	t.Helper()
	if !c.Fulfill(key, c.Reserve(key), value, value != nil, owner) {
		t.Fatalf("%s: not kept", key)
	}
}

// held reports whether key has a copy, and fails the test if the copy is
// not want (nil: a miss held).
func held(t *testing.T, c *Cache, key string, want []byte) bool {
	t.Helper()
	v, found, ok := c.Get(key)
	if ok && (found != (want != nil) || !bytes.Equal(v, want)) {
		t.Fatalf("%s: copy %q (found %v), want %q", key, v, found, want)
	}
	return ok
}

// TestFill: a copy is served once fulfilled, a miss is held too, and the
// counts say what happened.
func TestFill(t *testing.T) {
	c := New(Config{MaxEntries: 100})
	if held(t, c, "k", nil) {
		t.Fatal("a copy before any fill")
	}
	fill(t, c, "k", []byte("v"), 0)
	fill(t, c, "absent", nil, 0)
	for range 3 {
		if !held(t, c, "k", []byte("v")) || !held(t, c, "absent", nil) {
			t.Fatal("a copy kept is not served")
		}
	}
	st := c.Stats()
	if st.Hits != 6 || st.Misses != 2 || st.Entries != 2 || st.Bytes != 2*EntryOverhead+int64(len("k")+len("v")+len("absent")) {
		t.Errorf("stats %+v", st)
	}
	if c.Fulfill("k", 12345, []byte("x"), true, 0) {
		t.Error("a Fulfill without a reservation kept its value")
	}
}

// TestWriteDuringRead: a Delete between Reserve and Fulfill (a write that
// ran while the read was in flight) leaves nothing, nor does a Fulfill of a
// reservation another Reserve took over, nor a cancelled one.
func TestWriteDuringRead(t *testing.T) {
	c := New(Config{MaxEntries: 100})
	fill(t, c, "k", []byte("old"), 0)
	tok := c.Reserve("k")
	if !c.Delete("k") {
		t.Error("Delete found nothing")
	}
	if c.Fulfill("k", tok, []byte("read before the write"), true, 0) || held(t, c, "k", nil) {
		t.Fatal("a read that began before a write published its value")
	}

	first := c.Reserve("k")
	second := c.Reserve("k")
	if c.Fulfill("k", first, []byte("first"), true, 0) {
		t.Error("a reservation taken over was fulfilled")
	}
	if !c.Fulfill("k", second, []byte("second"), true, 0) || !held(t, c, "k", []byte("second")) {
		t.Error("the last reservation was not fulfilled")
	}

	tok = c.Reserve("c")
	c.Cancel("c", tok)
	if c.Fulfill("c", tok, []byte("v"), true, 0) {
		t.Error("a cancelled reservation was fulfilled")
	}
	if c.Delete("c") {
		t.Error("Delete found a cancelled reservation")
	}
}

// TestMaxEntries: the store never holds more than its bound, and a key read
// between every fill stays while a stream of others goes through.
func TestMaxEntries(t *testing.T) {
	for _, max := range []int{10, 1000} { // one shard, and sixteen
		t.Run(strconv.Itoa(max), func(t *testing.T) {
			c := New(Config{MaxEntries: max})
			fill(t, c, "hot", []byte("h"), 0)
			for i := range 20 * max {
				fill(t, c, fmt.Sprint("cold:", i), []byte("c"), 0)
				if n := c.Stats().Entries; n > max {
					t.Fatalf("%d entries, bound %d", n, max)
				}
				if !held(t, c, "hot", []byte("h")) {
					t.Fatalf("the hot key was evicted after %d fills", i+1)
				}
			}
		})
	}
}

// TestMaxBytes: the store's estimated size stays within its bound, and a
// value larger than a shard's share is never kept.
func TestMaxBytes(t *testing.T) {
	const budget = 64 << 10 // 16 shards of 4 KiB
	c := New(Config{MaxBytes: budget})
	big := bytes.Repeat([]byte("x"), 8<<10)
	if c.Fulfill("big", c.Reserve("big"), big, true, 0) || held(t, c, "big", nil) {
		t.Error("a value larger than a shard's share was kept")
	}
	value := bytes.Repeat([]byte("v"), 1000)
	for i := range 500 {
		k := fmt.Sprint("k", i)
		c.Fulfill(k, c.Reserve(k), value, true, 0)
		if b := c.Stats().Bytes; b > budget {
			t.Fatalf("%d bytes, bound %d", b, budget)
		}
	}
	if st := c.Stats(); st.Entries < 16 {
		t.Errorf("%+v: the store keeps almost nothing", st)
	}
}

// TestMaxAge: a copy is not served once it is MaxAge old, counted from its
// reservation.
func TestMaxAge(t *testing.T) {
	c := New(Config{MaxEntries: 10, MaxAge: time.Hour})
	fill(t, c, "k", []byte("v"), 0)
	if !held(t, c, "k", []byte("v")) {
		t.Fatal("not served within MaxAge")
	}
	c = New(Config{MaxEntries: 10, MaxAge: time.Millisecond})
	fill(t, c, "k", []byte("v"), 0)
	for i := 0; held(t, c, "k", []byte("v")); i++ {
		if i == 10000 {
			t.Fatal("still served after 10000 attempts, 1ms apart")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestEvictOwner: a connection's copies go with it, and only they.
func TestEvictOwner(t *testing.T) {
	c := New(Config{MaxEntries: 1000})
	for i := range 100 {
		fill(t, c, fmt.Sprint("k", i), []byte("v"), uint64(1+i%2))
	}
	if n := c.EvictOwner(1); n != 50 {
		t.Errorf("EvictOwner dropped %d, want 50", n)
	}
	if n := c.EvictOwner(0); n != 0 {
		t.Errorf("EvictOwner(0) dropped %d", n)
	}
	for i := range 100 {
		if got := held(t, c, fmt.Sprint("k", i), []byte("v")); got != (i%2 == 1) {
			t.Errorf("k%d held %v after its owner %d went", i, got, 1+i%2)
		}
	}
	tok := c.Reserve("r")
	if n := c.Flush(); n != 50 || c.Stats().Entries != 0 || c.Stats().Bytes != 0 {
		t.Errorf("Flush dropped %d, left %+v", n, c.Stats())
	}
	if c.Fulfill("r", tok, []byte("v"), true, 0) {
		t.Error("a reservation survived Flush")
	}
}

// TestConcurrent: readers, fillers and deleters of a few keys at once,
// under -race. A filler's Fulfill after a Delete that followed its Reserve
// keeps nothing, whatever the interleaving; the bounds hold throughout.
func TestConcurrent(t *testing.T) {
	c := New(Config{MaxEntries: 8})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := strconv.Itoa((g + i) % 12)
				switch i % 4 {
				case 0:
					tok := c.Reserve(k)
					c.Delete(k)
					if c.Fulfill(k, tok, []byte(k), true, 0) {
						t.Error("a Fulfill after a Delete kept its value")
						return
					}
				case 1:
					c.Fulfill(k, c.Reserve(k), []byte(k), true, uint64(g))
				case 2:
					if g == 0 && i%100 == 1 {
						c.EvictOwner(1)
					}
					if v, _, ok := c.Get(k); ok && string(v) != k {
						t.Errorf("%s: %q", k, v)
						return
					}
				default:
					c.Get(k)
				}
			}
		})
	}
	wg.Wait()
	if st := c.Stats(); st.Entries > 8 {
		t.Errorf("%+v over the bound", st)
	}
}

// TestGetValue: GetValue returns copies of values alone, and counts only
// those.
func TestGetValue(t *testing.T) {
	c := New(Config{MaxEntries: 10})
	fill(t, c, "k", []byte("v"), 0)
	fill(t, c, "absent", nil, 0)
	if v, ok := c.GetValue("k"); !ok || string(v) != "v" {
		t.Errorf("GetValue(k) = %q, %v", v, ok)
	}
	if v, ok := c.GetValue("absent"); ok {
		t.Errorf("GetValue of a miss held = %q, %v", v, ok)
	}
	if h := c.Stats().Hits; h != 1 {
		t.Errorf("%d hits, want 1", h)
	}
}
