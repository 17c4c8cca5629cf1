package memcache

import (
	"bufio"
	"bytes"
	"fmt"

	"github.com/shardcache/shardcache/internal/wire"
)

var errProtocol = wire.ErrProtocol

// MaxKeyLength is the longest key memcached takes.
const MaxKeyLength = 250

// CheckKey returns ErrMalformedKey for a key the text protocol cannot
// carry: empty, longer than MaxKeyLength, or with a byte at or below space
// or DEL (it would end the key, or the line, early).
func CheckKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLength {
		return fmt.Errorf("%w: %d bytes (1 to %d)", ErrMalformedKey, len(key), MaxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("%w: %q has byte %#x at %d", ErrMalformedKey, truncKey(key), c, i)
		}
	}
	return nil
}

func checkKeys(keys []string) error {
	for _, k := range keys {
		if err := CheckKey(k); err != nil {
			return err
		}
	}
	return nil
}

// truncKey shortens a key for an error message.
func truncKey(key string) string {
	if len(key) > 64 {
		return key[:61] + "..."
	}
	return key
}

// parseUint parses b, decimal digits only, as an unsigned number of at
// most bits bits.
func parseUint(b []byte, bits uint) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if bits < 64 && n >= 1<<bits {
		return 0, false
	}
	return n, true
}

// parseInt parses b, decimal with an optional minus sign, as an int64.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, ok := parseUint(b, 63)
	if !ok {
		return 0, false
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// parseSize parses a value's length, at most wire.MaxValue.
func parseSize(b []byte) (int, bool) {
	n, ok := parseUint(b, 63)
	if !ok || n > wire.MaxValue {
		return 0, false
	}
	return int(n), true
}

// nextField splits b at its first space: the field before it, and the
// rest after it (nil when b had none).
func nextField(b []byte) (field, rest []byte) {
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// ValueLine is a parsed "VALUE <key> <flags> <bytes> [<cas>]" line: the
// header of each hit of a retrieval command. Key aliases the line.
type ValueLine struct {
	Key   []byte
	Flags uint32
	Size  int
	CAS   uint64
}

// ParseValueLine parses "VALUE <key> <flags> <bytes> [<cas>]", fields
// separated by one space each. Any other line is an error wrapping
// wire.ErrProtocol; a size above wire.MaxValue too.
func ParseValueLine(l []byte) (ValueLine, error) {
	rest, ok := bytes.CutPrefix(l, []byte("VALUE "))
	if !ok {
		return ValueLine{}, protoErr("gets", l)
	}
	var f [4][]byte
	n := 0
	for n < len(f) && rest != nil {
		f[n], rest = nextField(rest)
		n++
	}
	if n < 3 || rest != nil || len(f[0]) == 0 {
		return ValueLine{}, badLine("gets", l)
	}
	var v ValueLine
	flags, ok1 := parseUint(f[1], 32)
	size, ok2 := parseSize(f[2])
	ok3 := true
	if n == 4 {
		v.CAS, ok3 = parseUint(f[3], 64)
	}
	if !ok1 || !ok2 || !ok3 {
		return ValueLine{}, badLine("gets", l)
	}
	v.Key, v.Flags, v.Size = f[0], uint32(flags), size
	return v, nil
}

func badLine(cmd string, l []byte) error {
	const max = 128
	if len(l) > max {
		l = l[:max]
	}
	return fmt.Errorf("%w: memcached %s: bad line %q", errProtocol, cmd, l)
}

// line reads one line from r without its CR LF; the slice is valid until
// the next read.
func line(r *bufio.Reader) ([]byte, error) { return wire.ReadLine(r) }
