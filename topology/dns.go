package topology

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardcache/shardcache/ring"
)

// Defaults of DNS.
const (
	DefaultDNSInterval = 10 * time.Second
	// DefaultDNSTimeout bounds one resolution (the SRV query and its
	// targets' addresses).
	DefaultDNSTimeout = 5 * time.Second
)

// Errors of DNS.
var (
	// ErrNoAnswer is an answer without a usable node: NXDOMAIN, NOERROR with
	// no record, or SRV targets none of which resolves. It never empties
	// the ring.
	ErrNoAnswer = errors.New("shardcache/topology: DNS answer without nodes")
	// ErrResolve is any other failure to resolve: a timeout, SERVFAIL, a
	// refused connection.
	ErrResolve = errors.New("shardcache/topology: DNS resolution failed")
	// ErrBadDNSName is a Name that is neither HOST:PORT nor an SRV name.
	ErrBadDNSName = errors.New("shardcache/topology: bad DNS name (want HOST:PORT, or an SRV name such as _memcache._tcp.cache.example)")
)

// DNS is a Source that resolves the cache nodes, at an interval, in one of
// two ways, as dskit's dns+ and dnssrvnoa+ do:
//
//   - Name "host:port": each A and AAAA address of host is a node, named
//     after its address (ip:port). A server that comes back with a new
//     address is a new node.
//   - Name "_service._proto.name" (such as "_memcache._tcp.cache.ns.svc"):
//     each SRV target is a node named after the target (without the final
//     dot), at the first of its addresses (sorted) and the SRV port. A pod
//     of a Kubernetes StatefulSet behind a headless service that comes back
//     with a new IP keeps its name, so its place on the ring. SRV weights
//     and priorities are ignored (CoreDNS sets weights from the number of
//     records, which would move keys at each scaling); every node weighs 1.
//     A target listed with several ports gives one node per port, named
//     target:port.
//
// A node absent from an answer stays for Grace after the last answer that
// held it, so that one answer missing a target (a pod restarting, a lagging
// secondary) moves nothing. An answer with no node at all (NXDOMAIN, an
// empty answer) or a failure is an Update with an error (ErrNoAnswer,
// ErrResolve) and changes nothing. A topology is sent when its nodes
// change; its Version is its Digest, the same in every process that sees
// the same nodes.
type DNS struct {
	// Name is what to resolve, as above.
	Name string
	// Server is the DNS server to ask, HOST:PORT over UDP (TCP for long
	// answers); empty means the system's resolver configuration.
	Server string
	// Interval is the time between resolutions; 0 means DefaultDNSInterval.
	Interval time.Duration
	// Grace is how long a node absent from the answers is kept; 0 means
	// three intervals.
	Grace time.Duration
	// Timeout bounds one resolution; 0 means DefaultDNSTimeout.
	Timeout time.Duration
	// MaxRemovedShare is set on each topology sent (see Topology); 0 means
	// the default. Raise it for A records, whose names change with the
	// servers' addresses, if the whole fleet may restart at once.
	MaxRemovedShare float64
}

// dnsNode is a node with the last time an answer held it.
type dnsNode struct {
	addr string
	seen time.Time
}

// Watch implements Source.
func (d *DNS) Watch(ctx context.Context) <-chan Update {
	ch := make(chan Update)
	go d.watch(ctx, ch)
	return ch
}

func (d *DNS) watch(ctx context.Context, ch chan<- Update) {
	defer close(ch)
	interval := d.Interval
	if interval <= 0 {
		interval = DefaultDNSInterval
	}
	grace := d.Grace
	if grace <= 0 {
		grace = 3 * interval
	}
	nodes := map[string]dnsNode{}
	var last *Topology
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		answer, err := d.Resolve(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !send(ctx, ch, Update{Err: err}) {
				return
			}
			timer.Reset(interval)
			continue
		}
		now := time.Now()
		for _, n := range answer {
			nodes[n.Name] = dnsNode{addr: n.Addr, seen: now}
		}
		for name, n := range nodes {
			if now.Sub(n.seen) > grace {
				delete(nodes, name)
			}
		}
		t := &Topology{MaxRemovedShare: d.MaxRemovedShare}
		for _, name := range slices.Sorted(maps.Keys(nodes)) {
			t.Nodes = append(t.Nodes, ring.Node{Name: name, Addr: nodes[name].addr, Weight: 1})
		}
		t.Version = t.Digest()
		if err := t.Check(); err != nil { // two names on one address, say
			if !send(ctx, ch, Update{Err: fmt.Errorf("%s: %w", d.Name, err)}) {
				return
			}
		} else if !t.Equal(last) {
			last = t
			if !send(ctx, ch, Update{Topology: t.Clone()}) {
				return
			}
		}
		timer.Reset(interval)
	}
}

