package memcache

import (
	"bufio"
	"context"
	"fmt"
	"strconv"

	"github.com/shardcache/shardcache/internal/wire"
)

// The meta commands (memcached 1.6): mg, ms, md, ma and mn, each with a
// set of one-letter flags, some carrying a token ("T30", "Oabc"). A Meta
// is one request, a MetaResult its answer; Client.Meta pipelines any mix
// of them in one round trip. Whether the server has them is found once
// per client: a server that answers ERROR has none (ErrNoMeta), and later
// meta calls fail at once with ErrNoMeta.

// MetaCmd is a meta command.
type MetaCmd uint8

// The meta commands.
const (
	MetaGet    MetaCmd = iota + 1 // mg
	MetaSet                       // ms, with a data block
	MetaDelete                    // md
	MetaArith                     // ma
	MetaNoop                      // mn: answers MN, the end of a quiet pipeline
)

var metaNames = [...]string{"meta", "mg", "ms", "md", "ma", "mn"}

// String returns the command's name, "mg".
func (m MetaCmd) String() string {
	if int(m) < len(metaNames) {
		return metaNames[m]
	}
	return "MetaCmd(" + strconv.Itoa(int(m)) + ")"
}

// Flags is a set of meta flags: a bit per letter, a-z then A-Z.
type Flags uint64

func flagBit(c byte) Flags {
	switch {
	case c >= 'a' && c <= 'z':
		return 1 << (c - 'a')
	case c >= 'A' && c <= 'Z':
		return 1 << (26 + c - 'A')
	}
	return 0
}

// FlagsOf returns the set of the letters of s: FlagsOf("vftN"). Bytes
// that are not ASCII letters are ignored.
func FlagsOf(s string) Flags {
	var f Flags
	for i := 0; i < len(s); i++ {
		f |= flagBit(s[i])
	}
	return f
}

// Has reports whether the set holds letter c.
func (f Flags) Has(c byte) bool { b := flagBit(c); return b != 0 && f&b != 0 }

// String returns the set's letters, a-z then A-Z.
func (f Flags) String() string {
	var b []byte
	for i := 0; i < len(flagOrder); i++ {
		if c := flagOrder[i]; f.Has(c) {
			b = append(b, c)
		}
	}
	return string(b)
}

const flagOrder = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// Meta is one meta request.
//
// Flags are the flags sent, by letter (see memcached's protocol.txt):
// mg's b c f h k l q s t u v, N R T; ms's b c k q I, C E F M T; md's b k q
// x I, C E T; ma's b c k q t v, C E N J D M T. A letter that takes a token
// sends the field of its letter below; O, the opaque token, is sent when
// Opaque is not empty.
type Meta struct {
	Cmd   MetaCmd
	Key   string
	Flags Flags
	// Value is ms's data block.
	Value []byte

	TTL         int32  // T: the new expiration (mg, ms, md with I, ma)
	Vivify      int32  // N: on a miss, create a placeholder with this expiration (mg, ma)
	Recache     int32  // R: win the recache when the remaining TTL is below (mg)
	CompareCAS  uint64 // C: act only if the item's CAS id is this
	NewCAS      uint64 // E: the CAS id to give the item
	ClientFlags uint32 // F: the client flags to store (ms)
	Mode        byte   // M: ms E (add) A (append) P (prepend) R (replace) S (set); ma I (incr) D (decr)
	Delta       uint64 // D: ma's delta
	Initial     uint64 // J: ma's value on a vivified miss
	Opaque      string // O: copied back in the answer, to match it (at most 32 bytes)
}

// Status is a meta answer's code.
type Status uint8

// The answers' codes.
const (
	StatusNone Status = iota // no answer (a quiet request's suppressed one is given its meaning instead)
	VA                       // a value follows
	HD                       // success, no value
	EN                       // mg: a miss
	NF                       // not found
	NS                       // not stored
	EX                       // exists: the CAS id did not match
	MN                       // mn's answer
)

var statusNames = [...]string{"", "VA", "HD", "EN", "NF", "NS", "EX", "MN"}

