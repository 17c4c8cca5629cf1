package resp

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/internal/wire"
)

// FuzzMget reads arbitrary bytes as the answer to an MGET of n keys: never
// a panic, and on success exactly n answers, each hit's value within the
// input and capped at its own length.
func FuzzMget(f *testing.F) {
	for _, seed := range []string{
		"*4\r\n$3\r\nabc\r\n$-1\r\n$0\r\n\r\n$5\r\nx\r\nyz\r\n",
		"*2\r\n_\r\n$1\r\nc\r\n",
		"-NOPERM no\r\n",
		"*1\r\n$9223372036854775806\r\n",
		"*3\r\n:1\r\n",
		"*1\r\n$1\r\nabc\r\n",
		"*1\r\n$10\r\nabc",
	} {
		f.Add([]byte(seed), uint8(strings.Count(seed, "\r\n$")+strings.Count(seed, "\r\n_")))
	}
	f.Fuzz(func(t *testing.T, answer []byte, n uint8) {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprint("k", i)
		}
		out := make([]wire.Answer, len(keys))
		c := wire.NewConn(wire.BytesConn{R: bytes.NewReader(answer)})
		found, err := Mget{}.ReadMulti(c, keys, out)
		if err != nil {
			return
		}
		hits := 0
		for _, a := range out {
			if !a.Found {
				continue
			}
			hits++
			if len(a.Value) > len(answer) || cap(a.Value) != len(a.Value) {
				t.Fatalf("a value of %d bytes (cap %d) from %d bytes of answer", len(a.Value), cap(a.Value), len(answer))
			}
		}
		if hits != found {
			t.Fatalf("%d found, %d hits", found, hits)
		}
	})
}

// FuzzHeader parses arbitrary lines as array and bulk headers: a length of
// -1 or more, or an error.
func FuzzHeader(f *testing.F) {
	for _, seed := range []string{"*3", "$-1", "_", "-ERR x", "$", "*x", "$-2", "+OK"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, kind := range []byte{'*', '$'} {
			if n, err := Header(line, kind); err == nil && n < -1 {
				t.Fatalf("Header(%q) = %d", line, n)
			}
		}
	})
}

// TestHeader pins the lengths Header takes: -1 (and RESP3's "_") for nil,
// and every length up to the largest int, nothing past it.
func TestHeader(t *testing.T) {
	for _, c := range []struct {
		line string
		want int
		ok   bool
	}{
		{"$-1", -1, true}, {"_", -1, true}, {"$0", 0, true}, {"$100", 100, true},
		{"$" + strconv.Itoa(math.MaxInt), math.MaxInt, true},
		{"$" + strconv.FormatUint(uint64(math.MaxInt)+1, 10), 0, false}, {"$99999999999999999999", 0, false},
		{"$-2", 0, false}, {"$-0", 0, false}, {"$+5", 0, false}, {"$", 0, false},
		{"$1x", 0, false}, {"*3", 0, false}, {"$ 3", 0, false},
	} {
		n, err := Header([]byte(c.line), '$')
		if c.ok != (err == nil) || n != c.want {
			t.Errorf("Header(%q) = %d, %v; want %d, ok %v", c.line, n, err, c.want, c.ok)
		}
		if err != nil && !errors.Is(err, wire.ErrProtocol) {
			t.Errorf("Header(%q): %v does not wrap ErrProtocol", c.line, err)
		}
	}
}
