package gutter

import (
	"fmt"
	"slices"
	"testing"
)

// TestHintsOverflow: past MaxHints the hints hold the overflow alone, and
// a put back keeps it; Take empties them.
func TestHintsOverflow(t *testing.T) {
	var h Hints
	h.Add("b", "a", "b")
	if keys, over := h.Take(); !slices.Equal(keys, []string{"a", "b"}) || over {
		t.Fatalf("Take = %v, %v; want [a b], false", keys, over)
	}
	for i := range MaxHints + 1 {
		h.Add(fmt.Sprint(i))
	}
	keys, over := h.Take()
	if len(keys) != 0 || !over {
		t.Fatalf("past MaxHints: %d keys, overflow %v; want none, true", len(keys), over)
	}
	h.PutBack(keys, over)
	h.Add("c") // nothing to add to an overflow
	if keys, over := h.Take(); len(keys) != 0 || !over {
		t.Fatalf("after PutBack of an overflow: %v, %v", keys, over)
	}
	h.PutBack([]string{"x"}, false)
	if keys, over := h.Take(); !slices.Equal(keys, []string{"x"}) || over {
		t.Fatalf("after PutBack: %v, %v", keys, over)
	}
}
