package sim

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/ring"
)

// epoch is when a simulated clock starts: a fixed instant, so that runs are
// reproducible.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// cluster is the servers and the clock of one mode.
type cluster struct {
	from, to []ring.Node // the configuration's nodes, at the servers' addresses
	clock    clock
	close    func()
	// redis, when set, makes the client's go-redis clients (embedded
	// servers: see pipeDialer).
	redis func(ring.Node, *redis.Options) *redis.Client
	// servers are the embedded servers by address; nil on real ones.
	servers map[string]*embedded
}

// clock is a mode's time: what the client reads, and how a step ends.
type clock interface {
	Now() time.Time
	// begin starts step 0.
	begin()
	// advance ends step i (0-based): the clock reaches the start of step
	// i+1. late reports a step whose requests took longer than Step.
	advance(ctx context.Context, i int) (late bool, err error)
}

// serverAddrs lists the distinct addresses of cfg's nodes: those of From in
// order, then those only in To. Each is one server: a node that keeps its
// address keeps its data, whatever its name.
func serverAddrs(cfg *Config) []string {
	seen := map[string]bool{}
	var addrs []string
	for _, n := range append(cfg.From[:len(cfg.From):len(cfg.From)], cfg.To...) {
		if !seen[n.Addr] {
			seen[n.Addr] = true
			addrs = append(addrs, n.Addr)
		}
	}
	return addrs
}

// at returns nodes with their addresses replaced by the servers': addr maps
// a configured address to a server's.
func at(nodes []ring.Node, addr map[string]string) []ring.Node {
	out := make([]ring.Node, len(nodes))
	for i, n := range nodes {
		if n.Name == "" {
			n.Name = n.Addr // the name stays what the configuration says
		}
		n.Addr = addr[n.Addr]
		out[i] = n
	}
	return out
}

// embeddedCluster starts one miniredis per configured address, with a
// simulated clock that moves them all forward at the end of each step.
func embeddedCluster(cfg *Config) (*cluster, error) {
	clk := &simClock{step: cfg.Step}
	clk.now.Store(epoch.UnixNano())
	cl := &cluster{clock: clk, close: clk.close, servers: map[string]*embedded{}}
	addr := map[string]string{}
	for _, a := range serverAddrs(cfg) {
		s, err := cl.start()
		if err != nil {
			clk.close()
			return nil, fmt.Errorf("shardcache/sim: embedded server for %s: %w", a, err)
		}
		addr[a] = s
	}
	cl.from, cl.to = at(cfg.From, addr), at(cfg.To, addr)
	cl.redis = func(n ring.Node, opt *redis.Options) *redis.Client {
		opt.Dialer = pipeDialer(cl.servers[n.Addr]) // the client's options, dialed through a pipe
		// In-process servers over pipes: the client's 500ms would time
		// only how busy the machine is (a sweep's DUMPs under -race
		// beside other tests), not a server.
		opt.ReadTimeout, opt.WriteTimeout = embeddedTimeout, embeddedTimeout
		return redis.NewClient(opt)
	}
	return cl, nil
}

// start starts one more embedded server on the cluster's clock and
// returns its address. It must be called before the clients that use it
// are made: the servers map is not locked.
func (cl *cluster) start() (string, error) {
	m, err := miniredis.Run()
	if err != nil {
		return "", err
	}
	clk := cl.clock.(*simClock)
	m.SetTime(clk.Now())
	clk.servers = append(clk.servers, m)
	cl.servers[m.Addr()] = &embedded{m: m}
	return m.Addr(), nil
}

// embedded is one embedded server, which a kill run stops and restarts.
type embedded struct {
	m    *miniredis.Miniredis
	mu   sync.RWMutex // a dial against a stop or a restart: miniredis swaps its server unlocked
	down bool
}

// stop closes the server and every connection to it, as a process that
// dies: its clients' next reads find the connection closed, their dials
// are refused.
func (e *embedded) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.down = true
	e.m.Close()
}

// restart brings the server back empty, as a restarted cache process, at
// the same address; if another process took its port meanwhile, on
// another (the clients dial through pipes: the port is only a name).
func (e *embedded) restart() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m.FlushAll()
	if err := e.m.Restart(); err != nil {
		if err := e.m.StartAddr("127.0.0.1:0"); err != nil {
			return err
		}
	}
	e.down = false
	return nil
}

// embeddedTimeout bounds each command to the embedded servers.
const embeddedTimeout = 30 * time.Second

// simClock is a simulated clock over embedded servers.
type simClock struct {
	step    time.Duration
	now     atomic.Int64 // Unix nanoseconds; read by the client's goroutines
	servers []*miniredis.Miniredis
}

func (c *simClock) Now() time.Time { return time.Unix(0, c.now.Load()).UTC() }

func (c *simClock) begin() {}

// advance moves the clock and the servers one step on: FastForward expires
// the keys whose TTL has run out, SetTime keeps the servers' own notion of
// now in step.
func (c *simClock) advance(ctx context.Context, _ int) (bool, error) {
	now := time.Unix(0, c.now.Add(int64(c.step))).UTC()
	for _, m := range c.servers {
		m.FastForward(c.step)
		m.SetTime(now)
	}
	return false, ctx.Err()
}

func (c *simClock) close() {
	for _, m := range c.servers {
		m.Close()
	}
}

// realCluster maps the configured addresses onto cfg.Servers, in order,
// with the wall clock: each step lasts Step.
func realCluster(cfg *Config) *cluster {
	addr := map[string]string{}
	for i, a := range serverAddrs(cfg) {
		addr[a] = cfg.Servers[i]
	}
	return &cluster{
		from: at(cfg.From, addr), to: at(cfg.To, addr),
		clock: &wallClock{step: cfg.Step},
		close: func() {},
	}
}

// wallClock is real time, cut into steps of at least step.
type wallClock struct {
	step  time.Duration
	start time.Time // of the current step
}

func (c *wallClock) Now() time.Time { return time.Now() }

func (c *wallClock) begin() { c.start = time.Now() }

// advance waits for the end of the step. A step whose requests took longer
// than step is late: the next one starts at once.
func (c *wallClock) advance(ctx context.Context, _ int) (bool, error) {
	end := c.start.Add(c.step)
	wait := time.Until(end)
	if wait <= 0 {
		c.start = time.Now()
		return true, ctx.Err()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		c.start = end
		return false, nil
	}
}
