package memcache

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/shardcache/shardcache/internal/wire"
)

// StoreOp is a storage command.
type StoreOp uint8

// The storage commands.
const (
	Set     StoreOp = iota // unconditional
	Add                    // only if absent, else ErrNotStored
	Replace                // only if present, else ErrNotStored
	Append                 // after the present value, else ErrNotStored
	Prepend                // before the present value, else ErrNotStored
	CAS                    // only if unchanged since Item.CAS was read: ErrCASConflict, ErrCacheMiss if gone
)

var storeCmds = [...]string{"set", "add", "replace", "append", "prepend", "cas"}

// String returns the command's name.
func (op StoreOp) String() string {
	if int(op) < len(storeCmds) {
		return storeCmds[op]
	}
	return "StoreOp(" + strconv.Itoa(int(op)) + ")"
}

// maxRelative is the longest TTL memcached reads as relative seconds; a
// larger expiration is a Unix time.
const maxRelative = 30 * 24 * time.Hour

// Expiration converts a TTL to memcached's expiration field: 0 for none
// (ttl <= 0), whole seconds rounded up (a sub-second TTL must not become
// 0, "never"), or an absolute Unix time past 30 days.
func Expiration(ttl time.Duration) int32 {
	switch {
	case ttl <= 0:
		return 0
	case ttl > maxRelative:
		return int32(time.Now().Add(ttl).Unix())
	default:
		return int32((ttl + time.Second - 1) / time.Second)
	}
}

// Store runs op for it: its key, value, flags, expiration and, for CAS,
// its CAS id. A value too large for the server is ErrValueTooLarge,
// before any I/O.
func (c *Client) Store(ctx context.Context, op StoreOp, it Item) error {
	if op > CAS {
		return fmt.Errorf("shardcache/memcache: unknown %v", op)
	}
	if err := CheckKey(it.Key); err != nil {
		return err
	}
	if err := c.CheckValue(ctx, it.Key, it.Flags, len(it.Value)); err != nil {
		return err
	}
	for retried := false; ; retried = true {
		call, err := c.pool.Begin(ctx)
		if err != nil {
			return err
		}
		writeStore(call.W, op, &it)
		if err = call.Flush(); err == nil {
			var l []byte
			if l, err = call.Line(); err == nil {
				err = storeReply(op, l)
			} else if !retried && call.Stale(err) {
				continue
			}
		}
		return end(call, err, true)
	}
}

// writeStore writes "<op> <key> <flags> <exptime> <bytes> [<cas>]" and
// the data block.
func writeStore(w *bufio.Writer, op StoreOp, it *Item) {
	w.WriteString(storeCmds[op])
	w.WriteByte(' ')
	w.WriteString(it.Key)
	b := w.AvailableBuffer()
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(it.Flags), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(it.Exptime), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(it.Value)), 10)
	if op == CAS {
		b = append(b, ' ')
		b = strconv.AppendUint(b, it.CAS, 10)
	}
	b = append(b, '\r', '\n')
	w.Write(b)
	w.Write(it.Value)
	w.WriteString("\r\n")
}

// storeReply is the outcome a storage command's reply line l means: nil,
// a sentinel, a *ServerError, or a protocol error.
func storeReply(op StoreOp, l []byte) error {
	switch string(l) {
	case "STORED":
		return nil
	case "NOT_STORED":
		return ErrNotStored
	case "EXISTS":
		return ErrCASConflict
	case "NOT_FOUND":
		return ErrCacheMiss
	}
	if se, ok := parseError(storeCmds[op], l); ok {
		return se
	}
	return protoErr(storeCmds[op], l)
}

