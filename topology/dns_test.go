package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
)

const srvName = "_memcache._tcp.cache.test."

// receive returns the next update within 10 s, failing the test otherwise.
func receive(t *testing.T, ch <-chan Update) Update {
	t.Helper()
	select {
	case u, ok := <-ch:
		if !ok {
			t.Fatal("the stream closed")
		}
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("no update within 10 s")
	}
	return Update{}
}

// wantNodes receives the next update and checks that it is a topology of
// n nodes.
func wantNodes(t *testing.T, ch <-chan Update, n int) *Topology {
	t.Helper()
	u := receive(t, ch)
	if u.Err != nil || u.Topology == nil || len(u.Topology.Nodes) != n {
		t.Fatalf("update %+v (error %v), want a topology of %d nodes", u.Topology, u.Err, n)
	}
	return u.Topology
}

// targets returns SRV targets cache-0.cache.test .. cache-(n-1).
func targets(n int) []testserver.SRV {
	srvs := make([]testserver.SRV, n)
	for i := range srvs {
		srvs[i] = testserver.SRV{Target: fmt.Sprintf("cache-%d.cache.test", i), Port: 11211}
	}
	return srvs
}

// dnsServer starts a DNS server where target cache-i.cache.test has the
// address 127.0.1.(i+1), for i up to 9 (answers only: nothing connects).
func dnsServer(t *testing.T) *testserver.DNSServer {
	s := testserver.DNS(t)
	for i := range 10 {
		s.SetA(fmt.Sprintf("cache-%d.cache.test", i), fmt.Sprintf("127.0.1.%d", i+1))
	}
	return s
}

// watchDNS starts a DNS source and stops it at the test's end.
func watchDNS(t *testing.T, d *DNS) <-chan Update {
	ctx, cancel := context.WithCancel(context.Background())
	ch := d.Watch(ctx)
	t.Cleanup(func() {
		cancel()
		for range ch {
		}
	})
	return ch
}

// names returns the nodes' names.
func names(t *Topology) []string {
	var ns []string
	for _, n := range t.Nodes {
		ns = append(ns, n.Name)
	}
	return ns
}

// settle waits until the source has asked the server twice more for name
// and fails the test if it sends an update meanwhile: by the second query
// it has handled the answer to the first, and an update it sent then would
// keep it from asking again. Errors are let through when errorsOK.
func settle(t *testing.T, s *testserver.DNSServer, ch <-chan Update, name string, errorsOK bool, why string) {
	t.Helper()
	done := s.Answered(name, s.Queries(name)+2)
	timeout := time.After(10 * time.Second)
	for {
		select {
		case <-done:
			return
		case u := <-ch:
			if u.Err == nil || !errorsOK {
				t.Fatalf("%s: update %+v (error %v), want none", why, u.Topology, u.Err)
			}
		case <-timeout:
			t.Fatalf("%s: the source stopped asking for %s", why, name)
		}
	}
}

func TestDNSSRV(t *testing.T) {
	s := dnsServer(t)
	s.SetSRV(srvName, targets(4)...)
	ch := watchDNS(t, &DNS{Name: srvName, Server: s.Addr, Interval: 10 * time.Millisecond, Grace: time.Hour})

	first := wantNodes(t, ch, 4)
	if want := []string{"cache-0.cache.test", "cache-1.cache.test", "cache-2.cache.test", "cache-3.cache.test"}; !slices.Equal(names(first), want) {
		t.Fatalf("names %v, want %v", names(first), want)
	}
	if first.Nodes[2].Addr != "127.0.1.3:11211" || first.Version != first.Digest() {
		t.Fatalf("node %+v, version %d: want 127.0.1.3:11211 and the digest", first.Nodes[2], first.Version)
	}

	// Scaled to 5: a new topology.
	s.SetSRV(srvName, targets(5)...)
	five := wantNodes(t, ch, 5)

	// cache-2 comes back with a new address: same names, nothing moves.
	s.SetA("cache-2.cache.test", "127.0.2.3")
	moved := wantNodes(t, ch, 5)
	if !slices.Equal(names(moved), names(five)) || moved.Nodes[2].Addr != "127.0.2.3:11211" {
		t.Fatalf("after the address change: %+v", moved.Nodes)
	}
	before, _ := ring.New(five.Nodes)
	after, _ := ring.New(moved.Nodes)
	if m := ring.Moved(before, after); m != 0 {
		t.Fatalf("an address change under the same target moved %v of the keys, want 0", m)
	}

	// cache-4 missing from one answer, and more: within the grace period,
	// nothing changes.
	s.SetSRV(srvName, targets(4)...)
	settle(t, s, ch, srvName, false, "a target missing from answers within the grace period")
	s.SetSRV(srvName, targets(5)...)
	settle(t, s, ch, srvName, false, "a target back within the grace period")

	// NXDOMAIN, then an empty answer: errors, and no topology.
	for _, set := range []func(string){s.SetNXDomain, s.SetEmpty} {
		set(srvName)
		if u := receive(t, ch); !errors.Is(u.Err, ErrNoAnswer) || u.Topology != nil {
			t.Fatalf("update for a failed answer: %+v, want ErrNoAnswer and no topology", u)
		}
	}
	// Back as it was: no update, since nothing changed (errors sent before
	// the records were back may still come).
	s.SetSRV(srvName, targets(5)...)
	settle(t, s, ch, srvName, true, "records back as they were")
	settle(t, s, ch, srvName, false, "records back as they were")

	// Every target without an address: an error too.
	for i := range 5 {
		s.SetNXDomain(fmt.Sprintf("cache-%d.cache.test", i))
	}
	if u := receive(t, ch); !errors.Is(u.Err, ErrNoAnswer) {
		t.Fatalf("update for targets without addresses: %+v, want ErrNoAnswer", u)
	}
}

