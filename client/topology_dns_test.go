package client

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// dnsSRV is the SRV name the DNS tests' clients follow, fully qualified so
// that the resolver tries no search domain.
const dnsSRV = "_memcache._tcp.cache.test."

// dnsFleet is the DNS of a fleet whose processes each ask a server of
// their own (so that a test can tell when each has resolved again), with
// the same records on all: target cache-i.cache.test is 127.0.0.1, at the
// port of server i of the cluster.
type dnsFleet struct {
	cl      *cluster
	servers []*testserver.DNSServer
}

func newDNSFleet(t *testing.T, cl *cluster, processes int) *dnsFleet {
	f := &dnsFleet{cl: cl}
	for range processes {
		s := testserver.DNS(t)
		for i := range cl.addrs {
			s.SetA(dnsTarget(i), "127.0.0.1")
		}
		f.servers = append(f.servers, s)
	}
	return f
}

// dnsTarget is the SRV target of server i.
func dnsTarget(i int) string { return fmt.Sprintf("cache-%d.cache.test", i) }

// srv answers the SRV name with the targets of the given servers: target
// name i of servers[i] (the index of the cluster's server whose port it
// answers); a negative entry leaves name i out.
func (f *dnsFleet) srv(t *testing.T, servers ...int) {
	t.Helper()
	var srvs []testserver.SRV
	for name, i := range servers {
		if i < 0 {
			continue
		}
		_, port, err := net.SplitHostPort(f.cl.addrs[i])
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		srvs = append(srvs, testserver.SRV{Target: dnsTarget(name), Port: uint16(p)})
	}
	for _, s := range f.servers {
		s.SetSRV(dnsSRV, srvs...)
	}
}

// settled waits until every process has finished at least one resolution
// begun after the records last changed: its server has answered two more
// SRV queries (the second is asked once the first's answer was handled).
func (f *dnsFleet) settled(t *testing.T) {
	t.Helper()
	for _, s := range f.servers {
		s.WaitQueries(dnsSRV, s.Queries(dnsSRV)+2)
	}
}

// TestFollowDNS: two clients follow an SRV name whose targets are real
// servers, as a fleet's processes follow a Kubernetes headless service.
//
//   - 4 → 5 targets: each client runs a migration 4 → 5 (started its Lead
//     after it resolved the change), its version changes, the same in
//     both, every key stays readable through the migration, and after the
//     window the placement has 5 nodes.
//   - A target's port changes to a spare server (a pod back under its name
//     at a new address): no key moves on the ring (every key's owner by
//     name is unchanged), no window opens, and that target's keys now go to
//     the spare server.
//   - An answer missing a target once, within the source's Grace: nothing
//     changes.
//   - NXDOMAIN, then an empty answer: nothing changes, and the errors are
//     counted in SourceErrors.
func TestFollowDNS(t *testing.T) {
	for _, kind := range realKinds {
		t.Run(kind, func(t *testing.T) { testFollowDNS(t, kind) })
	}
}

