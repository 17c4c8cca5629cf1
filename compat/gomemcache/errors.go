package gomemcache

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/client"
	wirememcache "github.com/shardcache/shardcache/internal/wire/memcache"
	"github.com/shardcache/shardcache/ring"
)

// The errors a Client returns read as gomemcache's: programs and tests
// written for gomemcache compare them with == (the sentinels) or match
// their text ("client error", "object too large"), and both must keep
// working. Where gomemcache relays a line of the server, the text is the
// one it gives that line in that method (memcache.go: parseGetResponse,
// populateOne, writeExpectf, incrDecr, touchFromAddr, flushAllFromAddr,
// ping); the error then also wraps the client's, a *client.NodeError
// naming the node, so that errors.Is and errors.As reach both.

// verb names a Client method for the text gomemcache gives an answer it
// did not expect in it: its command (a store's is its StoreOp's String,
// "set" to "cas", as gomemcache's), or "get", "delete_all".
type verb string

const (
	vGet       verb = "get" // Get, GetMulti, GetAndTouch: parseGetResponse
	vDelete    verb = "delete"
	vDeleteAll verb = "delete_all" // gomemcache's DeleteAll is writeExpectf of flush_all
	vFlushAll  verb = "flush_all"
	vTouch     verb = "touch"
	vPing      verb = "ping"
	vIncr      verb = "incr"
	vDecr      verb = "decr"
)

// mcError is an error with gomemcache's text, wrapping gomemcache's
// sentinel or typed error where its would be one, and the client's.
type mcError struct {
	msg  string
	errs []error
}

func (e *mcError) Error() string   { return e.msg }
func (e *mcError) Unwrap() []error { return e.errs }

// tooLarge is memcached's answer to a value over its item limit, which
// the client refuses before sending it (client.ErrValueTooLarge):
// gomemcache sends the value and relays this line.
const tooLarge = "SERVER_ERROR object too large for cache"

// mcErr maps the client's error from method v to gomemcache's.
//
// The sentinels come back bare, so that err == memcache.ErrCacheMiss holds
// as with gomemcache; they are not also the client's sentinels, since one
// value cannot be both. An error line of the server (CLIENT_ERROR ...,
// SERVER_ERROR ..., ERROR) gets gomemcache's text for it in v, and a
// SERVER_ERROR is also memcache.ErrServerError (which gomemcache defines
// for that but never returns). A connection that timed out is also a
// *memcache.ConnectTimeoutError. Other errors, the network's and a
// refused login included, are the client's, as gomemcache returns the
// network's own.
func mcErr(v verb, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrCacheMiss):
		return memcache.ErrCacheMiss
	case errors.Is(err, client.ErrNotStored):
		return memcache.ErrNotStored
	case errors.Is(err, client.ErrCASConflict):
		return memcache.ErrCASConflict
	case errors.Is(err, client.ErrMalformedKey):
		return memcache.ErrMalformedKey
	}
	var se *wirememcache.ServerError
	switch {
	case errors.Is(err, client.ErrAuth):
		return err // gomemcache has no login, and the client's text says what failed
	case errors.As(err, &se):
		line := se.Kind
		if se.Msg != "" {
			line += " " + se.Msg
		}
		return lineError(v, line, err)
	case errors.Is(err, client.ErrValueTooLarge):
		return lineError(v, tooLarge, err)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" && op.Timeout() && op.Addr != nil {
		cte := &memcache.ConnectTimeoutError{Addr: op.Addr}
		return &mcError{msg: cte.Error(), errs: []error{cte, err}}
	}
	return err
}

// lineError is err, an answer line (without its CR LF) that method v did
// not expect, as gomemcache reports it.
func lineError(v verb, line string, err error) error {
	e := &mcError{msg: unexpected(v, line)}
	if strings.HasPrefix(line, "SERVER_ERROR") {
		e.errs = append(e.errs, memcache.ErrServerError)
	}
	if v == vIncr || v == vDecr {
		if msg, ok := strings.CutPrefix(line, "CLIENT_ERROR "); ok {
			e.msg = "memcache: client error: " + msg
		} else {
			// gomemcache reads any other line as the new value: the
			// error is strconv's, and errors.As finds it as there.
			_, perr := strconv.ParseUint(line, 10, 64)
			e.msg = perr.Error()
			e.errs = append(e.errs, perr)
		}
	}
	e.errs = append(e.errs, err)
	return e
}

// unexpected is gomemcache's text for line, an answer method v did not
// expect.
func unexpected(v verb, line string) string {
	crlf := line + "\r\n" // gomemcache quotes the line as read
	switch v {
	case vGet:
		return fmt.Sprintf("memcache: unexpected line in get response: %q", crlf)
	case vDelete, vDeleteAll:
		return fmt.Sprintf("memcache: unexpected response line: %q", crlf)
	case vTouch, vFlushAll, vPing:
		return fmt.Sprintf("memcache: unexpected response line from %s: %q", v, crlf)
	}
	return fmt.Sprintf("memcache: unexpected response line from %q: %q", string(v), crlf)
}

// noServers is err, from New or Reshard, as memcache.ErrNoServers when
// there were no nodes: gomemcache's calls return it then.
func noServers(err error) error {
	if errors.Is(err, ring.ErrNoNodes) {
		return &mcError{msg: memcache.ErrNoServers.Error(), errs: []error{memcache.ErrNoServers, err}}
	}
	return err
}