func TestDNSGraceExpires(t *testing.T) {
	s := dnsServer(t)
	s.SetSRV(srvName, targets(5)...)
	ch := watchDNS(t, &DNS{Name: srvName, Server: s.Addr, Interval: 10 * time.Millisecond, Grace: 100 * time.Millisecond})
	wantNodes(t, ch, 5)
	s.SetSRV(srvName, targets(4)...)
	if got := wantNodes(t, ch, 4); slices.Contains(names(got), "cache-4.cache.test") {
		t.Fatalf("cache-4 still there: %v", names(got))
	}
}

func TestDNSHost(t *testing.T) {
	s := testserver.DNS(t)
	s.SetA("cache.test", "127.0.1.2", "127.0.1.1", "::1")
	// Grace an hour: the default, three intervals (30 ms), is wall time a
	// busy machine let pass between two answers, and the three addresses
	// one answer lacks left (a busy CI run).
	d := &DNS{Name: "cache.test.:11211", Server: s.Addr, Interval: 10 * time.Millisecond, Grace: time.Hour}
	got, err := d.Resolve(context.Background())
	want := []ring.Node{
		{Name: "127.0.1.1:11211", Addr: "127.0.1.1:11211", Weight: 1},
		{Name: "127.0.1.2:11211", Addr: "127.0.1.2:11211", Weight: 1},
		{Name: "[::1]:11211", Addr: "[::1]:11211", Weight: 1},
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Resolve = %v, %v; want %v", got, err, want)
	}
	ch := watchDNS(t, d)
	wantNodes(t, ch, 3)
	s.SetA("cache.test", "127.0.1.1", "127.0.1.2", "127.0.1.3", "::1")
	wantNodes(t, ch, 4)

	// A server that does not answer is ErrResolve, not ErrNoAnswer.
	s.Stop()
	if _, err := d.Resolve(context.Background()); !errors.Is(err, ErrResolve) {
		t.Fatalf("Resolve with the server stopped: %v, want ErrResolve", err)
	}
	if u := receive(t, ch); !errors.Is(u.Err, ErrResolve) || u.Topology != nil {
		t.Fatalf("update with the server stopped: %+v, want ErrResolve", u)
	}
	s.Restart()
	s.SetA("cache.test", "127.0.1.1")
	// One address of four answered: three would leave at once, but the
	// grace keeps them.
	settle(t, s, ch, "cache.test.", true, "one answer missing three addresses")
	settle(t, s, ch, "cache.test.", false, "one answer missing three addresses")
}

func TestDNSBadName(t *testing.T) {
	for _, name := range []string{"cache.test", "cache.test:0", ":11211", "cache.test:port"} {
		if _, err := (&DNS{Name: name, Server: "127.0.0.1:1"}).Resolve(context.Background()); !errors.Is(err, ErrBadDNSName) {
			t.Errorf("Resolve(%q) = %v, want ErrBadDNSName", name, err)
		}
	}
}
