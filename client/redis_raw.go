package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis node whose go-redis client is the package's own (no
// NewRedisClient hook) sends the first round of a multi-get, its MGETs,
// over raw connections of the client's own, in the
// two halves Memcached's multi-gets use (mcgets.go): every node's MGET is
// written first, then each answer is read in turn on the caller's
// goroutine. go-redis has no way to write a command before reading the
// answer of another, so its per-node MGETs need a goroutine each, and its
// answer is a []any of strings made for the caller to convert again.
//
// A hook's client keeps every command on go-redis, so that the hooks it
// installed (tracing, metrics) see them all. With AutoPipeline an MGET that
// finds other calls to its node under way shares the auto-pipeliner's next
// round trip instead (autopipeline.go); one sent over a raw connection
// counts as a call under way meanwhile.
//
// The raw connections speak RESP2 and carry no client-side caching: an
// MGET never goes through the near cache anyway (nearcache.go).

// respError is an error reply of a Redis server: its text, without the
// leading '-'. It is a redis.Error, as go-redis's own are; authErr, given
// it, sees a refusal (NOAUTH, WRONGPASS, NOPERM) by its text, as it does
// go-redis's.
type respError string

func (e respError) Error() string { return string(e) }

// RedisError marks respError as a redis.Error.
func (respError) RedisError() {}

// mgetSend sends "MGET <keys...>" on a raw connection of the pool, bounded
// by ctx and the pool's timeout. Its answer is the returned mcGets's recv,
// which reads it with readMget.
func (p *rawConns) mgetSend(ctx context.Context, keys []string) mcGets {
	return p.send(ctx, keys, true)
}

// writeMget writes "MGET <keys...>" as a RESP array of bulk strings.
func writeMget(w *bufio.Writer, keys []string) {
	writeArray(w, len(keys)+1)
	writeBulk(w, "MGET")
	for _, k := range keys {
		writeBulk(w, k)
	}
}

// writeCommand writes a command as a RESP array of bulk strings.
func writeCommand(w *bufio.Writer, args ...string) {
	writeArray(w, len(args))
	for _, a := range args {
		writeBulk(w, a)
	}
}

// writeArray writes the header of a RESP array of n elements.
func writeArray(w *bufio.Writer, n int) {
	var num [20]byte
	w.WriteByte('*')
	w.Write(strconv.AppendInt(num[:0], int64(n), 10))
	w.WriteString("\r\n")
}

// writeBulk writes s as a RESP bulk string.
func writeBulk(w *bufio.Writer, s string) {
	var num [20]byte
	w.WriteByte('$')
	w.Write(strconv.AppendInt(num[:0], int64(len(s)), 10))
	w.WriteString("\r\n")
	w.WriteString(s)
	w.WriteString("\r\n")
}

// readMget reads the answer to "MGET <keys...>": an array of one bulk
// string per key, nil for a miss. It fills out[i] for keys[i] and returns
// the number of keys found; values are cut from shared buffers, as
// readGets does.
func (rc *rawConn) readMget(keys []string, out []answer) (int, error) {
	l, err := rc.line()
	if err != nil {
		return 0, err
	}
	n, err := respHeader(l, '*')
	if err != nil {
		return 0, err
	}
	if n != len(keys) {
		return 0, fmt.Errorf("shardcache: MGET of %d keys answered %d values", len(keys), n)
	}
	a := arena{left: len(keys)}
	found := 0
	for i := range keys {
		if l, err = rc.line(); err != nil {
			return found, err
		}
		size, err := respHeader(l, '$')
		if err != nil {
			return found, err
		}
		if size < 0 { // nil: a miss, or a key of another type
			continue
		}
		if out[i].value, err = a.read(rc.r, size); err != nil {
			return found, fmt.Errorf("shardcache: redis MGET: value of %q: %w", keys[i], err)
		}
		out[i].found = true
		found++
	}
	return found, nil
}

