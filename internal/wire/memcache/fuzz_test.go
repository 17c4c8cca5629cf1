package memcache

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/internal/wire"
)

// Every parser of the server's answers has a fuzz target: whatever the
// bytes, a parser returns a value or a typed error, never panics, and
// never returns a value that breaks its own invariants. Seeds are in
// testdata/fuzz and below.

// huge matches a number of 7 digits or more: a value size the arena
// allocates before it reads the value (wire.Arena), which makes a fuzz
// run slow without finding anything.
var huge = regexp.MustCompile(`[0-9]{7}`)

// readerOf is a reader of data with a small buffer, so that lines and
// values cross its refills.
func readerOf(data []byte) *bufio.Reader { return bufio.NewReaderSize(bytes.NewReader(data), 16) }

// typed reports whether err is one the package documents: a sentinel, a
// server's error line, a protocol error or a read's failure.
func typed(err error) bool {
	var se *ServerError
	return errors.Is(err, wire.ErrProtocol) || errors.Is(err, wire.ErrNoCRLF) || errors.As(err, &se) ||
		errors.Is(err, ErrCacheMiss) || errors.Is(err, ErrNotStored) || errors.Is(err, ErrCASConflict) ||
		strings.Contains(err.Error(), "EOF") || errors.Is(err, bufio.ErrBufferFull)
}

