// Package resp is the little of Redis's protocol (RESP) the client speaks
// itself, beside go-redis: a multi-get's MGET in two halves (write every
// node's, then read each answer: see package wire), and the login that
// go-redis runs on its own connections (AUTH, SELECT), for the
// connections of those MGETs. Everything else goes through go-redis.
//
//	p := wire.NewPool(wire.Config{Addr: addr, Dial: (&wire.Dialer{Addr: addr, Login: resp.Login(creds)}).Dial})
//	g := p.Send(ctx, resp.Mget{}, keys)
//	found, err := g.Recv(out)
package resp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/shardcache/shardcache/internal/wire"
)

// Error is an error reply of a Redis server: its text, without the
// leading '-'. Its RedisError method marks it as go-redis's own error
// replies are marked, so that go-redis's IsAuthError and
// IsPermissionError read it as theirs.
type Error string

// Error returns the reply's text.
func (e Error) Error() string { return string(e) }

// RedisError marks Error as a Redis error reply.
func (Error) RedisError() {}

// Mget is the multi-get MGET, a wire.Multi.
type Mget struct{}

// WriteMulti writes "MGET <keys...>" as a RESP array of bulk strings.
func (Mget) WriteMulti(w *bufio.Writer, keys []string) {
	writeArray(w, len(keys)+1)
	writeBulk(w, "MGET")
	for _, k := range keys {
		writeBulk(w, k)
	}
}

// ReadMulti reads the answer to "MGET <keys...>": an array of one bulk
// string per key, nil for a miss (or a key of another type). Values are
// cut from one wire.Arena.
func (Mget) ReadMulti(c *wire.Conn, keys []string, out []wire.Answer) (int, error) {
	l, err := c.Line()
	if err != nil {
		return 0, err
	}
	n, err := Header(l, '*')
	if err != nil {
		return 0, err
	}
	if n != len(keys) {
		return 0, fmt.Errorf("%w: MGET of %d keys answered %d values", wire.ErrProtocol, len(keys), n)
	}
	a := wire.NewArena(len(keys))
	found := 0
	for i := range keys {
		if l, err = c.Line(); err != nil {
			return found, err
		}
		size, err := Header(l, '$')
		if err != nil {
			return found, err
		}
		if size < 0 {
			continue
		}
		if out[i].Value, err = a.Read(c.R, size); err != nil {
			return found, fmt.Errorf("redis MGET: value of %q: %w", keys[i], err)
		}
		out[i].Found = true
		found++
	}
	return found, nil
}

// Header parses the line of a RESP array ('*') or bulk string ('$'): its
// length, -1 for nil (RESP3's "_" too). An error reply is an Error; any
// other line wraps wire.ErrProtocol.
func Header(l []byte, kind byte) (int, error) {
	switch {
	case len(l) > 0 && l[0] == '-':
		return 0, Error(l[1:])
	case len(l) == 1 && l[0] == '_':
		return -1, nil
	case len(l) < 2 || l[0] != kind:
		return 0, fmt.Errorf("%w: unexpected reply %q", wire.ErrProtocol, l)
	}
	n, ok := length(l[1:])
	if !ok {
		return 0, fmt.Errorf("%w: bad length in %q", wire.ErrProtocol, l)
	}
	return n, nil
}

// length parses a header's length: "-1", or decimal digits that fit an
// int. By hand, as a multi-get reads one a key: strconv.Atoi of the
// line's copy took 1% of its client CPU.
func length(b []byte) (int, bool) {
	if len(b) == 2 && b[0] == '-' && b[1] == '1' {
		return -1, true
	}
	if len(b) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		d := int(c) - '0'
		if d < 0 || d > 9 || n > (math.MaxInt-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// WriteCommand writes a command as a RESP array of bulk strings.
func WriteCommand(w *bufio.Writer, args ...string) {
	writeArray(w, len(args))
	for _, a := range args {
		writeBulk(w, a)
	}
}

func writeArray(w *bufio.Writer, n int) {
	w.WriteByte('*')
	writeInt(w, n)
	w.WriteString("\r\n")
}

func writeBulk(w *bufio.Writer, s string) {
	w.WriteByte('$')
	writeInt(w, len(s))
	w.WriteString("\r\n")
	w.WriteString(s)
	w.WriteString("\r\n")
}

// writeInt writes n in decimal, formatted in w's own buffer: an array of
// ours would escape through Write (one allocation a key of every MGET).
func writeInt(w *bufio.Writer, n int) {
	w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(n), 10))
}

// Credentials are what Login sends.
type Credentials struct {
	Username, Password string
	DB                 int
}

// ErrLogin wraps a refused AUTH or SELECT; the text has no password.
var ErrLogin = errors.New("shardcache/resp: login refused")

// Login returns the login go-redis runs on its own connections, for a
// wire.Dialer: AUTH with the Username (Redis's "default" when empty, as
// go-redis's HELLO does, so that a server whose default user needs no
// password accepts it) and Password, then SELECT of the DB, each answered
// +OK; nil when there is nothing to send. A server older than Redis 6,
// which knows no users, is asked again with the password alone. A refusal
// wraps ErrLogin and the server's Error.
func Login(creds Credentials) func(ctx context.Context, conn net.Conn) error {
	if creds.Password == "" && creds.DB == 0 {
		return nil
	}
	return func(ctx context.Context, conn net.Conn) error {
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(dl)
			defer conn.SetDeadline(time.Time{})
		}
		return login(conn, creds)
	}
}

func login(conn net.Conn, creds Credentials) error {
	w := bufio.NewWriter(conn)
	// Only the +OK lines of the commands sent are read, so nothing after
	// them is consumed: the reader is dropped with the login.
	r := bufio.NewReaderSize(conn, 512)
	first := true
	do := func(args ...string) error {
		WriteCommand(w, args...)
		if err := w.Flush(); err != nil {
			if first { // the first write on the connection
				err = wire.LastWords(conn, r, err)
			}
			return err
		}
		first = false
		l, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if l = bytes.TrimRight(l, "\r\n"); string(l) == "+OK" {
			return nil
		}
		if _, err = Header(l, '+'); err == nil {
			err = fmt.Errorf("%w: unexpected reply %q", wire.ErrProtocol, l)
		}
		return err
	}
	refused := func(cmd string, err error) error {
		var re Error
		if errors.As(err, &re) {
			return fmt.Errorf("%w: redis %s: %w", ErrLogin, cmd, Error(strings.ReplaceAll(string(re), creds.Password, "[redacted]")))
		}
		return fmt.Errorf("redis %s: %w", cmd, err)
	}
	if creds.Password != "" {
		user := creds.Username
		if user == "" {
			user = "default"
		}
		err := do("AUTH", user, creds.Password)
		var re Error
		if creds.Username == "" && errors.As(err, &re) && !isAuthReply(string(re)) {
			err = do("AUTH", creds.Password) // "wrong number of arguments": Redis < 6
		}
		if err != nil {
			return refused("AUTH", err)
		}
	}
	if creds.DB != 0 {
		if err := do("SELECT", strconv.Itoa(creds.DB)); err != nil {
			return refused("SELECT", err)
		}
	}
	return nil
}

// isAuthReply reports whether an error reply refuses credentials, as
// go-redis's IsAuthError reads one.
func isAuthReply(s string) bool {
	return strings.HasPrefix(s, "NOAUTH ") || strings.HasPrefix(s, "WRONGPASS ") || strings.Contains(s, "unauthenticated")
}