// String returns the code as the server sends it.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// MetaResult is one meta answer.
type MetaResult struct {
	Status Status
	// Value is mg's value (flag v), or ma's new number (v).
	Value []byte
	// Flags are the return flags the answer carried: those asked for, and
	// W (this client won the recache), X (the item is stale), Z (another
	// client won it already).
	Flags       Flags
	ClientFlags uint32 // f
	TTL         int64  // t: the remaining TTL in seconds, -1 for none
	CAS         uint64 // c
	Size        int64  // s
	Hit         bool   // h: fetched before
	LastAccess  int64  // l: seconds since the last access
	Key         string // k
	Opaque      string // O
	// Err is the server's refusal of this request alone (a SERVER_ERROR,
	// or a CLIENT_ERROR of a command without data), the stream in step;
	// or ErrValueTooLarge for an ms not sent.
	Err error
}

// Won reports the W flag: this client won the right to recache the item.
func (r *MetaResult) Won() bool { return r.Flags.Has('W') }

// Stale reports the X flag: the item was invalidated (md with I).
func (r *MetaResult) Stale() bool { return r.Flags.Has('X') }

// WinnerSent reports the Z flag: another client has the win already.
func (r *MetaResult) WinnerSent() bool { return r.Flags.Has('Z') }

// writeMeta writes m; with tag >= 0, the opaque token O<tag> in place of
// m.Opaque.
func writeMeta(w *bufio.Writer, m *Meta, tag int) {
	w.WriteString(metaNames[m.Cmd])
	if m.Cmd == MetaNoop {
		w.WriteString("\r\n")
		return
	}
	w.WriteByte(' ')
	w.WriteString(m.Key)
	b := w.AvailableBuffer()
	if m.Cmd == MetaSet {
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(len(m.Value)), 10)
	}
	for f := m.Flags; f != 0; f &= f - 1 {
		c := flagOrder[trailingZeros(f)]
		b = append(b, ' ', c)
		switch c {
		case 'T':
			b = strconv.AppendInt(b, int64(m.TTL), 10)
		case 'N':
			b = strconv.AppendInt(b, int64(m.Vivify), 10)
		case 'R':
			b = strconv.AppendInt(b, int64(m.Recache), 10)
		case 'C':
			b = strconv.AppendUint(b, m.CompareCAS, 10)
		case 'E':
			b = strconv.AppendUint(b, m.NewCAS, 10)
		case 'F':
			b = strconv.AppendUint(b, uint64(m.ClientFlags), 10)
		case 'M':
			b = append(b, m.Mode)
		case 'D':
			b = strconv.AppendUint(b, m.Delta, 10)
		case 'J':
			b = strconv.AppendUint(b, m.Initial, 10)
		case 'O':
			b = b[:len(b)-2] // O is sent from Opaque
		}
	}
	if tag >= 0 {
		b = append(b, " O"...)
		b = strconv.AppendInt(b, int64(tag), 10)
	} else if m.Opaque != "" {
		b = append(b, " O"...)
		b = append(b, m.Opaque...)
	}
	b = append(b, '\r', '\n')
	w.Write(b)
	if m.Cmd == MetaSet {
		w.Write(m.Value)
		w.WriteString("\r\n")
	}
}

func trailingZeros(f Flags) int {
	n := 0
	for f&1 == 0 {
		f >>= 1
		n++
	}
	return n
}

