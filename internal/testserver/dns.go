package testserver

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// waitTimeout bounds WaitQueries: a source that stopped resolving fails the
// test rather than hanging it.
const waitTimeout = 10 * time.Second

// DNSServer is an in-process DNS server (github.com/miekg/dns) on a free
// loopback port, over UDP and TCP, whose records a test sets as it goes:
// A and AAAA (SetA), SRV (SetSRV), NXDOMAIN (SetNXDomain, and every name
// never set) or an empty answer (SetEmpty). Records have a TTL of 0, and
// every query is counted by name, so a test can wait until a client has
// asked again (Answered, WaitQueries) instead of sleeping.
type DNSServer struct {
	// Addr is where the server listens, "127.0.0.1:PORT", UDP and TCP.
	Addr string

	t testing.TB

	mu      sync.Mutex
	zone    map[string]dnsAnswer // by lower-case FQDN
	queries map[string]int       // by lower-case FQDN
	waiters []dnsWaiter          // of Answered, until their count is reached
	servers []*dns.Server        // nil when stopped
}

// dnsWaiter is a channel to close once name has had n queries.
type dnsWaiter struct {
	name string
	n    int
	ch   chan struct{}
}

// SRV is one target of an SRV record.
type SRV struct {
	Target string // a host name, such as "cache-0.cache.test"
	Port   uint16
}

// dnsAnswer is what the server answers for a name.
type dnsAnswer struct {
	nxdomain bool
	addrs    []netip.Addr
	srvs     []SRV
}

// DNS starts a DNS server that answers NXDOMAIN until records are set. It
// stops in t.Cleanup.
func DNS(t testing.TB) *DNSServer {
	t.Helper()
	s := &DNSServer{t: t, zone: map[string]dnsAnswer{}, queries: map[string]int{}}
	t.Cleanup(s.Stop)
	var err error
	// More tries than a process's: the UDP port the kernel picks is often
	// a TCP connection's own on a busy machine (both come from the
	// ephemeral range), and TCP must have it too.
	for range 20 * attempts {
		if err = s.start(0); err == nil {
			return s
		}
	}
	t.Fatalf("testserver: start DNS server: %v", err)
	return nil
}

// fqdn is the key of a name in the zone.
func fqdn(name string) string { return dns.Fqdn(strings.ToLower(name)) }

// SetA answers name's A and AAAA queries with ips (each an IPv4 or an IPv6
// address), replacing what name had.
func (s *DNSServer) SetA(name string, ips ...string) {
	s.t.Helper()
	a := dnsAnswer{}
	for _, ip := range ips {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			s.t.Fatalf("testserver: DNS SetA(%q): %v", name, err)
		}
		a.addrs = append(a.addrs, addr)
	}
	s.set(name, a)
}

// SetSRV answers name's SRV queries with targets, in order, replacing what
// name had. The targets' addresses are set with SetA.
func (s *DNSServer) SetSRV(name string, targets ...SRV) {
	s.set(name, dnsAnswer{srvs: append([]SRV(nil), targets...)})
}

// SetNXDomain answers every query for name with NXDOMAIN.
func (s *DNSServer) SetNXDomain(name string) { s.set(name, dnsAnswer{nxdomain: true}) }

// SetEmpty answers every query for name with NOERROR and no record.
func (s *DNSServer) SetEmpty(name string) { s.set(name, dnsAnswer{}) }

func (s *DNSServer) set(name string, a dnsAnswer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.zone[fqdn(name)] = a
}

// Queries returns how many queries for name (any type) the server has
// answered.
func (s *DNSServer) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[fqdn(name)]
}

// Answered returns a channel closed once the server has answered n
// queries for name in all, so that a test can wait for it and for
// something else at once.
func (s *DNSServer) Answered(name string, n int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if s.queries[fqdn(name)] >= n {
		close(ch)
		return ch
	}
	s.waiters = append(s.waiters, dnsWaiter{fqdn(name), n, ch})
	return ch
}

