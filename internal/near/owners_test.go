package near

import (
	"fmt"
	"testing"
	"time"
)

// TestOwners: past the first eight addresses, each asked once; an address
// without a store is nil; the hits reach each store once, with Count.
func TestOwners(t *testing.T) {
	stores := map[string]*Cache{}
	for i := range 12 {
		c := New(Config{MaxEntries: 10})
		c.Fulfill("k", c.Reserve("k"), []byte("v"), true, 0)
		stores[fmt.Sprint("n", i)] = c
	}
	asked := map[string]int{}
	lookup := func(addr string) *Cache { asked[addr]++; return stores[addr] }
	var os Owners
	now := time.Now()
	for range 3 {
		for i := range 13 { // n12 has no store
			o := os.Of(fmt.Sprint("n", i), lookup)
			if i == 12 {
				if o != nil {
					t.Fatal("an owner without a store")
				}
				continue
			}
			if _, found, ok := o.Peek("k", now); !found || !ok {
				t.Fatalf("n%d: Peek = %v, %v", i, found, ok)
			}
			o.Hit()
		}
	}
	os.Count()
	for addr, c := range stores {
		if asked[addr] != 1 || c.Stats().Hits != 3 {
			t.Errorf("%s: asked %d times, %d hits; want 1 and 3", addr, asked[addr], c.Stats().Hits)
		}
	}
	if asked["n12"] != 1 {
		t.Errorf("n12 asked %d times", asked["n12"])
	}
}
