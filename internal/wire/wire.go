// Package wire is the mechanism under the cache nodes' protocols: one
// bounded pool of connections per node, the calls made on them (bounded by
// the caller's context and the node's timeouts), the dialer (TCP, TLS, a
// protocol's login) and the split multi-get that writes every node's
// request before it reads any answer. Standard library only; the protocols
// themselves live in its subpackages (memcache, resp).
//
// A Pool holds at most Size connections to its node, in use, idle or being
// dialed, whatever the mix of calls: a caller that finds them all busy
// waits for one (within its context and PoolTimeout) rather than dialing
// more. Pools of one node may share a Budget with another client of the
// node (go-redis's pool, through Budget.Dial), so that the node sees at most
// Size connections from the process's client in all.
//
//	p := wire.NewPool(wire.Config{Addr: "10.0.0.1:11211", Size: 8})
//	defer p.Close()
//	c, err := p.Begin(ctx)
//	if err != nil { ... }
//	c.W.WriteString("version\r\n")
//	err = c.Flush() // and starts the read's ReadTimeout
//	if err == nil { _, err = c.Line() }
//	err = c.End(err, err == nil) // pools the connection, or closes it after a failure
package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Errors of the pools.
var (
	// ErrClosed means the pool was closed.
	ErrClosed = errors.New("shardcache/wire: pool closed")
	// ErrPoolTimeout means every connection of the pool stayed busy for
	// PoolTimeout: the caller waited and got none. It says nothing about
	// the node itself.
	ErrPoolTimeout = errors.New("shardcache/wire: connection pool timeout")
)

// Defaults of Config.
const (
	DefaultTimeout = 500 * time.Millisecond
	DefaultSize    = 10
)

// Config configures a Pool. The zero value of every field but Addr is
// usable.
type Config struct {
	// Addr is the node's "host:port".
	Addr string
	// Dial opens a connection to the node, bounded by ctx; default a TCP
	// dial. A Dialer's Dial adds TLS and a protocol's login.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Size is the most connections open to the node at once: in use, idle
	// and being dialed. Default DefaultSize.
	Size int
	// MaxIdle is the most idle connections kept; default Size.
	MaxIdle int
	// IdleTimeout closes a connection idle for longer, and MaxLifetime one
	// older, when it would be used next. Default 0: no limit.
	IdleTimeout, MaxLifetime time.Duration
	// DialTimeout bounds a dial, WriteTimeout a request's write and
	// ReadTimeout the wait for its answer, each also bounded by the
	// caller's context. Default DefaultTimeout each.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// PoolTimeout bounds the wait for a connection when all Size are
	// busy. Default ReadTimeout + 1s, as go-redis.
	PoolTimeout time.Duration
	// Budget, when set, is shared with another client of the node: the
	// pool's connections take their places in it. Default a budget of the
	// pool's own, of Size places.
	Budget *Budget
}

func (c *Config) init() {
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
	if c.Size <= 0 {
		c.Size = DefaultSize
	}
	if c.MaxIdle <= 0 || c.MaxIdle > c.Size {
		c.MaxIdle = c.Size
	}
	for _, t := range []*time.Duration{&c.DialTimeout, &c.ReadTimeout, &c.WriteTimeout} {
		if *t <= 0 {
			*t = DefaultTimeout
		}
	}
	if c.PoolTimeout <= 0 {
		c.PoolTimeout = c.ReadTimeout + time.Second
	}
	if c.Budget == nil {
		c.Budget = NewBudget(c.Size)
	}
}

// deadlineIn is the end of a step of d starting now, or ctx's deadline if
// it comes first.
func deadlineIn(ctx context.Context, d time.Duration) time.Time {
	deadline := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	return deadline
}

// CtxErr returns ctx's error, wrapping err, once ctx is done; err
// otherwise.
func CtxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		if err == nil {
			return cerr
		}
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

// PastDeadline wraps context.DeadlineExceeded around err, a network
// timeout, once ctx's deadline has passed: a connection's deadline is the
// context's, and may fire a moment before the context's own timer does.
func PastDeadline(ctx context.Context, err error) (error, bool) {
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) && errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err), true
	}
	return err, false
}
