// Package pool keeps one connection pool per physical cache node, keyed by
// address and shared by every placement that names the node.
//
// While a migration runs, the old and the new placement usually share most of
// their nodes: those must not get a second pool, and a node must not be closed
// while either placement still routes to it. Placements acquire their nodes
// and release them when they are dropped; a node's pool is closed when the
// last placement naming it lets go.
package pool

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/shardcache/shardcache/ring"
)

// ErrClosed is returned by Acquire after Close.
var ErrClosed = errors.New("shardcache/pool: closed")

// Pools holds one C (a client with its own connection pool) per address.
type Pools[C io.Closer] struct {
	dial func(ring.Node) (C, error) // makes the client of a node on first use

	mu     sync.Mutex
	nodes  map[string]*entry[C] // by address
	closed bool
}

type entry[C io.Closer] struct {
	conn C
	refs int // placements that name the address
}

// New returns an empty set of pools that makes a node's client with dial.
func New[C io.Closer](dial func(ring.Node) (C, error)) *Pools[C] {
	return &Pools[C]{dial: dial, nodes: make(map[string]*entry[C])}
}

// Acquire takes one reference on each distinct address of nodes for a
// placement, creating clients for addresses not yet in use, and returns the
// clients by address. On error nothing is acquired.
func (p *Pools[C]) Acquire(nodes []ring.Node) (map[string]C, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	conns := make(map[string]C, len(nodes))
	var created []string
	for _, n := range nodes {
		if _, dup := conns[n.Addr]; dup {
			continue
		}
		e := p.nodes[n.Addr]
		if e == nil {
			c, err := p.dial(n)
			if err != nil {
				for _, addr := range created {
					p.nodes[addr].conn.Close()
					delete(p.nodes, addr)
				}
				for addr := range conns {
					if e := p.nodes[addr]; e != nil {
						e.refs--
					}
				}
				return nil, fmt.Errorf("node %s (%s): %w", n.Name, n.Addr, err)
			}
			e = &entry[C]{conn: c}
			p.nodes[n.Addr] = e
			created = append(created, n.Addr)
		}
		e.refs++
		conns[n.Addr] = e.conn
	}
	return conns, nil
}

// Release drops one reference on each distinct address of nodes and closes
// the clients no placement uses any more. It returns their Close errors.
func (p *Pools[C]) Release(nodes []ring.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	seen := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		e := p.nodes[n.Addr]
		if seen[n.Addr] || e == nil {
			continue
		}
		seen[n.Addr] = true
		if e.refs--; e.refs == 0 {
			delete(p.nodes, n.Addr)
			if err := e.conn.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", n.Addr, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Addrs returns the addresses with an open client, in no particular order.
func (p *Pools[C]) Addrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	addrs := make([]string, 0, len(p.nodes))
	for a := range p.nodes {
		addrs = append(addrs, a)
	}
	return addrs
}

// Close closes every client, whatever its references, and makes Acquire fail.
func (p *Pools[C]) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for addr, e := range p.nodes {
		if err := e.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", addr, err))
		}
	}
	clear(p.nodes)
	return errors.Join(errs...)
}