func testFollowDNS(t *testing.T, kind string) {
	const spare = 5 // the cluster's server that a target moves to
	cl := newCluster(t, kind, 6)
	dns := newDNSFleet(t, cl, 2)
	dns.srv(t, 0, 1, 2, 3)
	const lead, window = 500 * time.Millisecond, 3 * time.Second
	var clients []*Client
	for _, s := range dns.servers {
		src := &topology.DNS{Name: dnsSRV, Server: s.Addr, Interval: 50 * time.Millisecond, Grace: 10 * time.Second}
		clients = append(clients, cl.client(t, Options{Topology: &TopologyOptions{
			Source: src, Wait: 5 * time.Second, Skew: 50 * time.Millisecond, Lead: lead, Window: window}}))
	}
	c := clients[0]
	ctx := t.Context()
	v1 := c.TopologyInfo().Version
	for _, c := range clients {
		if s := c.TopologyInfo(); !s.Following || s.Version != v1 || s.Applied != 1 || len(c.Nodes()) != 4 {
			t.Fatalf("after New: TopologyInfo %+v, Nodes %v; want the same 4 nodes in both clients", s, c.Nodes())
		}
	}
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		if err := c.Set(ctx, keys[i], []byte("v:"+keys[i]), 0); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func() {
		t.Helper()
		for _, c := range clients {
			for _, k := range keys {
				mustGet(t, c, k, "v:"+k)
			}
		}
	}
	readAll()

	// 4 → 5 targets: a migration in each client, reads fine throughout.
	dns.srv(t, 0, 1, 2, 3, 4)
	for i, c := range clients {
		waitFor(t, fmt.Sprintf("client %d on the new version", i), func() bool { return c.TopologyInfo().Version != v1 })
	}
	v2 := c.TopologyInfo().Version
	for i, c := range clients {
		s, m := c.TopologyInfo(), c.Migration()
		if s.Version != v2 || s.Applied != 2 || !m.Active || len(m.OldNodes) != 4 || len(m.NewNodes) != 5 {
			t.Fatalf("client %d after 4 → 5 targets: TopologyInfo %+v, migration %d → %d nodes (active %v); want version %d, a migration 4 → 5",
				i, s, len(m.OldNodes), len(m.NewNodes), m.Active, v2)
		}
		if m.End.Sub(m.Start) != window {
			t.Fatalf("client %d: window %v, want TopologyOptions.Window %v", i, m.End.Sub(m.Start), window)
		}
	}
	// The reads in the window backfill the keys on their new owners (a
	// sweep waits for the tombstones of the start, longer than this
	// window).
	waitFor(t, "the migrations' end", func() bool {
		readAll()
		return !clients[0].Migration().Active && !clients[1].Migration().Active
	})
	readAll()
	for i, c := range clients {
		if s := c.TopologyInfo(); len(c.Nodes()) != 5 || s.Phase == topology.During || s.Refused != 0 {
			t.Fatalf("client %d after the window: Nodes %v, TopologyInfo %+v; want 5 nodes", i, c.Nodes(), s)
		}
	}

	// Target 2 comes back at the spare server's port, under its name.
	owners := map[string]string{} // key -> owner's name
	for _, k := range keys {
		owners[k] = c.Locate(k).Name
	}
	migrations := c.Stats().Migrations
	dns.srv(t, 0, 1, spare, 3, 4)
	for i, c := range clients {
		waitFor(t, fmt.Sprintf("client %d readdressed", i), func() bool { return c.TopologyInfo().Version != v2 })
		if m := c.Migration(); m.Active || m.End != m.Start {
			t.Fatalf("client %d: a window %v – %v (active %v) for an address change; want none", i, m.Start, m.End, m.Active)
		}
		var onSpare int
		for _, k := range keys {
			n := c.Locate(k)
			if n.Name != owners[k] {
				t.Fatalf("client %d: %s moved from %s to %s on the ring; an address change moves nothing", i, k, owners[k], n.Name)
			}
			if n.Name == dnsTarget(2) {
				onSpare++
				if n.Addr != cl.addrs[spare] {
					t.Fatalf("client %d: %s located at %s, want the spare server %s", i, k, n.Addr, cl.addrs[spare])
				}
			}
		}
		if onSpare == 0 {
			t.Fatalf("no key on %s", dnsTarget(2))
		}
	}
	if got := c.Stats().Migrations - migrations; got > 1 {
		t.Fatalf("%d migrations for an address change", got)
	}
	oldServer := direct(t, cl, ring.Node{Name: "old", Addr: cl.addrs[2]})
	spareServer := direct(t, cl, ring.Node{Name: "spare", Addr: cl.addrs[spare]})
	for _, k := range keys {
		if owners[k] != dnsTarget(2) {
			continue
		}
		if err := c.Set(ctx, k, []byte("v:"+k), 0); err != nil { // the cache-aside refill
			t.Fatal(err)
		}
		mustGet(t, spareServer, k, "v:"+k)
		if err := oldServer.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	readAll() // the keys of target 2 from the spare server, the old one emptied of them
	v3 := c.TopologyInfo().Version
	steady := func(what string) {
		t.Helper()
		for i, c := range clients {
			s := c.TopologyInfo()
			if s.Version != v3 || s.Applied != 3 || s.Refused != 0 || c.Migration().Active || len(c.Nodes()) != 5 {
				t.Fatalf("client %d after %s: TopologyInfo %+v, Nodes %v, migration active %v; want nothing changed",
					i, what, s, c.Nodes(), c.Migration().Active)
			}
		}
		readAll()
	}
	steady("the address change")

	// An answer missing target 4, once: the grace keeps it.
	dns.srv(t, 0, 1, spare, 3, -1)
	dns.settled(t)
	dns.srv(t, 0, 1, spare, 3, 4)
	dns.settled(t)
	steady("an answer missing a target")

	// NXDOMAIN, then an empty answer: errors, counted; nothing else.
	errs := make([]int64, len(clients))
	for i, c := range clients {
		errs[i] = c.TopologyInfo().SourceErrors
	}
	for _, s := range dns.servers {
		s.SetNXDomain(dnsSRV)
	}
	for i, c := range clients {
		waitFor(t, fmt.Sprintf("client %d counting NXDOMAIN", i), func() bool { return c.TopologyInfo().SourceErrors > errs[i] })
		errs[i] = c.TopologyInfo().SourceErrors
	}
	steady("NXDOMAIN")
	for _, s := range dns.servers {
		s.SetEmpty(dnsSRV)
	}
	for i, c := range clients {
		waitFor(t, fmt.Sprintf("client %d counting an empty answer", i), func() bool { return c.TopologyInfo().SourceErrors > errs[i] })
	}
	steady("an empty answer")
	for i, c := range clients {
		if s := c.TopologyInfo(); s.LastError == "" {
			t.Fatalf("client %d: TopologyInfo %+v; want the last error", i, s)
		}
	}
	dns.srv(t, 0, 1, spare, 3, 4)
	dns.settled(t)
	steady("the records back")
	if slices.ContainsFunc(c.Nodes(), func(n ring.Node) bool { return n.Addr == cl.addrs[2] }) {
		t.Fatalf("Nodes %v still list the old address %s", c.Nodes(), cl.addrs[2])
	}
}

// TestFollowDNSRemovedTarget: a StatefulSet scaled from 5 pods to 4. The
// pod is gone (its server stopped) before its target leaves the answers,
// and after the grace the DNS source drops it: the change has no migration,
// so the client runs one of Window, starting Lead after it, whose old
// placement holds the node that is gone. The keys it owned have nowhere
// to be copied from; what a user needs is that they can be written and
// read (as misses) on their new owners.
//
// It fails today: until the start, reads go to the old placement alone,
// the gone node; in the window every write of those keys must reach the
// old owner too, and fails (write, ops.go), unless Options.FailOpen
// forgives a node held down. For Lead + Window (30 s + 1 h by default)
// the keys of a removed pod can be neither read nor written.
func TestFollowDNSRemovedTarget(t *testing.T) {
	cl := newCluster(t, "memcached", 5)
	dns := newDNSFleet(t, cl, 1)
	dns.srv(t, 0, 1, 2, 3, 4)
	src := &topology.DNS{Name: dnsSRV, Server: dns.servers[0].Addr, Interval: 50 * time.Millisecond, Grace: 200 * time.Millisecond}
	c := cl.client(t, Options{Topology: &TopologyOptions{Source: src, Wait: 5 * time.Second, Skew: 50 * time.Millisecond,
		Lead: 200 * time.Millisecond, Window: time.Minute}})
	ctx := t.Context()
	var keys []string
	for i := 0; len(keys) < 20; i++ {
		if k := fmt.Sprint("k", i); c.Locate(k).Name == dnsTarget(4) {
			keys = append(keys, k)
		}
	}
	v := c.TopologyInfo().Version
	cl.stop(4)
	dns.srv(t, 0, 1, 2, 3, -1)
	waitFor(t, "the target dropped", func() bool { return c.TopologyInfo().Version != v })
	waitFor(t, "the window", func() bool { return c.TopologyInfo().Phase == topology.During })
	for _, k := range keys {
		if err := c.Set(ctx, k, []byte("v"), 0); err != nil {
			t.Fatalf("Set(%s) in the window after its node left: %v; want it stored on its new owner, %v", k, err, c.Locate(k))
		}
		mustGet(t, c, k, "v")
	}
}

// TestBareTopologyStartedDuringLead pins a limitation docs/fleet.md states:
// a change without a migration (DNS, a bare node list) carries no start,
// so a process that starts during another's lead (a restart, a scale-up of
// the application) knows nothing of the old nodes and runs the new ones
// alone. Its writes of moved keys reach their new owners only, while the
// other, before its start, reads the old owners: it reads the value one
// write old, for every moved key. A published migration (etcd, a file with
// one) does not have it: the newcomer resumes it. If this test fails, the
// limitation is gone: update docs/fleet.md.
func TestBareTopologyStartedDuringLead(t *testing.T) {
	cl := newCluster(t, "redis-server", 4)
	ctx := t.Context()
	t1 := &topology.Topology{Version: 1, Nodes: cl.nodes(0, 1, 2)}
	t2 := &topology.Topology{Version: 2, Nodes: cl.nodes()} // no migration
	srcA := make(chanSource, 1)
	srcA.publish(t1)
	optsA := followOpts(srcA)
	optsA.Topology.Lead, optsA.Topology.Window = time.Minute, time.Minute
	a := cl.client(t, optsA)
	moved := movedBetween(t, t1.Nodes, t2.Nodes, 20)
	for _, k := range moved {
		if err := a.Set(ctx, k, []byte("v1"), 0); err != nil {
			t.Fatal(err)
		}
	}
	srcA.publish(t2)
	waitFor(t, "version 2 in the first process", func() bool { return a.TopologyInfo().Version == 2 })
	if s := a.TopologyInfo(); s.Phase != topology.Before {
		t.Fatalf("the first process: %+v; want it waiting for its start", s)
	}

	srcB := make(chanSource, 1)
	srcB.publish(t2) // what the source says when the second process starts
	b := cl.client(t, followOpts(srcB))
	if m := b.Migration(); m.Active || len(b.Nodes()) != 4 {
		t.Fatalf("the newcomer: migration %+v, Nodes %v; want the new nodes alone", m, b.Nodes())
	}
	stale := 0
	for _, k := range moved {
		if err := b.Set(ctx, k, []byte("v2"), 0); err != nil {
			t.Fatal(err)
		}
		if v, err := a.Get(ctx, k); err == nil && string(v) == "v1" {
			stale++
		}
	}
	if stale != len(moved) {
		t.Fatalf("%d of %d moved keys read stale by the process in its lead; the limitation docs/fleet.md states is gone or changed", stale, len(moved))
	}
	t.Logf("%d of %d moved keys read one write old", stale, len(moved))
}
