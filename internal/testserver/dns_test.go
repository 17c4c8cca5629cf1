package testserver

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// ask sends one query to s over network and returns the answer.
func ask(t *testing.T, s *DNSServer, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	r, _, err := c.Exchange(m, s.Addr)
	if err != nil {
		t.Fatalf("query %s %s over %s: %v", name, dns.TypeToString[qtype], network, err)
	}
	return r
}

func TestDNS(t *testing.T) {
	s := DNS(t)
	if r := ask(t, s, "udp", "never.set.test", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("a name never set: %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
	s.SetA("Cache.Test", "127.0.1.1", "::1")
	for _, network := range []string{"udp", "tcp"} {
		r := ask(t, s, network, "cache.test", dns.TypeA)
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "127.0.1.1" {
			t.Fatalf("A over %s: %v", network, r.Answer)
		}
	}
	if r := ask(t, s, "udp", "cache.test", dns.TypeAAAA); len(r.Answer) != 1 || r.Answer[0].(*dns.AAAA).AAAA.String() != "::1" {
		t.Fatalf("AAAA: %v", r.Answer)
	}
	s.SetSRV("_memcache._tcp.cache.test", SRV{"cache-0.cache.test", 11211}, SRV{"cache-1.cache.test", 11212})
	r := ask(t, s, "udp", "_memcache._tcp.cache.test", dns.TypeSRV)
	if len(r.Answer) != 2 || r.Answer[1].(*dns.SRV).Target != "cache-1.cache.test." || r.Answer[1].(*dns.SRV).Port != 11212 {
		t.Fatalf("SRV: %v", r.Answer)
	}
	s.SetEmpty("_memcache._tcp.cache.test")
	if r := ask(t, s, "udp", "_memcache._tcp.cache.test", dns.TypeSRV); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("SetEmpty: %s with %v, want NOERROR and no record", dns.RcodeToString[r.Rcode], r.Answer)
	}
	s.SetNXDomain("cache.test")
	if r := ask(t, s, "udp", "cache.test", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("SetNXDomain: %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
	if got := s.Queries("cache.test."); got != 4 {
		t.Fatalf("Queries(cache.test.) = %d, want 4", got)
	}
	done := s.Answered("cache.test", 5)
	select {
	case <-done:
		t.Fatal("Answered(5) closed after 4 queries")
	default:
	}
	ask(t, s, "tcp", "cache.test", dns.TypeA)
	<-done
	s.WaitQueries("cache.test", 5)

	s.Stop()
	s.Stop() // idempotent
	s.Restart()
	if r := ask(t, s, "udp", "_memcache._tcp.cache.test", dns.TypeSRV); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("after Restart: %s, want the records kept", dns.RcodeToString[r.Rcode])
	}
}