// WaitQueries waits until the server has answered n queries for name in
// all, and fails the test after 10 s. Call it from the test's goroutine.
func (s *DNSServer) WaitQueries(name string, n int) {
	s.t.Helper()
	select {
	case <-s.Answered(name, n):
	case <-time.After(waitTimeout):
		s.t.Fatalf("testserver: DNS: %d queries for %s after %v, want %d", s.Queries(name), name, waitTimeout, n)
	}
}

// ServeDNS answers one query from the zone.
func (s *DNSServer) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	s.mu.Lock()
	for _, q := range req.Question {
		name := strings.ToLower(q.Name)
		s.queries[name]++
		a, ok := s.zone[name]
		if !ok || a.nxdomain {
			m.Rcode = dns.RcodeNameError
			continue
		}
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 0}
		switch q.Qtype {
		case dns.TypeA, dns.TypeAAAA:
			for _, ip := range a.addrs {
				switch {
				case ip.Is4() && q.Qtype == dns.TypeA:
					hdr.Rrtype = dns.TypeA
					m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: ip.AsSlice()})
				case ip.Is6() && q.Qtype == dns.TypeAAAA:
					hdr.Rrtype = dns.TypeAAAA
					m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: ip.AsSlice()})
				}
			}
		case dns.TypeSRV:
			hdr.Rrtype = dns.TypeSRV
			for _, t := range a.srvs {
				m.Answer = append(m.Answer, &dns.SRV{Hdr: hdr, Priority: 10, Weight: 10, Port: t.Port, Target: dns.Fqdn(t.Target)})
			}
		}
	}
	s.waiters = slices.DeleteFunc(s.waiters, func(w dnsWaiter) bool {
		if s.queries[w.name] >= w.n {
			close(w.ch)
			return true
		}
		return false
	})
	s.mu.Unlock()
	_ = w.WriteMsg(m) // a client that went away is not the test's failure
}

// Stop shuts the server down. It may be called more than once.
func (s *DNSServer) Stop() {
	s.mu.Lock()
	servers := s.servers
	s.servers = nil
	s.mu.Unlock()
	for _, srv := range servers {
		_ = srv.Shutdown()
	}
}

// Restart stops the server if it runs and starts it again on the same
// port, with the same records. Call it from the test's goroutine.
func (s *DNSServer) Restart() {
	s.t.Helper()
	s.Stop()
	_, port, _ := net.SplitHostPort(s.Addr)
	p, _ := strconv.Atoi(port)
	if err := s.start(p); err != nil {
		s.t.Fatalf("testserver: restart DNS server on %s: %v", s.Addr, err)
	}
}

// start listens on port (a free one when 0) over UDP and TCP, serves, and
// waits until a query is answered.
func (s *DNSServer) start(port int) error {
	pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	addr := pc.LocalAddr().String()
	l, err := net.Listen("tcp", addr) // the same port, which TCP may have taken
	if err != nil {
		pc.Close()
		return err
	}
	udp := &dns.Server{PacketConn: pc, Handler: s}
	tcp := &dns.Server{Listener: l, Handler: s}
	servers := []*dns.Server{udp, tcp}
	shutdown := func() {
		for _, srv := range servers {
			_ = srv.Shutdown() // fails only for a server that did not start
		}
	}
	started := make(chan error, len(servers))
	for _, srv := range servers {
		ready := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(ready) }
		go func() { started <- srv.ActivateAndServe() }()
		select {
		case <-ready:
		case err := <-started:
			shutdown()
			return fmt.Errorf("serve: %w", err)
		}
	}
	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, Timeout: time.Second}
		m := new(dns.Msg)
		m.SetQuestion("probe.testserver.", dns.TypeA)
		if _, _, err := c.Exchange(m, addr); err != nil {
			shutdown()
			return fmt.Errorf("probe over %s: %w", network, err)
		}
	}
	s.mu.Lock()
	s.Addr, s.servers = addr, servers
	s.mu.Unlock()
	return nil
}
