package gomemcache

import (
	"fmt"
	"net"
	"strings"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/ring"
)

// Selector is a memcache.ServerSelector that places keys with any
// ring.Locator, for code that keeps memcache.NewFromSelector:
//
//	r, err := ring.New(nodes)
//	sel, err := gomemcache.NewSelector(r)
//	mc := memcache.NewFromSelector(sel)
//
// It changes placement only: there is no dual-ring migration with it (a
// new placement needs a new Selector, and keys that move are misses). Use
// New for resharding without losing keys.
type Selector struct {
	loc   ring.Locator
	addrs map[string]net.Addr // every node's address, resolved once
	list  []net.Addr          // the same, in the locator's order
}

var _ memcache.ServerSelector = (*Selector)(nil)

// NewSelector resolves the address of every node of loc, as
// memcache.ServerList.SetServers does, and returns a selector over them.
func NewSelector(loc ring.Locator) (*Selector, error) {
	nodes := loc.Nodes()
	if len(nodes) == 0 {
		return nil, memcache.ErrNoServers
	}
	s := &Selector{loc: loc, addrs: make(map[string]net.Addr, len(nodes))}
	for _, n := range nodes {
		if _, ok := s.addrs[n.Addr]; ok {
			continue
		}
		var a net.Addr
		var err error
		if strings.Contains(n.Addr, "/") {
			a, err = net.ResolveUnixAddr("unix", n.Addr)
		} else {
			a, err = net.ResolveTCPAddr("tcp", n.Addr)
		}
		if err != nil {
			return nil, fmt.Errorf("shardcache: node %s: %w", n.Name, err)
		}
		s.addrs[n.Addr] = a
		s.list = append(s.list, a)
	}
	return s, nil
}

// PickServer returns the address of the node that owns key.
func (s *Selector) PickServer(key string) (net.Addr, error) {
	a, ok := s.addrs[s.loc.Locate(key).Addr]
	if !ok {
		return nil, memcache.ErrNoServers
	}
	return a, nil
}

// Each calls f on every node's address, stopping at the first error.
func (s *Selector) Each(f func(net.Addr) error) error {
	for _, a := range s.list {
		if err := f(a); err != nil {
			return err
		}
	}
	return nil
}