func FuzzValueLine(f *testing.F) {
	for _, s := range []string{"VALUE k 0 1 1", "VALUE k 7 3", "VALUE k 4294967295 0 18446744073709551615",
		"VALUE k 0 x 1", "VALUE  0 1", "VALUE k 0 -1", "VALUE k 0 1 1 1", "VALUE k 4294967296 1", "END", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, l []byte) {
		v, err := ParseValueLine(l)
		if err != nil {
			if !errors.Is(err, wire.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		if len(v.Key) == 0 || bytes.IndexByte(v.Key, ' ') >= 0 || v.Size < 0 || v.Size > wire.MaxValue {
			t.Fatalf("%q parsed as %+v", l, v)
		}
		// The fields, read by strconv, agree.
		f := strings.Split(string(l), " ")
		flags, err1 := strconv.ParseUint(f[2], 10, 32)
		size, err2 := strconv.Atoi(f[3])
		cas := uint64(0)
		var err3 error
		if len(f) == 5 {
			cas, err3 = strconv.ParseUint(f[4], 10, 64)
		}
		if f[1] != string(v.Key) || err1 != nil || err2 != nil || err3 != nil || uint32(flags) != v.Flags || size != v.Size || cas != v.CAS {
			t.Fatalf("%q parsed as %+v", l, v)
		}
	})
}

func FuzzGetsAnswer(f *testing.F) {
	for _, s := range []string{
		"VALUE a 7 3 11\r\nabc\r\nVALUE c 0 0 12\r\n\r\nEND\r\n",
		"END\r\n",
		"VALUE b 1 2\r\nhi\r\nEND\r\n",
		"VALUE c 0 1 1\r\nc\r\nVALUE a 0 1 2\r\na\r\nEND\r\n",
		"VALUE a 0 1 1\r\nabcEND\r\n",
		"SERVER_ERROR out of memory\r\n",
		"CLIENT_ERROR unauthenticated\r\n",
		"VALUE a 0 10 1\r\nabc",
	} {
		f.Add([]byte(s), "a b c a")
	}
	f.Fuzz(func(t *testing.T, data []byte, keyList string) {
		if huge.Match(data) {
			return // a size the arena would allocate before reading: slow, not wrong
		}
		keys := strings.Fields(keyList)
		if len(keys) == 0 || len(keys) > 100 {
			return
		}
		out := make([]wire.Answer, len(keys))
		found, err := readGets(readerOf(data), keys, out)
		if err != nil && !typed(err) {
			t.Fatalf("untyped error %v", err)
		}
		n := 0
		for i, a := range out {
			if !a.Found {
				if a.Value != nil {
					t.Fatalf("key %d not found, with a value", i)
				}
				continue
			}
			n++
			if cap(a.Value) != len(a.Value) {
				t.Fatalf("key %d: value with room past its end", i)
			}
		}
		if n != found {
			t.Fatalf("found %d, %d answers found", found, n)
		}
	})
}

func FuzzMetaAnswer(f *testing.F) {
	for _, s := range []string{
		"VA 3 f7 t-1 c11\r\nabc\r\n", "HD c5 k/a Oabc\r\n", "EN\r\n", "NF\r\n", "NS\r\n", "EX\r\n", "MN\r\n",
		"VA 0 W\r\n\r\n", "VA 1 X Z t12\r\nv\r\n", "HD h1 l30 s3\r\n", "ERROR\r\n", "SERVER_ERROR out of memory\r\n",
		"VA 5 O0\r\nabc\r\nHD O1\r\nMN\r\n", "VA x\r\n", "HDc1\r\n", "VA 3 q\r\nabc",
	} {
		f.Add([]byte(s), uint8(1), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, cmd uint8, quiet bool) {
		if huge.Match(data) {
			return
		}
		c := MetaCmd(cmd%5 + 1)
		var r MetaResult
		a := wire.NewArena(0)
		if err := readMeta(readerOf(data), c, &r, &a); err != nil {
			if !typed(err) {
				t.Fatalf("untyped error %v", err)
			}
		} else if r.Status == StatusNone || (r.Value != nil && r.Status != VA) {
			t.Fatalf("%q read as %+v", data, r)
		}
		// The same bytes as the answers of a pipeline of three.
		reqs := []Meta{{Cmd: c, Key: "a"}, {Cmd: MetaGet, Key: "b"}, {Cmd: MetaNoop}}
		if quiet {
			reqs[0].Flags = FlagsOf("q")
		}
		out := make([]MetaResult, len(reqs))
		var err error
		if quiet {
			_, err = readQuiet(readerOf(data), reqs, out, &a)
		} else {
			err = readInOrder(readerOf(data), reqs, out, &a)
		}
		if err != nil && !typed(err) {
			t.Fatalf("untyped pipeline error %v", err)
		}
	})
}

// escape is the URI encoding memcached gives a listed key.
func escape(key []byte) string {
	var b strings.Builder
	for _, c := range key {
		if c <= ' ' || c >= 0x7f || c == '%' || c == '=' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func FuzzMetadumpLine(f *testing.F) {
	for _, s := range []string{
		"key=a exp=-1 la=1700000000 cas=2 fetch=no cls=1 size=63",
		"key=a%20b exp=1700000000 la=1",
		"key=%zz exp=-1", "key= exp=-1", "exp=-1", "key=a", "key=a exp=x", "key=a%2 exp=-1", "key=a exp=-2",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, l []byte) {
		key, exp, err := ParseMetadumpLine(l, nil)
		if err != nil {
			if !errors.Is(err, wire.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		if len(key) == 0 || exp < -1 {
			t.Fatalf("%q parsed as %q, %d", l, key, exp)
		}
		again, exp2, err := ParseMetadumpLine([]byte(fmt.Sprintf("key=%s exp=%d", escape(key), exp)), make([]byte, 0, 4))
		if err != nil || !bytes.Equal(again, key) || exp2 != exp {
			t.Fatalf("%q: key %q exp %d; escaped and parsed again %q %d, %v", l, key, exp, again, exp2, err)
		}
	})
}

func FuzzStats(f *testing.F) {
	for _, s := range []string{
		"STAT pid 1\r\nSTAT version 1.6.18\r\nSTAT evictions on\r\nEND\r\n",
		"STAT item_size_max 1048576\r\nSTAT cas_enabled yes\r\nEND\r\n",
		"STAT x\r\nEND\r\n", "ERROR\r\n", "STAT  1\r\nEND\r\n", "STAT a b c d\r\nEND",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := 0
		err := readStats(readerOf(data), "stats", func(name, value []byte) {
			if len(name) == 0 || bytes.IndexByte(name, ' ') >= 0 {
				t.Fatalf("stat name %q", name)
			}
			got++
		})
		if err != nil && !typed(err) {
			t.Fatalf("untyped error %v", err)
		}
		name, value, ok := ParseStatLine(data)
		if ok && (len(name) == 0 || value == nil) {
			t.Fatalf("%q parsed as %q %q", data, name, value)
		}
	})
}

func FuzzStorageReply(f *testing.F) {
	for _, s := range []string{"STORED", "NOT_STORED", "EXISTS", "NOT_FOUND", "DELETED", "TOUCHED", "OK", "VERSION 1.6.18",
		"SERVER_ERROR object too large for cache", "SERVER_ERROR out of memory storing object",
		"CLIENT_ERROR bad data chunk", "CLIENT_ERROR unauthenticated", "ERROR", "ERROR unknown command", "12345", ""} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, l []byte, op uint8) {
		o := StoreOp(op % 6)
		err := storeReply(o, l)
		switch {
		case err == nil:
			if string(l) != "STORED" {
				t.Fatalf("%q stored", l)
			}
		case !typed(err):
			t.Fatalf("untyped error %v", err)
		case errors.Is(err, ErrValueTooLarge) && !bytes.HasPrefix(l, []byte("SERVER_ERROR object too large")):
			t.Fatalf("%q read as too large", l)
		}
		// A refusal the server answered keeps the stream in step, unless
		// the server read the data block as a command.
		var se *ServerError
		if errors.As(err, &se) && inStep(err, true) != (se.Kind == "SERVER_ERROR") {
			t.Fatalf("%q: in step %v", l, inStep(err, true))
		}
		if found, err := deleteReply(l); err != nil && !typed(err) || found && string(l) != "DELETED" {
			t.Fatalf("delete %q: %v, %v", l, found, err)
		}
	})
}
