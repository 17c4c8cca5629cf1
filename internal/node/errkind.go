package node

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

// What a call's error says about the network: the client's breaker counts
// only connection-level failures against a node, and its statistics count
// timeouts and refused connections apart. These read the errors the node
// packages return (the network's own, wrapped or not); the policy of what
// to do with them is the client's.

// Unreachable reports whether err is a connection-level failure: the node
// did not answer. A refused or timed-out dial, an i/o timeout, a reset, a
// connection closed mid-reply, a name that does not resolve. A refusal of
// the credentials (ErrAuth, ErrNoPerm) is an answer, not this.
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, ErrAuth) || errors.Is(err, ErrNoPerm) {
		return false
	}
	var ne net.Error
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &ne) && ne.Timeout() ||
		errors.As(err, &op) && op.Op == "dial" ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.As(err, &dns)
}

// Local reports whether err is a failure of the client's side alone, which
// says nothing about the node: its own connection or client closed, or
// every connection of its pool busy.
func Local(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrPoolTimeout) || errors.Is(err, net.ErrClosed)
}

// Timeout reports whether err is a timeout: of a dial, a read or a write,
// or the context's deadline.
func Timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// Refused reports whether err is a refused connection.
func Refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
