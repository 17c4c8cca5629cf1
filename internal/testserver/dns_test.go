package testserver

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"
)

// resolver is Go's own resolver (its parser, not the server's) asking s
// over network alone: "udp" or "tcp".
func resolver(s *DNSServer, network string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, s.Addr)
	}}
}

// lookup returns the addresses of name ("ip4" or "ip6") over network.
func lookup(t *testing.T, s *DNSServer, network, ip, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	addrs, err := resolver(s, network).LookupNetIP(ctx, ip, name)
	if err != nil {
		t.Fatalf("look up %s %s over %s: %v", ip, name, network, err)
	}
	var out []string
	for _, a := range addrs {
		out = append(out, a.Unmap().String())
	}
	return out
}

// rcode sends one query of type qtype for name over UDP, and returns the
// answer's response code and its number of records, read from its header.
func rcode(t *testing.T, s *DNSServer, name string, qtype uint16) (code, answers int) {
	t.Helper()
	q := []byte{0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0} // RD, one question
	q = appendDNSName(q, name)
	q = be.AppendUint16(q, qtype)
	q = be.AppendUint16(q, dnsClassINET)
	c, err := net.Dial("udp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(q); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("query %s type %d: %v", name, qtype, err)
	}
	if n < dnsHeaderLen || buf[0] != 0xbe || buf[1] != 0xef || buf[2]&0x84 != 0x84 {
		t.Fatalf("query %s type %d: answer %x, want the query's ID, QR and AA", name, qtype, buf[:n])
	}
	return int(buf[3] & 0x0f), int(be.Uint16(buf[6:]))
}

func TestDNS(t *testing.T) {
	s := DNS(t)
	if code, _ := rcode(t, s, "never.set.test", dnsTypeA); code != dnsRcodeNXDomain {
		t.Fatalf("a name never set: rcode %d, want NXDOMAIN", code)
	}
	s.SetA("Cache.Test", "127.0.1.1", "::1")
	for _, network := range []string{"udp", "tcp"} {
		if got := lookup(t, s, network, "ip4", "cache.test."); !slices.Equal(got, []string{"127.0.1.1"}) {
			t.Fatalf("A over %s: %v", network, got)
		}
	}
	if got := lookup(t, s, "udp", "ip6", "cache.test."); !slices.Equal(got, []string{"::1"}) {
		t.Fatalf("AAAA: %v", got)
	}
	s.SetSRV("_memcache._tcp.cache.test", SRV{"cache-0.cache.test", 11211}, SRV{"cache-1.cache.test", 11212})
	for _, network := range []string{"udp", "tcp"} {
		_, srvs, err := resolver(s, network).LookupSRV(t.Context(), "", "", "_memcache._tcp.cache.test.")
		if err != nil {
			t.Fatalf("SRV over %s: %v", network, err)
		}
		var got []SRV
		for _, r := range srvs {
			if r.Priority != 10 || r.Weight != 10 {
				t.Errorf("SRV %+v: want priority and weight 10", r)
			}
			got = append(got, SRV{r.Target, r.Port})
		}
		slices.SortFunc(got, func(a, b SRV) int { return int(a.Port) - int(b.Port) }) // Go shuffles by weight
		if want := []SRV{{"cache-0.cache.test.", 11211}, {"cache-1.cache.test.", 11212}}; !slices.Equal(got, want) {
			t.Fatalf("SRV over %s: %v, want %v", network, got, want)
		}
	}
	s.SetEmpty("_memcache._tcp.cache.test")
	if code, n := rcode(t, s, "_memcache._tcp.cache.test", dnsTypeSRV); code != 0 || n != 0 {
		t.Fatalf("SetEmpty: rcode %d with %d records, want NOERROR and none", code, n)
	}
	if code, n := rcode(t, s, "cache.test", 16); code != 0 || n != 0 { // TXT
		t.Fatalf("a type without records: rcode %d with %d records, want NOERROR and none", code, n)
	}
	s.SetNXDomain("cache.test")
	if code, _ := rcode(t, s, "cache.test", dnsTypeA); code != dnsRcodeNXDomain {
		t.Fatalf("SetNXDomain: rcode %d, want NXDOMAIN", code)
	}
	if got := s.Queries("cache.test."); got != 5 {
		t.Fatalf("Queries(cache.test.) = %d, want 5", got)
	}
	done := s.Answered("cache.test", 6)
	select {
	case <-done:
		t.Fatal("Answered(6) closed after 5 queries")
	default:
	}
	if _, err := resolver(s, "tcp").LookupNetIP(t.Context(), "ip4", "cache.test."); err == nil {
		t.Fatal("a name set NXDOMAIN resolved")
	}
	<-done
	s.WaitQueries("cache.test", 6)

	s.Stop()
	s.Stop() // idempotent
	s.Restart()
	if code, _ := rcode(t, s, "_memcache._tcp.cache.test", dnsTypeSRV); code != 0 {
		t.Fatalf("after Restart: rcode %d, want the records kept", code)
	}
}

// TestDNSMalformed: a message that is not one parsable question is
// answered FORMERR, a response is not answered, and the server goes on.
func TestDNSMalformed(t *testing.T) {
	s := DNS(t)
	s.SetA("cache.test", "127.0.1.1")
	header := []byte{0, 7, 0x01, 0x00, 0, 2, 0, 0, 0, 0, 0, 0} // two questions
	if got := s.answer(header); len(got) != dnsHeaderLen || got[3]&0x0f != dnsRcodeFormErr {
		t.Fatalf("two questions: %x, want FORMERR", got)
	}
	cut := append([]byte{0, 7, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}, 5, 'c', 'a')
	if got := s.answer(cut); got[3]&0x0f != dnsRcodeFormErr {
		t.Fatalf("a question cut short: %x, want FORMERR", got)
	}
	if got := s.answer([]byte{0, 7, 0x81, 0x80, 0, 0, 0, 0, 0, 0, 0, 0}); got != nil {
		t.Fatalf("a response was answered: %x", got)
	}
	if got := s.answer([]byte{0, 7}); got != nil {
		t.Fatalf("two bytes were answered: %x", got)
	}
	if got := lookup(t, s, "udp", "ip4", "cache.test."); !slices.Equal(got, []string{"127.0.1.1"}) {
		t.Fatalf("after malformed messages: %v", got)
	}
}