// ParseMetaLine parses a meta answer's line into r (its code and return
// flags) and returns the size of the data block that follows, -1 for
// none. An error line is returned as its *ServerError; any other line the
// client cannot read wraps wire.ErrProtocol.
func ParseMetaLine(cmd MetaCmd, l []byte, r *MetaResult) (size int, err error) {
	size = -1
	if len(l) < 2 || (len(l) > 2 && l[2] != ' ') {
		return size, metaLineErr(cmd, l)
	}
	switch string(l[:2]) {
	case "VA":
		r.Status = VA
	case "HD":
		r.Status = HD
	case "EN":
		r.Status = EN
	case "NF":
		r.Status = NF
	case "NS":
		r.Status = NS
	case "EX":
		r.Status = EX
	case "MN":
		r.Status = MN
	default:
		return size, metaLineErr(cmd, l)
	}
	rest := l[2:]
	if len(rest) > 0 {
		rest = rest[1:]
	} else {
		rest = nil
	}
	if r.Status == VA {
		var tok []byte
		tok, rest = nextField(rest)
		n, ok := parseSize(tok)
		if !ok {
			return -1, badLine(cmd.String(), l)
		}
		size = n
	}
	for rest != nil {
		var tok []byte
		tok, rest = nextField(rest)
		if len(tok) == 0 {
			return -1, badLine(cmd.String(), l)
		}
		c, v := tok[0], tok[1:]
		bit := flagBit(c)
		if bit == 0 {
			return -1, badLine(cmd.String(), l)
		}
		r.Flags |= bit
		ok := true
		switch c {
		case 'f':
			var n uint64
			n, ok = parseUint(v, 32)
			r.ClientFlags = uint32(n)
		case 't':
			r.TTL, ok = parseInt(v)
		case 'c':
			r.CAS, ok = parseUint(v, 64)
		case 's':
			var n uint64
			n, ok = parseUint(v, 63)
			r.Size = int64(n)
		case 'h':
			ok = len(v) == 1 && (v[0] == '0' || v[0] == '1')
			r.Hit = ok && v[0] == '1'
		case 'l':
			r.LastAccess, ok = parseInt(v)
		case 'k':
			r.Key, ok = string(v), len(v) > 0
		case 'O':
			r.Opaque = string(v)
		}
		if !ok {
			return -1, badLine(cmd.String(), l)
		}
	}
	return size, nil
}

// metaLineErr is the error of a line that is no meta answer: the server's
// error line (ERROR: ErrNoMeta) or a protocol error.
func metaLineErr(cmd MetaCmd, l []byte) error {
	if se, ok := parseError(cmd.String(), l); ok {
		return se
	}
	return protoErr(cmd.String(), l)
}

// readMeta reads one answer to cmd into r, its value cut from a.
func readMeta(br *bufio.Reader, cmd MetaCmd, r *MetaResult, a *wire.Arena) error {
	l, err := line(br)
	if err != nil {
		return err
	}
	size, err := ParseMetaLine(cmd, l, r)
	if err != nil {
		return err
	}
	if size >= 0 {
		if r.Value, err = a.Read(br, size); err != nil {
			return fmt.Errorf("memcached %v: value: %w", cmd, err)
		}
	}
	return nil
}

// noMeta returns ErrNoMeta's error when the server is known to lack the
// meta commands.
func (c *Client) noMeta(cmd MetaCmd) error {
	if c.meta.Load() == metaNo {
		return &ServerError{Kind: "ERROR", Cmd: cmd.String(), is: ErrNoMeta}
	}
	return nil
}

// sawMeta records what err, a meta command's outcome, says of the
// server's meta commands.
func (c *Client) sawMeta(err error) {
	if se, ok := err.(*ServerError); ok && se.is == ErrNoMeta {
		c.meta.Store(metaNo)
	} else if err == nil || ok {
		c.meta.Store(metaYes)
	}
}

// HasMeta reports whether the server has the meta commands: known after
// the first meta answer, asked with "mn" otherwise.
func (c *Client) HasMeta(ctx context.Context) (bool, error) {
	switch c.meta.Load() {
	case metaYes:
		return true, nil
	case metaNo:
		return false, nil
	}
	_, err := c.MetaOne(ctx, Meta{Cmd: MetaNoop})
	if se, ok := err.(*ServerError); ok && se.is == ErrNoMeta {
		return false, nil
	}
	return err == nil, err
}

// MetaOne runs one meta command; the answer's own Err is returned as the
// error too.
func (c *Client) MetaOne(ctx context.Context, m Meta) (MetaResult, error) {
	var out [1]MetaResult
	err := c.Meta(ctx, []Meta{m}, out[:])
	if err == nil {
		err = out[0].Err
	}
	return out[0], err
}

