package memcache

import (
	"bytes"
	"errors"
	"fmt"
)

// Errors of the protocol, for errors.Is. An answer that carries one of
// them kept the connection in step, and it went back to the pool.
var (
	// ErrCacheMiss means the key is not on the server.
	ErrCacheMiss = errors.New("shardcache/memcache: cache miss")
	// ErrNotStored means a conditional store's condition failed (add of a
	// present key, replace, append or prepend of an absent one).
	ErrNotStored = errors.New("shardcache/memcache: item not stored")
	// ErrCASConflict means a compare-and-swap found the item changed since
	// the read of its CAS id (EXISTS).
	ErrCASConflict = errors.New("shardcache/memcache: compare-and-swap conflict")
	// ErrNoMeta means the server does not know the meta commands
	// (memcached older than 1.6, or a proxy): it answered ERROR.
	ErrNoMeta = errors.New("shardcache/memcache: server without meta commands")
	// ErrBusy means the server cannot list its keys for now, and did not
	// within Metadump's bounds: its LRU crawler is busy with another
	// listing (BUSY), or its hash table is expanding (stats
	// hash_is_expanding 1, or from memcached 1.6.28 "ERROR locked").
	ErrBusy = errors.New("shardcache/memcache: crawler busy")
	// ErrNoMetadump means the server cannot list its keys (lru_crawler
	// metadump: memcached 1.4.31 and later, not proxies).
	ErrNoMetadump = errors.New("shardcache/memcache: server cannot list its keys")
	// ErrValueTooLarge means a value longer than the server's item limit
	// allows for its key: rejected before any I/O where the limit is known
	// (Client.MaxValue), or refused by the server ("SERVER_ERROR object too
	// large for cache").
	ErrValueTooLarge = errors.New("shardcache/memcache: value too large")
	// ErrAuth means the server refused the login, or asks for one
	// ("CLIENT_ERROR unauthenticated").
	ErrAuth = errors.New("shardcache/memcache: authentication failed")
	// ErrMalformedKey means a key the protocol cannot carry: empty, longer
	// than 250 bytes, or with a space or a control character. It is
	// refused before any I/O.
	ErrMalformedKey = errors.New("shardcache/memcache: malformed key")
	// ErrOpaque means a meta request set its own opaque token in a
	// pipeline that tags each request with one (see Client.Meta).
	ErrOpaque = errors.New("shardcache/memcache: opaque token in a quiet pipeline")
)

// ServerError is an error line the server answered: ERROR, CLIENT_ERROR
// or SERVER_ERROR, with the server's text. Those the package knows are
// also its sentinels (errors.Is(err, ErrValueTooLarge), ...).
type ServerError struct {
	Kind string // "ERROR", "CLIENT_ERROR" or "SERVER_ERROR"
	Msg  string // the server's text after Kind, if any
	// Cmd is the command answered, for the message.
	Cmd string
	is  error // the sentinel the line means, if any
}

// Error returns the line with the command answered, noting when it means
// the server requires authentication.
func (e *ServerError) Error() string {
	s := "shardcache/memcache: " + e.Cmd + ": "
	if e.is == ErrAuth {
		s += "the server requires authentication: "
	}
	s += e.Kind
	if e.Msg != "" {
		s += " " + e.Msg
	}
	return s
}

// Is reports whether the line means target: ErrValueTooLarge for "object
// too large", ErrAuth for "unauthenticated", ErrNoMeta for a bare ERROR to
// a meta command.
func (e *ServerError) Is(target error) bool { return e.is != nil && target == e.is }

// parseError returns the error line l means, and whether l is one: ERROR,
// CLIENT_ERROR ... or SERVER_ERROR ... .
func parseError(cmd string, l []byte) (*ServerError, bool) {
	word, rest := nextField(l) // the kind, then the server's text, if any
	var kind string
	switch string(word) {
	case "ERROR":
		kind = "ERROR"
	case "CLIENT_ERROR":
		kind = "CLIENT_ERROR"
	case "SERVER_ERROR":
		kind = "SERVER_ERROR"
	default:
		return nil, false
	}
	e := &ServerError{Kind: kind, Msg: string(rest), Cmd: cmd}
	switch {
	case kind == "SERVER_ERROR" && bytes.HasPrefix(rest, []byte("object too large")):
		e.is = ErrValueTooLarge
	case kind == "CLIENT_ERROR" && bytes.HasPrefix(rest, []byte("unauthenticated")):
		e.is = ErrAuth
	case kind == "ERROR" && len(cmd) == 2 && cmd[0] == 'm': // mg, ms, md, ma, mn
		e.is = ErrNoMeta
	}
	return e, true
}

// protoErr is an answer the client cannot read: the stream is out of step.
func protoErr(cmd string, l []byte) error {
	const max = 128
	if len(l) > max {
		l = l[:max]
	}
	return fmt.Errorf("%w: memcached %s: unexpected answer %q", errProtocol, cmd, l)
}