// StoreMulti runs op for every item on one connection, pipelined: one
// round trip, with results[i] the outcome of items[i] (len(results) ==
// len(items)): nil when stored, ErrNotStored, ErrCASConflict, ErrCacheMiss,
// ErrValueTooLarge (checked before any I/O: that item is not sent), a
// malformed key's error (not sent), or the server's *ServerError. The
// error returned is the whole's (I/O, protocol, context): the items
// without a result then have that error too.
func (c *Client) StoreMulti(ctx context.Context, op StoreOp, items []Item, results []error) error {
	if op > CAS {
		return fmt.Errorf("shardcache/memcache: unknown %v", op)
	}
	if len(results) != len(items) {
		return fmt.Errorf("shardcache/memcache: %d results for %d items", len(results), len(items))
	}
	sent := 0
	for i := range items {
		it := &items[i]
		results[i] = CheckKey(it.Key)
		if results[i] == nil {
			results[i] = c.CheckValue(ctx, it.Key, it.Flags, len(it.Value))
		}
		if results[i] == nil {
			sent++
		} else if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if sent == 0 {
		return nil
	}
	todo := make([]bool, len(items)) // sent, reply not read yet
	for retried := false; ; retried = true {
		call, err := c.pool.Begin(ctx)
		if err != nil {
			fillErr(results, err, func(i int) bool { return results[i] == nil })
			return err
		}
		answered := false
		for next := 0; next < len(items) && err == nil; {
			// A window of the stores, sent at once, then its replies.
			for sent := 0; next < len(items) && sent < c.window; next++ {
				if results[next] == nil {
					writeStore(call.W, op, &items[next])
					todo[next] = true
					sent++
				}
			}
			if err = call.Flush(); err == nil {
				err = c.storeReplies(call, op, items, results, todo, &answered)
			}
		}
		if !answered && !retried && call.Stale(err) {
			continue
		}
		err = end(call, err, true)
		if err != nil {
			fillErr(results, err, func(i int) bool { return todo[i] })
		}
		return err
	}
}

// storeReplies reads the replies of the stores todo marks into results,
// setting answered once one is read.
func (c *Client) storeReplies(call *wire.Call, op StoreOp, items []Item, results []error, todo []bool, answered *bool) error {
	for i := range items {
		if !todo[i] {
			continue
		}
		l, err := call.Line()
		if err != nil {
			return err
		}
		*answered = true
		r := storeReply(op, l)
		if !inStep(r, true) {
			return r
		}
		results[i], todo[i] = r, false
	}
	return nil
}

// fillErr sets results[i] to err where pick(i).
func fillErr(results []error, err error, pick func(int) bool) {
	for i := range results {
		if pick(i) {
			results[i] = err
		}
	}
}

// Delete deletes key and reports whether it was there.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	if err := CheckKey(key); err != nil {
		return false, err
	}
	var found bool
	err := c.simple(ctx, "delete", func(w *bufio.Writer) {
		w.WriteString("delete ")
		w.WriteString(key)
		w.WriteString("\r\n")
	}, func(l []byte) error {
		var err error
		found, err = deleteReply(l)
		return err
	})
	return found, err
}

func deleteReply(l []byte) (bool, error) {
	switch string(l) {
	case "DELETED":
		return true, nil
	case "NOT_FOUND":
		return false, nil
	}
	if se, ok := parseError("delete", l); ok {
		return false, se
	}
	return false, protoErr("delete", l)
}

// DeleteMulti deletes every key on one connection, pipelined, and sets
// found[i] (when found is not nil) to whether keys[i] was there.
func (c *Client) DeleteMulti(ctx context.Context, keys []string, found []bool) error {
	if found != nil && len(found) != len(keys) {
		return fmt.Errorf("shardcache/memcache: %d results for %d keys", len(found), len(keys))
	}
	if len(keys) == 0 {
		return nil
	}
	if err := checkKeys(keys); err != nil {
		return err
	}
	if len(keys) > c.window { // see Client.window
		var first error
		for i := 0; i < len(keys); i += c.window {
			j := min(i+c.window, len(keys))
			var f []bool
			if found != nil {
				f = found[i:j]
			}
			err := c.DeleteMulti(ctx, keys[i:j], f)
			var se *ServerError
			switch {
			case errors.As(err, &se) && first == nil:
				first = err // a refusal, in step: the others go on
			case err != nil && !errors.As(err, &se):
				return err
			}
		}
		return first
	}
	for retried := false; ; retried = true {
		call, err := c.pool.Begin(ctx)
		if err != nil {
			return err
		}
		answered, first, err := deleteAll(call, keys, found)
		if !answered && !retried && call.Stale(err) {
			continue
		}
		if err = end(call, err, false); err != nil {
			return err
		}
		return first
	}
}

