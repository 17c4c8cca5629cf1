package memcache

import (
	"bufio"
	"context"
	"fmt"
	"strconv"

	"github.com/shardcache/shardcache/internal/wire"
)

// Get reads key's item with "gets" (flags and CAS id), or returns
// ErrCacheMiss. It runs on the caller's goroutine, whatever its context
// (which ends the call through the connection's deadline), and allocates
// the value alone, exactly its size. A pooled connection the server closed
// while it was idle (a restart) fails the first read: the idle ones are
// closed too and the read is asked again, once, on a new connection.
func (c *Client) Get(ctx context.Context, key string) (Item, error) {
	return c.get(ctx, "gets", 0, key)
}

// GetAndTouch reads key's item and sets its expiration in one command
// ("gats": gat with the CAS id), or returns ErrCacheMiss.
func (c *Client) GetAndTouch(ctx context.Context, key string, exptime int32) (Item, error) {
	return c.get(ctx, "gats", exptime, key)
}

func (c *Client) get(ctx context.Context, cmd string, exptime int32, key string) (Item, error) {
	if err := CheckKey(key); err != nil {
		return Item{}, err
	}
	keys := [1]string{key}
	var out [1]wire.Answer
	for retried := false; ; retried = true {
		call, err := c.pool.Begin(ctx)
		if err != nil {
			return Item{}, err
		}
		writeRetrieval(call.W, cmd, exptime, keys[:])
		found := 0
		if err = call.Flush(); err == nil {
			found, err = readGets(call.R, keys[:], out[:])
		}
		if err != nil && found == 0 && !retried && call.Pooled() && wire.ClosedByPeer(err) && ctx.Err() == nil {
			call.Abandon()
			c.pool.CloseIdle()
			out[0] = wire.Answer{}
			continue
		}
		if err == nil && found == 0 {
			err = ErrCacheMiss
		}
		if err = end(call, err, false); err != nil {
			return Item{}, err
		}
		a := &out[0]
		return Item{Key: key, Value: a.Value, Flags: a.Flags, CAS: a.CAS}, nil
	}
}

// writeRetrieval writes "<cmd> [<exptime>] <keys...>": gets, or gats with
// its expiration.
func writeRetrieval(w *bufio.Writer, cmd string, exptime int32, keys []string) {
	w.WriteString(cmd)
	if cmd == "gats" || cmd == "gat" {
		w.WriteByte(' ')
		w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(exptime), 10))
	}
	for _, k := range keys {
		w.WriteByte(' ')
		w.WriteString(k)
	}
	w.WriteString("\r\n")
}

// readGets reads the answer to a retrieval of keys: a "VALUE <key>
// <flags> <bytes> <cas>" line and the value for every key present, then
// "END". It fills out[i] for keys[i] and returns the number of keys found,
// even beside an error. Values are cut from one arena; out is cleared
// first.
func readGets(r *bufio.Reader, keys []string, out []wire.Answer) (int, error) {
	clear(out)
	a := wire.NewArena(len(keys))
	found, next := 0, 0
	for {
		l, err := line(r)
		if err != nil {
			return found, err
		}
		if len(l) == 3 && string(l) == "END" {
			return found, nil
		}
		v, err := ParseValueLine(l)
		if err != nil {
			if se, ok := parseError("gets", l); ok {
				return found, se
			}
			return found, err
		}
		i := matchKey(keys, out, next, v.Key)
		if i < 0 {
			return found, fmt.Errorf("%w: memcached gets: unexpected key in %q", errProtocol, truncLine(l))
		}
		if i >= next {
			next = i + 1
		}
		val, err := a.Read(r, v.Size)
		if err != nil {
			return found, fmt.Errorf("memcached gets: value of %q: %w", truncKey(keys[i]), err)
		}
		o := &out[i]
		o.Value, o.Flags, o.CAS, o.Found = val, v.Flags, v.CAS, true
		found++
	}
}

// matchKey returns the index of the key an answer's value line names:
// memcached answers in the order asked, skipping misses, so the search
// starts after the last one matched; another server or a proxy may not,
// and then the first of its name not found yet (a key may be asked for
// twice) is taken. -1: no such key, or every one of that name answered.
func matchKey(keys []string, out []wire.Answer, next int, key []byte) int {
	for i := next; i < len(keys); i++ {
		if keys[i] == string(key) && !out[i].Found {
			return i
		}
	}
	for i := 0; i < next && i < len(keys); i++ {
		if keys[i] == string(key) && !out[i].Found {
			return i
		}
	}
	return -1
}

func truncLine(l []byte) []byte {
	if len(l) > 128 {
		return l[:128]
	}
	return l
}

// gets is the wire.Multi of "gets <keys...>", for the pool's Send,
// SendIdle and TrySend; its keys must pass CheckKey first.
type gets struct{}

func (gets) WriteMulti(w *bufio.Writer, keys []string) { writeRetrieval(w, "gets", 0, keys) }

func (gets) ReadMulti(c *wire.Conn, keys []string, out []wire.Answer) (int, error) {
	return readGets(c.R, keys, out)
}

// Pending is a multi-get sent, its answer not yet read: a value, to be
// received once.
type Pending struct {
	p   *wire.Pending
	err error // a key refused before the send
}

// Send sends "gets <keys...>" and returns before the answer, waiting for
// a connection as Get does: a caller sends to every server first, then
// receives each answer in turn (Pending.Recv). Every Pending must be
// received. A malformed key fails Recv, and nothing is sent.
func (c *Client) Send(ctx context.Context, keys []string) Pending {
	if len(keys) == 0 {
		return Pending{} // nothing to ask
	}
	if err := checkKeys(keys); err != nil {
		return Pending{err: err}
	}
	return Pending{p: c.pool.Send(ctx, gets{}, keys)}
}

// SendIdle is Send on an idle connection; false, nothing sent, when the
// pool has none.
func (c *Client) SendIdle(ctx context.Context, keys []string) (Pending, bool) {
	if err := checkKeys(keys); err != nil {
		return Pending{err: err}, true
	}
	p, ok := c.pool.SendIdle(ctx, gets{}, keys)
	if !ok {
		return Pending{}, false
	}
	return Pending{p: p}, true
}

// TrySend is Send without waiting: false, nothing sent, when every
// connection of the budget is busy.
func (c *Client) TrySend(ctx context.Context, keys []string) (Pending, bool) {
	if err := checkKeys(keys); err != nil {
		return Pending{err: err}, true
	}
	p, ok := c.pool.TrySend(ctx, gets{}, keys)
	if !ok {
		return Pending{}, false
	}
	return Pending{p: p}, true
}

// Recv reads the answer into out, one Answer per key in order, and
// returns how many were found (see wire.Pending.Recv for its time).
func (g Pending) Recv(out []wire.Answer) (int, error) {
	if g.err != nil || g.p == nil {
		return 0, g.err
	}
	return g.p.Recv(out)
}

// GetMulti reads keys' items in one "gets" (Send, then Recv), into out,
// one Answer per key in order; it returns how many were found.
func (c *Client) GetMulti(ctx context.Context, keys []string, out []wire.Answer) (int, error) {
	return c.Send(ctx, keys).Recv(out)
}
