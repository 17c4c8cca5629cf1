package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shardcache/shardcache/internal/loading"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/ring"
)

// Errors returned by the client. Compare them with errors.Is: most arrive
// wrapped in a *NodeError that names the node.
var (
	// ErrCacheMiss means the key is not in the cache. Get returns it bare
	// (a miss is routine and must not cost an allocation), whatever the
	// backend: redis.Nil and memcache.ErrCacheMiss both map to it.
	ErrCacheMiss = node.ErrCacheMiss
	// ErrNotStored means Add found the key already present.
	ErrNotStored = node.ErrNotStored
	// ErrMalformedKey means a key was rejected before any I/O: empty, too
	// long, or (Memcached) holding spaces or control characters.
	ErrMalformedKey = errors.New("shardcache: malformed key")
	// ErrBadTTL means a negative TTL.
	ErrBadTTL = errors.New("shardcache: negative TTL")
	// ErrBadOptions means Options that cannot work, such as an unknown
	// backend or both Nodes and Placement.
	ErrBadOptions = errors.New("shardcache: bad options")
	// ErrClosed means the client was closed.
	ErrClosed = node.ErrClosed
	// ErrNilContext means a call was given a nil context, which it refuses
	// rather than panic on.
	ErrNilContext = errors.New("shardcache: nil context")
	// ErrMigrationActive means Reshard was called while a migration's window
	// is still open.
	ErrMigrationActive = errors.New("shardcache: a migration is already active")
	// ErrNodeNotEmpty means a change would add a node that already holds
	// keys (Reshard, CheckEmpty). Keys left on a node that was removed and
	// comes back are older than what the application wrote since: once the
	// node owns them again, reads would return them. Flush the node first
	// (a Client of that node alone, Flush; or FLUSHDB, flush_all).
	ErrNodeNotEmpty = errors.New("shardcache: an added node holds keys")
	// ErrUnknownNode means a placement located a key on a node it does not
	// list in Nodes(), so the client has no connection for it.
	ErrUnknownNode = node.ErrUnknownNode

	// ErrNotFound is what a loader returns (wrapped or not) when the
	// database has no such row, and what GetOrLoad then returns. With
	// Options.NegativeTTL the answer is cached: the key holds a negative
	// entry, the value "\x00shardcache:not-found\x00", for NegativeTTL, and
	// GetOrLoad returns ErrNotFound without loading while it lasts, in every
	// process. Get and GetMulti read a negative entry as a miss
	// (ErrCacheMiss; absent from the map), and Set or Delete replace it as
	// any value; Add, Incr and Touch see it as a value.
	ErrNotFound = errors.New("shardcache: not found")
	// ErrLoadThrottled means Options.LoadLimit had no token for a load
	// within the caller's deadline (and LoadLimit.MaxWait): the loader was
	// not called, and the application should degrade rather than wait.
	ErrLoadThrottled = loading.ErrThrottled
	// ErrLoadPanic means the loader of GetOrLoad or GetMultiOrLoad
	// panicked; the panic's value is in the message.
	ErrLoadPanic = loading.ErrPanic
)

// NodeError is a failure on one node. Multi-key operations return one per
// failed node, joined with errors.Join, beside the results of the others.
type NodeError struct {
	Op   string    // "get", "set", "get_multi", ...
	Node ring.Node // the node that failed
	Keys []string  // the keys the operation sent to that node
	Err  error     // the cause: a network error, a context error, ...
}

// Error names the operation, the node and its address, and the cause.
func (e *NodeError) Error() string {
	keys := ""
	switch len(e.Keys) {
	case 0:
	case 1:
		keys = fmt.Sprintf(" key %q", e.Keys[0])
	default:
		keys = fmt.Sprintf(" %d keys", len(e.Keys))
	}
	if e.Node.Name == "" || e.Node.Name == e.Node.Addr {
		return fmt.Sprintf("shardcache: %s%s on node %s: %v", e.Op, keys, e.Node.Addr, e.Err) // named by its address
	}
	return fmt.Sprintf("shardcache: %s%s on node %s (%s): %v", e.Op, keys, e.Node.Name, e.Node.Addr, e.Err)
}

// Unwrap returns the cause.
func (e *NodeError) Unwrap() error { return e.Err }

// failed reports whether err is a failure rather than nil or one of the
// sentinel answers (a miss, a key not stored).
func failed(err error) bool {
	return err != nil && err != ErrCacheMiss && err != ErrNotStored
}

// nodeErr wraps err for node n if it is a failure.
func nodeErr(op string, n ring.Node, keys []string, err error) error {
	if !failed(err) {
		return err
	}
	return &NodeError{Op: op, Node: n, Keys: keys, Err: err}
}

// keyError describes a rejected key.
func keyError(key, why string) error {
	return fmt.Errorf("%w: %q: %s", ErrMalformedKey, truncKey(key), why)
}

// checkCtx refuses a nil context.
func checkCtx(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	return nil
}

// checkKey validates key for the backend before any I/O.
func (c *Client) checkKey(key string) error {
	if key == "" {
		return keyError(key, "empty")
	}
	if len(key) > c.opts.MaxKeyLength {
		return keyError(key, fmt.Sprintf("%d bytes, more than %d", len(key), c.opts.MaxKeyLength))
	}
	if c.opts.Backend == Memcached {
		// The text protocol splits on spaces and ends lines with CR LF.
		if i := strings.IndexFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
			return keyError(key, fmt.Sprintf("control character or space at byte %d", i))
		}
	}
	return nil
}
