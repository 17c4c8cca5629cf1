package wire

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// answer returns n values of size bytes each, every one followed by CR LF,
// and a reader over them.
func answer(n, size int) *bufio.Reader {
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), size))
		b.WriteString("\r\n")
	}
	return bufio.NewReader(strings.NewReader(b.String()))
}

// TestArena reads the values of one answer as a multi-get does: each value
// as sent, capped at its length (an append never runs into its
// neighbour's), the values of a known answer of like sizes in one buffer,
// and a lone value in a buffer of exactly its size.
func TestArena(t *testing.T) {
	t.Run("values", func(t *testing.T) {
		r, a := answer(25, 100), NewArena(25)
		var vals [][]byte
		for i := range 25 {
			v, err := a.Read(r, 100)
			if err != nil {
				t.Fatal(err)
			}
			if want := bytes.Repeat([]byte{byte('a' + i%26)}, 100); !bytes.Equal(v, want) {
				t.Fatalf("value %d = %q", i, v)
			}
			if cap(v) != len(v) {
				t.Fatalf("value %d: cap %d, len %d: an append would write over the next value", i, cap(v), len(v))
			}
			vals = append(vals, v)
		}
		_ = append(vals[0], 'x')
		if vals[1][0] != 'b' {
			t.Fatal("an append to a value changed the next one")
		}
	})
	t.Run("one buffer for a known answer", func(t *testing.T) {
		allocs := testing.AllocsPerRun(20, func() {
			r, a := answer(25, 100), NewArena(25)
			for range 25 {
				if _, err := a.Read(r, 100); err != nil {
					t.Fatal(err)
				}
			}
		})
		// answer's own allocations: the builder's growth, the string
		// repeats, the reader and its buffer; measured without the reads.
		base := testing.AllocsPerRun(20, func() { answer(25, 100) })
		if got := allocs - base; got != 1 {
			t.Fatalf("25 values of 100 bytes took %v allocations, want 1", got)
		}
	})
	t.Run("a lone value is its own size", func(t *testing.T) {
		r, a := answer(1, 3000), NewArena(1)
		v, err := a.Read(r, 3000)
		if err != nil {
			t.Fatal(err)
		}
		if len(v) != 3000 || cap(v) != 3000 {
			t.Fatalf("len %d cap %d, want 3000 and 3000", len(v), cap(v))
		}
	})
	t.Run("bad size", func(t *testing.T) {
		a := NewArena(2)
		for _, size := range []int{-1, MaxValue + 1} {
			if _, err := a.Read(answer(1, 1), size); err == nil {
				t.Fatalf("size %d: no error", size)
			}
		}
	})
	t.Run("no CR LF", func(t *testing.T) {
		a := NewArena(1)
		if _, err := a.Read(bufio.NewReader(strings.NewReader("abcXY")), 3); err != ErrNoCRLF {
			t.Fatalf("err = %v, want ErrNoCRLF", err)
		}
	})
}