// Meta sends every request on one connection, pipelined, and reads their
// answers into out (len(out) == len(reqs)): one round trip. The error
// returned is the whole's (I/O, protocol, context, ErrNoMeta); a request's
// own refusal is its MetaResult's Err.
//
// A request with q (quiet: mg's miss, and the HD of ms, md and ma, are
// not sent) makes the pipeline end with mn, and tag every request with its
// index as opaque token, to match the answers that come: such a
// pipeline's requests must leave Opaque empty (ErrOpaque), and a quiet
// request with no answer gets the one it stands for (EN for mg, HD
// otherwise). An error line in a quiet pipeline, which names no request,
// is the pipeline's error.
func (c *Client) Meta(ctx context.Context, reqs []Meta, out []MetaResult) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("shardcache/memcache: %d results for %d meta requests", len(out), len(reqs))
	}
	if len(reqs) == 0 {
		return nil
	}
	if len(reqs) > c.window { // see Client.window
		for i := 0; i < len(reqs); i += c.window {
			j := min(i+c.window, len(reqs))
			if err := c.Meta(ctx, reqs[i:j], out[i:j]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := c.noMeta(reqs[0].Cmd); err != nil {
		return err
	}
	quiet := false
	sent := 0
	for i := range reqs {
		m := &reqs[i]
		out[i] = MetaResult{}
		if m.Cmd < MetaGet || m.Cmd > MetaNoop {
			return fmt.Errorf("shardcache/memcache: unknown %v", m.Cmd)
		}
		if m.Flags.Has('q') {
			quiet = true
		}
		if m.Cmd != MetaNoop {
			if err := CheckKey(m.Key); err != nil {
				return err
			}
		}
		if m.Cmd == MetaSet {
			out[i].Err = c.CheckValue(ctx, m.Key, m.ClientFlags, len(m.Value))
		}
		if out[i].Err == nil {
			sent++
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if sent == 0 {
		return nil
	}
	if quiet {
		for i := range reqs {
			if reqs[i].Opaque != "" {
				return fmt.Errorf("%w: request %d", ErrOpaque, i)
			}
		}
	}
	call, err := c.pool.Begin(ctx)
	if err != nil {
		return err
	}
	for i := range reqs {
		if out[i].Err != nil {
			continue
		}
		tag := -1
		if quiet {
			tag = i
		}
		writeMeta(call.W, &reqs[i], tag)
	}
	if quiet {
		call.W.WriteString("mn\r\n")
	}
	complete := false // every answer read: the stream in step
	if err = call.Flush(); err == nil {
		a := wire.NewArena(sent)
		if quiet {
			complete, err = readQuiet(call.R, reqs, out, &a)
		} else {
			err = readInOrder(call.R, reqs, out, &a)
			complete = err == nil
		}
	}
	c.sawMeta(err)
	return call.End(err, complete)
}

// readInOrder reads one answer per request sent, in order.
func readInOrder(c *bufio.Reader, reqs []Meta, out []MetaResult, a *wire.Arena) error {
	for i := range reqs {
		if out[i].Err != nil {
			continue
		}
		err := readMeta(c, reqs[i].Cmd, &out[i], a)
		if se, ok := err.(*ServerError); ok && se.is != ErrNoMeta && inStep(se, reqs[i].Cmd == MetaSet) {
			out[i] = MetaResult{Err: se}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readQuiet reads the answers of a quiet pipeline, tagged with their
// requests' indexes, to the mn's MN; complete when it got there.
func readQuiet(conn *bufio.Reader, reqs []Meta, out []MetaResult, a *wire.Arena) (complete bool, err error) {
	data := false
	for i := range reqs {
		data = data || reqs[i].Cmd == MetaSet
	}
	answered := make([]bool, len(reqs))
	var mns []int // the requests that are mn, answered MN in order, untagged
	for i := range reqs {
		if reqs[i].Cmd == MetaNoop && out[i].Err == nil {
			mns = append(mns, i)
		}
	}
	var first error // an error line, which names no request
	for {
		var r MetaResult
		err := readMeta(conn, MetaNoop, &r, a)
		if se, ok := err.(*ServerError); ok && se.is != ErrNoMeta && inStep(se, data) {
			if first == nil {
				first = se
			}
			continue
		}
		if err != nil {
			return false, err
		}
		if r.Status == MN && r.Opaque == "" {
			if len(mns) == 0 { // the pipeline's own mn
				break
			}
			out[mns[0]], answered[mns[0]] = r, true
			mns = mns[1:]
			continue
		}
		i, ok := parseUint([]byte(r.Opaque), 31)
		if !ok || int(i) >= len(reqs) || answered[i] || out[i].Err != nil {
			return false, fmt.Errorf("%w: memcached meta: an answer tagged %q", errProtocol, truncKey(r.Opaque))
		}
		r.Opaque = ""
		out[i], answered[i] = r, true
	}
	for i := range reqs {
		if answered[i] || out[i].Err != nil {
			continue
		}
		if !reqs[i].Flags.Has('q') {
			return true, fmt.Errorf("%w: memcached %v: no answer before MN", errProtocol, reqs[i].Cmd)
		}
		switch reqs[i].Cmd {
		case MetaGet:
			out[i].Status = EN
		case MetaNoop:
			out[i].Status = MN
		default:
			out[i].Status = HD
		}
	}
	return true, first
}

// TTLAnswer is one key's answer to GetTTL: a multi-get's Answer and the
// remaining TTL.
type TTLAnswer struct {
	wire.Answer
	// TTL is the remaining TTL in whole seconds: -1 for none, 0 for less
	// than one.
	TTL int64
}

// GetTTL reads each key's value, flags, CAS id and remaining TTL in one
// round trip of pipelined "mg <key> v f t c", into out, one per key, and
// returns how many were found: what a copy needs to keep the TTL exactly.
// ErrNoMeta when the server has no meta commands (then remembered). As
// Get, it asks again once when a pooled connection turns out closed.
func (c *Client) GetTTL(ctx context.Context, keys []string, out []TTLAnswer) (int, error) {
	if len(out) != len(keys) {
		return 0, fmt.Errorf("shardcache/memcache: %d results for %d keys", len(out), len(keys))
	}
	if err := c.noMeta(MetaGet); err != nil {
		return 0, err
	}
	if err := checkKeys(keys); err != nil || len(keys) == 0 {
		return 0, err
	}
	if len(keys) > c.window { // see Client.window
		found := 0
		for i := 0; i < len(keys); i += c.window {
			j := min(i+c.window, len(keys))
			n, err := c.GetTTL(ctx, keys[i:j], out[i:j])
			found += n
			if err != nil {
				return found, err
			}
		}
		return found, nil
	}
	for retried := false; ; retried = true {
		call, err := c.pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		m := Meta{Cmd: MetaGet, Flags: FlagsOf("vftc")}
		for _, k := range keys {
			m.Key = k
			writeMeta(call.W, &m, -1)
		}
		found, answered := 0, 0
		if err = call.Flush(); err == nil {
			a := wire.NewArena(len(keys))
			for i := range keys {
				var r MetaResult
				if err = readMeta(call.R, MetaGet, &r, &a); err != nil {
					break
				}
				answered++
				o := &out[i]
				*o = TTLAnswer{}
				switch r.Status {
				case VA:
					o.Value, o.Flags, o.CAS, o.TTL, o.Found = r.Value, r.ClientFlags, r.CAS, r.TTL, true
					found++
				case EN:
				default:
					err = fmt.Errorf("%w: memcached mg: answer %v to a get", errProtocol, r.Status)
				}
				if err != nil {
					break
				}
			}
		}
		if err != nil && answered == 0 && !retried && call.Pooled() && wire.ClosedByPeer(err) && ctx.Err() == nil {
			call.Abandon()
			c.pool.CloseIdle()
			continue
		}
		c.sawMeta(err)
		if se, ok := err.(*ServerError); ok {
			call.End(err, false) // the other keys' answers are not read
			return found, se
		}
		return found, end(call, err, false)
	}
}
