package testserver

import (
	"bufio"
	endian "encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitTimeout bounds WaitQueries: a source that stopped resolving fails the
// test rather than hanging it.
const waitTimeout = 10 * time.Second

// DNSServer is an in-process DNS server on a free loopback port, over UDP
// and TCP, whose records a test sets as it goes: A and AAAA (SetA), SRV
// (SetSRV), NXDOMAIN (SetNXDomain, and every name never set) or an empty
// answer (SetEmpty, and a type a name has no record of). Records have a TTL
// of 0, and every query is counted by name, so a test can wait until a
// client has asked again (Answered, WaitQueries) instead of sleeping. It is
// the standard library's alone (it replaced github.com/miekg/dns), so that
// the tests of the core module need no DNS library.
type DNSServer struct {
	// Addr is where the server listens, "127.0.0.1:PORT", UDP and TCP.
	Addr string

	t testing.TB

	mu      sync.Mutex
	zone    map[string]dnsAnswer // by lower-case FQDN
	queries map[string]int       // by lower-case FQDN
	waiters []dnsWaiter          // of Answered, until their count is reached
	serving *dnsServing          // nil when stopped
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
func fqdn(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

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

// be reads and writes the numbers of DNS messages, big-endian.
var be = endian.BigEndian

// The DNS messages the server reads and writes (RFC 1035, section 4.1): a
// header of 12 bytes, then the question, then the answers' records.
const (
	dnsHeaderLen = 12
	dnsTypeA     = 1
	dnsTypeAAAA  = 28
	dnsTypeSRV   = 33
	dnsClassINET = 1

	dnsRcodeFormErr  = 1
	dnsRcodeNXDomain = 3
)

// answer returns the reply to the DNS message req, nil for a message that
// is not a query (a response, or too short for a header). A query of other
// than one question, or whose question does not parse, is answered FORMERR,
// as github.com/miekg/dns's server (which this one replaced) answered it.
func (s *DNSServer) answer(req []byte) []byte {
	if len(req) < dnsHeaderLen || req[2]&0x80 != 0 {
		return nil
	}
	reply := make([]byte, dnsHeaderLen, 512)
	copy(reply, req[:2])                               // the query's ID
	reply[2] = 0x80 | req[2]&0x78 | 0x04 | req[2]&0x01 // QR, its opcode, AA, its RD
	reply[3] = req[3] & 0x10                           // its CD
	name, qtype, end, ok := dnsQuestion(req)
	if !ok {
		reply[3] |= dnsRcodeFormErr
		return reply
	}
	be.PutUint16(reply[4:], 1) // the question, as asked
	reply = append(reply, req[dnsHeaderLen:end]...)
	owner := req[dnsHeaderLen : end-4] // the name as asked, encoded

	var answers uint16
	record := func(rtype uint16, rdata []byte) {
		reply = append(reply, owner...)
		reply = be.AppendUint16(reply, rtype)
		reply = be.AppendUint16(reply, dnsClassINET)
		reply = be.AppendUint32(reply, 0) // TTL
		reply = be.AppendUint16(reply, uint16(len(rdata)))
		reply = append(reply, rdata...)
		answers++
	}
	s.mu.Lock()
	lower := strings.ToLower(name)
	s.queries[lower]++
	switch a, ok := s.zone[lower]; {
	case !ok || a.nxdomain:
		reply[3] |= dnsRcodeNXDomain
	case qtype == dnsTypeA || qtype == dnsTypeAAAA:
		for _, ip := range a.addrs {
			if (ip.Is4() && qtype == dnsTypeA) || (ip.Is6() && qtype == dnsTypeAAAA) {
				record(qtype, ip.AsSlice())
			}
		}
	case qtype == dnsTypeSRV:
		for _, t := range a.srvs {
			rdata := be.AppendUint16(nil, 10)  // priority
			rdata = be.AppendUint16(rdata, 10) // weight
			rdata = be.AppendUint16(rdata, t.Port)
			record(dnsTypeSRV, appendDNSName(rdata, t.Target))
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
	be.PutUint16(reply[6:], answers)
	return reply
}

// dnsQuestion parses the one question of the query req: its name, in
// presentation form with the final dot ("cache.test."), its type, and where
// the question ends in req. ok is false unless the query has one question,
// whose name is uncompressed (as queries' are).
func dnsQuestion(req []byte) (name string, qtype uint16, end int, ok bool) {
	if be.Uint16(req[4:]) != 1 {
		return "", 0, 0, false
	}
	var b strings.Builder
	i := dnsHeaderLen
	for {
		if i >= len(req) {
			return "", 0, 0, false
		}
		n := int(req[i])
		i++
		if n == 0 {
			break
		}
		if n > 63 || i+n > len(req) { // a compression pointer, or cut short
			return "", 0, 0, false
		}
		b.Write(req[i : i+n])
		b.WriteByte('.')
		i += n
	}
	if i+4 > len(req) {
		return "", 0, 0, false
	}
	if b.Len() == 0 {
		b.WriteByte('.')
	}
	return b.String(), be.Uint16(req[i:]), i + 4, true
}

// appendDNSName appends name ("cache-0.cache.test", with or without the
// final dot) to b, encoded as a sequence of labels, uncompressed.
func appendDNSName(b []byte, name string) []byte {
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if label == "" {
			continue
		}
		b = append(b, byte(len(label)))
		b = append(b, label...)
	}
	return append(b, 0)
}

// Stop shuts the server down. It may be called more than once.
func (s *DNSServer) Stop() {
	s.mu.Lock()
	sv := s.serving
	s.serving = nil
	s.mu.Unlock()
	if sv != nil {
		sv.close()
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

// start listens on port (a free one when 0) over UDP and TCP, and serves
// both.
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
	sv := &dnsServing{pc: pc, l: l, conns: map[net.Conn]bool{}}
	sv.wg.Add(2)
	go s.serveUDP(sv)
	go s.serveTCP(sv)
	s.mu.Lock()
	s.Addr, s.serving = addr, sv
	s.mu.Unlock()
	return nil
}

// dnsServing is one start's sockets and the goroutines that serve them.
type dnsServing struct {
	pc net.PacketConn
	l  net.Listener
	wg sync.WaitGroup // the goroutines serving

	mu     sync.Mutex
	conns  map[net.Conn]bool // the TCP connections open
	closed bool
}

// close closes the sockets and the connections, and waits for every
// goroutine serving them to return.
func (sv *dnsServing) close() {
	_ = sv.pc.Close()
	_ = sv.l.Close()
	sv.mu.Lock()
	sv.closed = true
	for c := range sv.conns {
		_ = c.Close()
	}
	sv.mu.Unlock()
	sv.wg.Wait()
}

// serveUDP answers the queries of the UDP socket, one at a time, until it
// is closed.
func (s *DNSServer) serveUDP(sv *dnsServing) {
	defer sv.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := sv.pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if reply := s.answer(buf[:n]); reply != nil {
			_, _ = sv.pc.WriteTo(reply, from) // a client that went away is not the test's failure
		}
	}
}

// serveTCP accepts connections until the listener is closed, each served
// by a goroutine of its own.
func (s *DNSServer) serveTCP(sv *dnsServing) {
	defer sv.wg.Done()
	for {
		c, err := sv.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // out of file descriptors, say
			continue
		}
		sv.mu.Lock()
		if sv.closed {
			sv.mu.Unlock()
			_ = c.Close()
			return
		}
		sv.conns[c] = true
		sv.wg.Add(1)
		sv.mu.Unlock()
		go s.serveConn(sv, c)
	}
}

// dnsIdle is how long a TCP connection may wait for its next query.
const dnsIdle = 8 * time.Second

// serveConn answers the queries of one TCP connection, each message after
// its length in two bytes (RFC 1035, section 4.2.2), until the client
// closes it, sends nothing for dnsIdle, or the server stops.
func (s *DNSServer) serveConn(sv *dnsServing, c net.Conn) {
	defer sv.wg.Done()
	defer func() {
		sv.mu.Lock()
		delete(sv.conns, c)
		sv.mu.Unlock()
		_ = c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(dnsIdle))
		var size [2]byte
		if _, err := io.ReadFull(r, size[:]); err != nil {
			return
		}
		req := make([]byte, be.Uint16(size[:]))
		if _, err := io.ReadFull(r, req); err != nil {
			return
		}
		reply := s.answer(req)
		if reply == nil {
			return
		}
		if _, err := c.Write(append(be.AppendUint16(nil, uint16(len(reply))), reply...)); err != nil {
			return
		}
	}
}