// resolver returns a resolver asking Server, or the system's.
func (d *DNS) resolver() *net.Resolver {
	if d.Server == "" {
		return net.DefaultResolver
	}
	server := d.Server
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dialer net.Dialer
			return dialer.DialContext(ctx, network, server)
		},
	}
}

// Resolve resolves Name once and returns the nodes of the answer, sorted
// by name, without the grace of Watch: what one answer holds.
func (d *DNS) Resolve(ctx context.Context) ([]ring.Node, error) {
	r := d.resolver()
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultDNSTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var nodes []ring.Node
	var err error
	if strings.HasPrefix(d.Name, "_") && !strings.Contains(d.Name, ":") {
		nodes, err = d.resolveSRV(ctx, r)
	} else {
		nodes, err = d.resolveHost(ctx, r)
	}
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoAnswer, d.Name)
	}
	slices.SortFunc(nodes, func(a, b ring.Node) int { return strings.Compare(a.Name, b.Name) })
	return nodes, nil
}

// resolveHost resolves host:port into a node per address.
func (d *DNS) resolveHost(ctx context.Context, r *net.Resolver) ([]ring.Node, error) {
	host, port, err := net.SplitHostPort(d.Name)
	if p, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("%w: %q", ErrBadDNSName, d.Name)
	}
	ips, err := lookupIPs(ctx, r, host)
	if err != nil {
		return nil, dnsError(d.Name, err)
	}
	nodes := make([]ring.Node, len(ips))
	for i, ip := range ips {
		addr := net.JoinHostPort(ip.String(), port)
		nodes[i] = ring.Node{Name: addr, Addr: addr, Weight: 1}
	}
	return nodes, nil
}

// resolveSRV resolves an SRV name into a node per target (and port).
func (d *DNS) resolveSRV(ctx context.Context, r *net.Resolver) ([]ring.Node, error) {
	_, srvs, err := r.LookupSRV(ctx, "", "", d.Name)
	if err != nil {
		return nil, dnsError(d.Name, err)
	}
	ports := map[string]int{}
	for _, s := range srvs {
		ports[strings.ToLower(strings.TrimSuffix(s.Target, "."))]++
	}
	var nodes []ring.Node
	var failed error
	for _, s := range srvs {
		target := strings.ToLower(strings.TrimSuffix(s.Target, "."))
		ips, err := lookupIPs(ctx, r, s.Target)
		if err != nil {
			failed = err // absent from this answer: Watch's grace keeps it
			continue
		}
		port := strconv.Itoa(int(s.Port))
		n := ring.Node{Name: target, Addr: net.JoinHostPort(ips[0].String(), port), Weight: 1}
		if ports[target] > 1 {
			n.Name = net.JoinHostPort(target, port)
		}
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 && failed != nil {
		return nil, dnsError(d.Name, failed)
	}
	return nodes, nil
}

// lookupIPs returns host's addresses sorted, IPv4 first.
func lookupIPs(ctx context.Context, r *net.Resolver, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	for i, ip := range ips {
		ips[i] = ip.Unmap()
	}
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(ips), nil
}

// dnsError wraps a resolver's error as ErrNoAnswer or ErrResolve.
func dnsError(name string, err error) error {
	var de *net.DNSError
	if errors.As(err, &de) && de.IsNotFound {
		return fmt.Errorf("%w: %s: %w", ErrNoAnswer, name, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrResolve, name, err)
}