// deleteAll sends the deletes of keys on call and reads their answers into
// found (when not nil): answered once one is read, first the first
// server's refusal (in step), err what broke the stream.
func deleteAll(call *wire.Call, keys []string, found []bool) (answered bool, first, err error) {
	for _, k := range keys {
		call.W.WriteString("delete ")
		call.W.WriteString(k)
		call.W.WriteString("\r\n")
	}
	if err = call.Flush(); err != nil {
		return false, nil, err
	}
	for i := range keys {
		l, err := call.Line()
		if err != nil {
			return answered, first, err
		}
		answered = true
		f, r := deleteReply(l)
		if r != nil && !inStep(r, false) {
			return answered, first, r
		}
		if r != nil && first == nil {
			first = r
		}
		if found != nil {
			found[i] = f
		}
	}
	return answered, first, nil
}

// IncrDecr adds delta to (or with decr subtracts it from, stopping at 0)
// key's unsigned decimal value and returns the result: ErrCacheMiss when
// the key is absent, the server's CLIENT_ERROR when its value is no
// number.
func (c *Client) IncrDecr(ctx context.Context, key string, delta uint64, decr bool) (uint64, error) {
	if err := CheckKey(key); err != nil {
		return 0, err
	}
	cmd := "incr"
	if decr {
		cmd = "decr"
	}
	var n uint64
	err := c.simple(ctx, cmd, func(w *bufio.Writer) {
		w.WriteString(cmd)
		w.WriteByte(' ')
		w.WriteString(key)
		w.WriteByte(' ')
		w.Write(strconv.AppendUint(w.AvailableBuffer(), delta, 10))
		w.WriteString("\r\n")
	}, func(l []byte) error {
		if string(l) == "NOT_FOUND" {
			return ErrCacheMiss
		}
		if v, ok := parseUint(l, 64); ok {
			n = v
			return nil
		}
		if se, ok := parseError(cmd, l); ok {
			return se
		}
		return protoErr(cmd, l)
	})
	return n, err
}

// Touch sets key's expiration, or returns ErrCacheMiss.
func (c *Client) Touch(ctx context.Context, key string, exptime int32) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return c.simple(ctx, "touch", func(w *bufio.Writer) {
		w.WriteString("touch ")
		w.WriteString(key)
		w.WriteByte(' ')
		w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(exptime), 10))
		w.WriteString("\r\n")
	}, func(l []byte) error {
		switch string(l) {
		case "TOUCHED":
			return nil
		case "NOT_FOUND":
			return ErrCacheMiss
		}
		return lineErr("touch", l)
	})
}

// FlushAll deletes every item of the server.
func (c *Client) FlushAll(ctx context.Context) error {
	return c.simple(ctx, "flush_all", func(w *bufio.Writer) { w.WriteString("flush_all\r\n") }, func(l []byte) error {
		if string(l) == "OK" {
			return nil
		}
		return lineErr("flush_all", l)
	})
}

// Version returns the server's version ("1.6.18"): the cheapest command,
// a probe's.
func (c *Client) Version(ctx context.Context) (string, error) {
	var v string
	err := c.simple(ctx, "version", func(w *bufio.Writer) { w.WriteString("version\r\n") }, func(l []byte) error {
		if rest, ok := bytes.CutPrefix(l, []byte("VERSION ")); ok {
			v = string(rest)
			return nil
		}
		return lineErr("version", l)
	})
	return v, err
}

// lineErr is the error of an unexpected reply line l to cmd: the server's
// error line, or a protocol error.
func lineErr(cmd string, l []byte) error {
	if se, ok := parseError(cmd, l); ok {
		return se
	}
	return protoErr(cmd, l)
}

// simple runs a command of one request line (write) and one reply line
// (read, which returns its outcome).
func (c *Client) simple(ctx context.Context, cmd string, write func(*bufio.Writer), read func(l []byte) error) error {
	for retried := false; ; retried = true {
		call, err := c.pool.Begin(ctx)
		if err != nil {
			return err
		}
		write(call.W)
		if err = call.Flush(); err == nil {
			var l []byte
			if l, err = call.Line(); err == nil {
				err = read(l)
			} else if !retried && call.Stale(err) {
				continue
			}
		}
		return end(call, err, false)
	}
}
