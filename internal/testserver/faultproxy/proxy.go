// Package faultproxy puts a fault-injection proxy (toxiproxy, run inside the
// test process, on loopback) between a client and a server, for the network
// faults that signals to the server cannot make: latency, a connection reset
// mid-reply, a black hole. It is apart from testserver so that only the
// tests that inject faults depend on toxiproxy.
package faultproxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a fault-injection proxy (toxiproxy, run inside the test process)
// between a client and one server, on a free loopback port: network faults
// that signals cannot make, each applied to open connections and new ones
// alike until Clear.
type Proxy struct {
	// Addr is where clients connect, "127.0.0.1:PORT".
	Addr string

	t     testing.TB
	p     *toxiproxy.Proxy
	names []string // the toxics in place
}

// New starts a proxy to upstream, stopped in t.Cleanup.
func New(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "shardcache", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("faultproxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{Addr: p.Listen, t: t, p: p}
}

// Latency delays every reply by d.
func (p *Proxy) Latency(d time.Duration) {
	p.add("latency", "downstream", fmt.Sprintf(`{"latency": %d}`, d.Milliseconds()))
}

// Bandwidth limits every reply to kbps kilobytes a second, on each
// connection apart: a large value comes back slowly while a small answer on
// another connection does not wait.
func (p *Proxy) Bandwidth(kbps int) {
	p.add("bandwidth", "downstream", fmt.Sprintf(`{"rate": %d}`, kbps))
}

// ResetPeer resets each connection (TCP RST) as soon as a reply comes
// through it: the client sees its connection reset mid-call.
func (p *Proxy) ResetPeer() {
	p.add("reset_peer", "downstream", `{"timeout": 0}`)
}

// BlackHole drops everything the client sends and keeps its connections
// open: calls get no answer, as from a host whose packets are dropped.
func (p *Proxy) BlackHole() {
	p.add("timeout", "upstream", `{"timeout": 0}`)
}

// Clear removes every fault.
func (p *Proxy) Clear() {
	p.t.Helper()
	for _, name := range p.names {
		if err := p.p.Toxics.RemoveToxic(p.t.Context(), name); err != nil {
			p.t.Fatalf("faultproxy: remove %s: %v", name, err)
		}
	}
	p.names = nil
}

func (p *Proxy) add(typ, stream, attrs string) {
	p.t.Helper()
	body := fmt.Sprintf(`{"type": %q, "stream": %q, "attributes": %s}`, typ, stream, attrs)
	w, err := p.p.Toxics.AddToxicJson(strings.NewReader(body))
	if err != nil {
		p.t.Fatalf("faultproxy: add %s: %v", typ, err)
	}
	p.names = append(p.names, w.Name)
}
