package client

import (
	"net"
	"sync/atomic"
)

// mcServer is the server selector of one Memcached node. gomemcache's
// ServerList resolves its address once, in memcache.New, and a failure there
// leaves it empty for good: every call then fails with "no servers
// configured or available", which hides the cause. mcServer resolves on use
// until it succeeds, and returns the resolver's own error (such as "no such
// host") meanwhile.
type mcServer struct {
	addr     string
	resolved atomic.Pointer[mcAddr]
}

func newMCServer(addr string) *mcServer { return &mcServer{addr: addr} }

// mcAddr is a resolved address whose String does not allocate: gomemcache
// keys its idle connections by it on every call.
type mcAddr struct{ network, str string }

func (a *mcAddr) Network() string { return a.network }
func (a *mcAddr) String() string  { return a.str }

func (s *mcServer) resolve() (net.Addr, error) {
	if a := s.resolved.Load(); a != nil {
		return a, nil
	}
	ta, err := net.ResolveTCPAddr("tcp", s.addr)
	if err != nil {
		return nil, err
	}
	a := &mcAddr{network: ta.Network(), str: ta.String()}
	s.resolved.Store(a)
	return a, nil
}

// PickServer returns the node's address, whatever the key.
func (s *mcServer) PickServer(string) (net.Addr, error) { return s.resolve() }

// Each calls f with the node's address.
func (s *mcServer) Each(f func(net.Addr) error) error {
	a, err := s.resolve()
	if err != nil {
		return err
	}
	return f(a)
}
