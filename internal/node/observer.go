package node

import (
	"context"
	"time"
)

// Op is a kind of call to a node, as statistics count them.
type Op uint8

// Kinds of call.
const (
	OpGet Op = iota
	OpGetMulti
	OpSet
	OpSetMulti
	OpAdd
	OpAddMulti
	OpDelete
	OpDeleteMulti
	OpIncr
	OpTouch
	OpLease  // a lease's store or release (taking one is an Add)
	OpExists // a copy's confirmation, a sweep's check
	OpSweep  // a sweep's listing, dumps and restores
	OpPing   // a probe
	OpOther  // anything else: an item operation without its own kind, a command of Client.Redis
	NumOps
	// OpSetup is a command a client sends to set a connection up (HELLO,
	// AUTH, SELECT): the breaker sees it, statistics do not.
	OpSetup = NumOps
)

var opNames = [NumOps]string{"get", "get_multi", "set", "set_multi", "add", "add_multi",
	"delete", "delete_multi", "incr", "touch", "lease", "exists", "sweep", "ping", "other"}

// String returns the op's name in statistics: "get", "get_multi", ...
func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return "setup"
}

// Observer is told the outcome of every call a node makes, whatever method
// made it: the client's breaker and statistics read it. A node calls Begin
// before a call's I/O and Done after it, once per call, whether the caller
// waited for the answer or not; Keys after a multi-key read that
// answered. It must be safe for concurrent use and cheap: it is on every
// call's path.
type Observer interface {
	// Begin returns the start of a call, to give Done; zero when calls are
	// not timed.
	Begin() time.Time
	// Done records the outcome err of a call of kind op made under ctx
	// (nil: the call had no caller's context, such as a batch of several),
	// which began at start.
	Done(ctx context.Context, op Op, start time.Time, err error)
	// Keys records the keys a multi-key read of kind op found and missed.
	Keys(op Op, hits, misses int)
}

// Discard is an Observer that records nothing.
var Discard Observer = discard{}

type discard struct{}

func (discard) Begin() time.Time                           { return time.Time{} }
func (discard) Done(context.Context, Op, time.Time, error) {}
func (discard) Keys(Op, int, int)                          {}