// respHeader parses the line of a RESP array ('*') or bulk string ('$'):
// its length, -1 for nil (RESP3's "_" too). An error reply is a respError;
// any other line is a protocol error.
func respHeader(l []byte, kind byte) (int, error) {
	switch {
	case len(l) > 0 && l[0] == '-':
		return 0, respError(l[1:])
	case len(l) == 1 && l[0] == '_':
		return -1, nil
	case len(l) < 2 || l[0] != kind:
		return 0, fmt.Errorf("shardcache: redis: unexpected reply %q", l)
	}
	n, err := strconv.Atoi(string(l[1:]))
	if err != nil || n < -1 {
		return 0, fmt.Errorf("shardcache: redis: bad length in %q", l)
	}
	return n, nil
}

// getsSend sends the node's MGET of keys on its raw connections.
func (n redisNode) getsSend(ctx context.Context, keys []string) mcGets {
	return n.raw.mgetSend(ctx, keys)
}

// reserve takes a place for an MGET on the node's raw connections, if it
// has them and fewer than PoolSize calls are under way there; with
// AutoPipeline the node is busy until received, so that MGETs that come
// meanwhile share the auto-pipeliner's round trips.
func (n redisNode) reserve() bool {
	if n.raw == nil || !n.raw.reserve() {
		return false
	}
	if n.ap != nil {
		n.ap.calls.Add(1)
	}
	return true
}

// sendIdle sends the node's MGET of keys on an idle raw connection, if
// any.
func (n redisNode) sendIdle(ctx context.Context, keys []string) (mcGets, bool) {
	return n.raw.sendIdle(ctx, keys, true)
}

// received ends reserve's busy spell of the auto-pipeliner.
func (n redisNode) received() {
	if n.ap != nil {
		n.ap.calls.Add(-1)
	}
}

// redisLogin returns dial followed by the login go-redis runs on its own
// connections, for the raw ones: AUTH with the node's Username (Redis's
// "default" when empty) and Password, then SELECT of its DB, each answered
// +OK. dial itself is bounded by the context, as the login is.
func redisLogin(dial func(ctx context.Context, network, addr string) (net.Conn, error), creds Credentials) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if creds.Password == "" && creds.DB == 0 {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := loginRedis(ctx, conn, creds); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// loginRedis sends AUTH and SELECT on conn, as creds say, and reads their
// answers. With no Username, AUTH names "default", as go-redis's HELLO does,
// so that a server whose default user needs no password accepts the
// client's; a server older than Redis 6, which knows no users, is asked
// again with the password alone. A refusal is ErrAuth (or ErrNoPerm), and
// its text has no password.
func loginRedis(ctx context.Context, conn net.Conn, creds Credentials) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	w := bufio.NewWriter(conn)
	// Only the +OK lines of the commands sent are read, so nothing after
	// them is consumed: the reader is dropped with the login.
	r := bufio.NewReaderSize(conn, 512)
	first := true
	do := func(args ...string) error {
		writeCommand(w, args...)
		if err := w.Flush(); err != nil {
			if first { // the first write on the connection
				err = lastWords(conn, r, err)
			}
			return authErr(err)
		}
		first = false
		l, err := r.ReadSlice('\n')
		if err != nil {
			return authErr(err)
		}
		if l = bytes.TrimRight(l, "\r\n"); string(l) == "+OK" {
			return nil
		}
		if _, err = respHeader(l, '+'); err == nil {
			err = fmt.Errorf("shardcache: redis: unexpected reply %q", l)
		}
		return err
	}
	refused := func(cmd string, err error) error {
		return fmt.Errorf("redis %s: %w", cmd, authErr(redact(err, creds.Password)))
	}
	if creds.Password != "" {
		user := creds.Username
		if user == "" {
			user = "default"
		}
		err := do("AUTH", user, creds.Password)
		var re respError
		if creds.Username == "" && errors.As(err, &re) && !redis.IsAuthError(re) {
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
