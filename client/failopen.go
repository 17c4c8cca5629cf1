package client

import (
	"errors"

	"github.com/shardcache/shardcache/internal/node"
)

// Options.FailOpen trades errors for misses: an application that reads
// through the cache to a database (cache-aside) keeps serving while a node is
// down, at the price of that node's share of the load on the database. The
// keys stay with their node: sending them elsewhere (go-redis Ring, or
// twemproxy's auto_eject_hosts) serves stale values when the node comes back
// with what it held before, for keys written elsewhere meanwhile.

// open applies Options.FailOpen to err, the result of a single-key operation
// routed with st: when err is a *NodeError from a node held down, a read
// becomes ErrCacheMiss and a write is dropped (nil), counted on the node.
func (c *Client) open(st *state, err error, read bool) error {
	if err == nil || !c.opts.FailOpen && st.gone == nil {
		return err
	}
	var ne *NodeError
	if !errors.As(err, &ne) || !c.forgiven(st, ne.Node.Addr, ne.Err) {
		return err
	}
	c.countOpen(st, ne.Node.Addr, 1, read)
	if read {
		return ErrCacheMiss
	}
	return nil
}

// openAll is open for the joined *NodeErrors of a multi-key read: it
// drops those FailOpen forgives (their keys read as misses) and returns the
// others, joined.
func (c *Client) openAll(st *state, err error) error {
	if err == nil || !c.opts.FailOpen && st.gone == nil {
		return err
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var kept []error
	for _, e := range errs {
		var ne *NodeError
		if errors.As(e, &ne) && c.forgiven(st, ne.Node.Addr, ne.Err) {
			c.countOpen(st, ne.Node.Addr, len(ne.Keys), true)
			continue
		}
		kept = append(kept, e)
	}
	return errors.Join(kept...)
}

// openBatch reports whether a multi-key batch's failure is dropped by
// FailOpen (the node is held down), and counts its n keys if so.
func (c *Client) openBatch(st *state, b *batch, n int, read bool) bool {
	if !c.forgiven(st, b.Node.Addr, b.Err) {
		return false
	}
	c.countOpen(st, b.Node.Addr, n, read)
	return true
}

// forgiven reports whether err, a failure of the node at addr, is dropped
// rather than returned: FailOpen's node held down, or a node gone.
func (c *Client) forgiven(st *state, addr string, err error) bool {
	return c.opts.FailOpen && err == ErrNodeDown || st.goneFailed(addr, err)
}

// goneFailed reports whether err, from the node at addr, is a failure to
// reach a node that a change without a migration removed (state.gone):
// such a node is not needed for a write or a delete to succeed, and its
// reads are misses, as FailOpen makes them for a node held down.
func (st *state) goneFailed(addr string, err error) bool {
	return st.gone[addr] && (err == ErrNodeDown || node.Unreachable(err))
}

// countOpen counts n reads answered as misses, or n writes dropped, on the
// node at addr.
func (c *Client) countOpen(st *state, addr string, n int, read bool) {
	m := st.conns[addr]
	switch {
	case m == nil:
	case read:
		m.h.Missed.Add(int64(n))
	default:
		m.h.Dropped.Add(int64(n))
	}
}
