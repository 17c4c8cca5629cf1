package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/term"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/etcdsource"
	"github.com/shardcache/shardcache/topology/topofile"
)

const topologyAbout = `A fleet of processes follows one topology, from etcd (one key, watched),
a file or DNS, and moves to the next one together: "publish" writes a new
node list to etcd with a start time far enough ahead for every process to
receive it, and a window; until the start the processes still read the old
placement but invalidate on the new one, from it they read the new owners
first, and after the window the new placement alone (see the package doc of
topology for why no read is stale).

  publish   print the plan of a change, then write it to etcd
  show      print the topology, its version and its migration's phase
  status    how many processes run each version (etcd)
  watch     print each topology as the source sends it

Run "shardcache help topology COMMAND" for its flags.`

// topologyCommands are the subcommands of topology.
var topologyCommands = []command{
	{"publish", "print the plan of a change, then write it to etcd", runTopologyPublish},
	{"show", "print the topology, its version and its migration's phase", runTopologyShow},
	{"status", "how many processes run each version (etcd)", runTopologyStatus},
	{"watch", "print each topology as the source sends it", runTopologyWatch},
}

func runTopology(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "Usage: shardcache topology COMMAND [flags]\n\n%s\n", topologyAbout)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(stdout, "Usage: shardcache topology COMMAND [flags]\n\n%s\n", topologyAbout)
		return exitOK
	}
	for _, c := range topologyCommands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "shardcache topology: unknown command %q\n\n%s\n", args[0], topologyAbout)
	return exitUsage
}

// newTopologyFlagSet returns a flag set for a topology subcommand; the
// node-list grammar ends the help of those that read node lists.
func newTopologyFlagSet(name, synopsis, about string, nodeLists bool, _ io.Writer) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("topology "+name, flag.ContinueOnError)}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.help = func(w io.Writer) {
		fmt.Fprintf(w, "Usage: shardcache topology %s [flags]\n\n%s\n\n%s\n\nFlags:\n", name, synopsis, about)
		printFlags(w, fs.FlagSet)
		if nodeLists {
			fmt.Fprintf(w, "\n%s\n", nodesHelp)
		}
	}
	return fs
}

// sourceFlags say where a topology comes from: etcd, a file or DNS.
type sourceFlags struct {
	etcd, key      string
	file           string
	dns, dnsServer string
	dnsInterval    time.Duration
	dnsGrace       time.Duration
	timeout        time.Duration
	dialTimeout    time.Duration
	fileAllowed    bool // --file and --dns are defined
}

// defaultDialTimeout is --dial-timeout's default, etcdctl's: a connection
// to a reachable etcd takes milliseconds, and a command that cannot reach
// it says so soon.
const defaultDialTimeout = 2 * time.Second

// addSourceFlags defines --etcd and --key, and with files --file and --dns.
func addSourceFlags(fs *flag.FlagSet, files bool) *sourceFlags {
	f := &sourceFlags{fileAllowed: files}
	fs.StringVar(&f.etcd, "etcd", "", "the etcd cluster: comma-separated `endpoints`, such as 10.0.0.1:2379,10.0.0.2:2379")
	fs.StringVar(&f.key, "key", "", "with --etcd, the `key` that holds the topology, such as /shardcache/sessions")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "bound on each request to etcd or DNS")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", defaultDialTimeout, "with --etcd, how long to wait for a connection to one of the endpoints; then the command fails, naming each endpoint and why it could not connect")
	if files {
		fs.StringVar(&f.file, "file", "", "read the topology from a JSON or YAML `file` instead (a node file, or a whole topology)")
		fs.StringVar(&f.dns, "dns", "", "resolve the nodes instead: HOST:PORT (A/AAAA) or an SRV `name` such as _memcache._tcp.cache.ns.svc.cluster.local")
		fs.StringVar(&f.dnsServer, "dns-server", "", "with --dns, the DNS server to ask, HOST:PORT (default: the system's)")
		fs.DurationVar(&f.dnsInterval, "dns-interval", topology.DefaultDNSInterval, "with --dns, the time between resolutions (watch)")
		fs.DurationVar(&f.dnsGrace, "dns-grace", 0, "with --dns, how long a node absent from the answers is kept (default: three intervals)")
	}
	return f
}

// check refuses no source, two sources, and --key without --etcd.
func (f *sourceFlags) check() error {
	n := 0
	for _, s := range []string{f.etcd, f.file, f.dns} {
		if s != "" {
			n++
		}
	}
	switch {
	case n == 0 && f.fileAllowed:
		return errors.New("want one of --etcd (with --key), --file or --dns")
	case n == 0:
		return errors.New("want --etcd and --key")
	case n > 1:
		return errors.New("--etcd, --file and --dns: give only one")
	case f.etcd != "" && f.key == "":
		return errors.New("--etcd: want --key too")
	case f.etcd == "" && f.key != "":
		return errors.New("--key: only with --etcd")
	case f.timeout <= 0:
		return fmt.Errorf("--timeout %v: want more than 0", f.timeout)
	case f.dialTimeout <= 0:
		return fmt.Errorf("--dial-timeout %v: want more than 0", f.dialTimeout)
	case f.dns != "" && f.dnsInterval <= 0:
		return fmt.Errorf("--dns-interval %v: want more than 0", f.dnsInterval)
	}
	return nil
}

// what names the source, for output.
func (f *sourceFlags) what() string {
	switch {
	case f.etcd != "":
		return "etcd " + f.key
	case f.file != "":
		return "file " + f.file
	}
	return "DNS " + f.dns
}

// etcdSource connects to etcd, waiting up to --dial-timeout for a
// connection (waitConnected); close closes the client.
func (f *sourceFlags) etcdSource(ctx context.Context) (src *etcdsource.Source, close func(), err error) {
	var endpoints []string
	for e := range strings.SplitSeq(f.etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			endpoints = append(endpoints, e)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: f.dialTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, fmt.Errorf("etcd %s: %w", f.etcd, err)
	}
	if err := waitConnected(ctx, cli.ActiveConnection(), endpoints, f.dialTimeout); err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return &etcdsource.Source{Client: cli, Key: f.key}, func() { _ = cli.Close() }, nil
}

// waitConnected waits up to timeout for conn, an etcd client's connection
// to endpoints, to be ready, and otherwise returns an error naming each
// endpoint and why it could not connect. The etcd client itself waits
// for a connection as long as each request's context lasts, then says
// only "context deadline exceeded", without the endpoint or the cause.
// A refused connection fails at once: every endpoint has failed once.
func waitConnected(ctx context.Context, conn *grpc.ClientConn, endpoints []string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if s == connectivity.TransientFailure || s == connectivity.Shutdown || !conn.WaitForStateChange(wctx, s) {
			if err := ctx.Err(); err != nil {
				return err // interrupted
			}
			return fmt.Errorf("etcd %s: cannot connect (--dial-timeout %v): %s",
				strings.Join(endpoints, ","), timeout, strings.Join(dialCauses(ctx, endpoints, timeout), "; "))
		}
	}
	return nil
}

// dialCauses says, for each endpoint, why gRPC could not connect to it,
// which its client does not tell: it dials each, at once, as gRPC does.
// One that accepts the connection is not etcd's gRPC, or wants TLS.
func dialCauses(ctx context.Context, endpoints []string, timeout time.Duration) []string {
	causes := make([]string, len(endpoints))
	var wg sync.WaitGroup
	for i, e := range endpoints {
		wg.Go(func() {
			network, addr := "tcp", e
			if _, rest, ok := strings.Cut(addr, "://"); ok {
				addr = rest
			}
			if rest, ok := strings.CutPrefix(addr, "unix:"); ok {
				network, addr = "unix", rest
			}
			d := net.Dialer{Timeout: timeout}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				var op *net.OpError
				if errors.As(err, &op) {
					err = op.Err // without "dial tcp ADDR: ", said once before
				}
				causes[i] = fmt.Sprintf("%s: %v", e, err)
				return
			}
			_ = c.Close()
			causes[i] = e + ": accepts connections, but no etcd answered on them (another service on that port? one that wants TLS?)"
		})
	}
	wg.Wait()
	return causes
}

// dnsSource is the DNS source of the flags.
func (f *sourceFlags) dnsSource() *topology.DNS {
	return &topology.DNS{Name: f.dns, Server: f.dnsServer, Interval: f.dnsInterval, Grace: f.dnsGrace, Timeout: f.timeout}
}

// source returns the flags' source and a function releasing it.
func (f *sourceFlags) source(ctx context.Context) (topology.Source, func(), error) {
	switch {
	case f.etcd != "":
		return f.etcdSource(ctx)
	case f.file != "":
		return &topofile.Source{Path: f.file}, func() {}, nil
	}
	return f.dnsSource(), func() {}, nil
}

// get reads the topology once.
func (f *sourceFlags) get(ctx context.Context) (*topology.Topology, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	switch {
	case f.etcd != "":
		src, closeSrc, err := f.etcdSource(ctx)
		if err != nil {
			return nil, err
		}
		defer closeSrc()
		return src.Get(ctx)
	case f.file != "":
		t, err := topofile.ReadFile(f.file)
		if err == nil && t.Version == 0 {
			t.Version = t.Digest() // as the File source does
		}
		return t, err
	}
	nodes, err := f.dnsSource().Resolve(ctx)
	if err != nil {
		return nil, err
	}
	t := &topology.Topology{Nodes: nodes}
	t.Version = t.Digest()
	return t, t.Check()
}

const publishAbout = `Reads the topology at --key, prints the plan of the change from its nodes
(or --from) to --to as "shardcache plan" does, asks for confirmation (or
--yes), and writes the new topology with a migration that starts --start-in
after the write and lasts --window. The write compares the key's revision
with the one read: if another publisher wrote in between, nothing is written
and publish fails. Without a topology at --key, the --to nodes are the first
one, without a migration (unless --from is given).

A change that removes more than half of the weight at once is refused by
publish and by every process; --max-removed-share allows more for this
change only. A refused change fails with exit status 1 and the reason.

A value at --key that does not parse is not written over: the processes
kept the last topology that parsed, and check the change against it, which
publish cannot. --overwrite-bad-value writes over it, checking the change
against --from: give the nodes the processes run.

A change that adds nodes is checked first: each added node must hold no
keys (client.Client.CheckEmpty), for a node added back still has the
values it held when it left, older than what was written since, and every
process would read them. Give the servers' --backend (and the connection
flags) for the check; flush a node that fails it, or publish without the
check with --skip-empty-check.

--start-in must leave every process the time to receive the topology (etcd
delivers within a second to a process that is connected) and you the time
to check "shardcache topology status". The window, as a migration's: with
"shardcache sweep" long enough for the sweep, else the longest TTL.

` + fromKindHelp

func runTopologyPublish(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const cmd = "topology publish"
	fs := newTopologyFlagSet("publish", "Publish a change of cache nodes to a fleet, through etcd.", publishAbout, true, stderr)
	src := addSourceFlags(fs.FlagSet, false)
	to := fs.String("to", "", "the nodes after the change: a node `list` (see below)")
	from := fs.String("from", "", "the nodes now, a node `list` (default: the nodes of the topology at --key)")
	kind := addFromKindFlags(fs.FlagSet)
	window := fs.Duration("window", time.Hour, "how long the old placement is still read after the start")
	startIn := fs.Duration("start-in", 2*time.Minute, "the start, after the write: the time every process has to receive the topology")
	share := fs.Float64("max-removed-share", 0, "allow this change to remove up to this fraction of the weight, in (0, 1] (default: topology.DefaultMaxRemovedShare, one half)")
	vnodes := fs.Int("vnodes", ring.DefaultVnodes, "ring points per unit of weight, for the plan: the client's Options.Vnodes")
	hitRate := fs.Float64("hit-rate", 0.95, "the steady hit rate, in [0, 1), for the plan")
	yes := fs.Bool("yes", false, "publish without asking")
	dryRun := fs.Bool("dry-run", false, "print the plan and stop")
	backend := fs.String("backend", "", "the servers' protocol, redis or memcached, for the check that the added nodes hold no keys")
	skipCheck := fs.Bool("skip-empty-check", false, "publish without checking that the added nodes hold no keys (a node added back with old keys serves them)")
	connFlags := addConnFlags(fs.FlagSet)
	replace := fs.Bool("replace-running", false, "publish even though the topology at --key has a migration not over yet (keys only its old nodes hold are then lost)")
	overwrite := fs.Bool("overwrite-bad-value", false, "publish even though the value at --key does not parse; the change is checked against --from, which should be the nodes the processes run (they kept the last topology that parsed)")
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch err := src.check(); {
	case err != nil:
		return badInput(stderr, cmd, "%v", err)
	case *to == "":
		return badInput(stderr, cmd, "want --to, the nodes after the change")
	case *window < 0:
		return badInput(stderr, cmd, "--window %v: want 0 or more", *window)
	case *startIn < 0:
		return badInput(stderr, cmd, "--start-in %v: want 0 or more", *startIn)
	case *vnodes < 1 || *vnodes > ring.MaxVnodes:
		return badInput(stderr, cmd, "--vnodes %d: want 1..%d", *vnodes, ring.MaxVnodes)
	case !(*hitRate >= 0 && *hitRate < 1):
		return badInput(stderr, cmd, "--hit-rate %v: want a fraction in [0, 1)", *hitRate)
	case set["max-removed-share"] && !(*share > 0 && *share <= 1):
		return badInput(stderr, cmd, "--max-removed-share %v: want a fraction in (0, 1]", *share)
	}
	if err := kind.check(set); err != nil {
		return badInput(stderr, cmd, "%v", err)
	}
	var b client.Backend // used only once --backend is given (see the check below)
	switch *backend {
	case "", "redis":
		b = client.Redis
	case "memcached":
		b = client.Memcached
	default:
		return badInput(stderr, cmd, "--backend %q: want redis or memcached", *backend)
	}
	toNodes, err := parseNodes(*to)
	if err == nil {
		err = noZones(toNodes)
	}
	if err != nil {
		return badInput(stderr, cmd, "--to: %v", err)
	}
	var fromNodes []ring.Node
	if *from != "" {
		if fromNodes, err = parseNodes(*from); err == nil {
			err = noZones(fromNodes)
		}
		if err != nil {
			return badInput(stderr, cmd, "--from: %v", err)
		}
	}

	es, closeSrc, err := src.etcdSource(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(err))
		return exitFail
	}
	defer closeSrc()
	rctx, cancel := context.WithTimeout(ctx, src.timeout)
	cur, err := es.Get(rctx)
	cancel()
	var expected int64
	switch {
	case errors.Is(err, etcdsource.ErrNotFound):
		cur = nil
	case errors.Is(err, etcdsource.ErrBadValue) && !*overwrite:
		// Nothing to check the change against, while every process
		// checks it against the last topology it received.
		return refused(stderr, cmd, "%s: nothing to check the change against, while the processes check it against the last topology that parsed; "+
			"publish over it with --overwrite-bad-value, and --from the nodes they run to check it against those", errText(err))
	case errors.Is(err, etcdsource.ErrBadValue):
		// Replaced by what is published, on its revision.
		checked := "checked against --from"
		if fromNodes == nil {
			checked = "unchecked: without --from there is nothing to check the change against"
		}
		fmt.Fprintf(stderr, "shardcache %s: %s; --overwrite-bad-value: publishing replaces it, %s\n", cmd, errText(err), checked)
		rctx, cancel := context.WithTimeout(ctx, src.timeout)
		st, serr := es.Status(rctx)
		cancel()
		if serr != nil {
			fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(serr))
			return exitFail
		}
		cur, expected = nil, st.Version
	case err != nil:
		fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(err))
		return exitFail
	default:
		expected = cur.Version
	}
	if cur != nil && !*replace {
		if p := cur.PhaseAt(time.Now()); p == topology.Before || p == topology.During {
			return refused(stderr, cmd, "the migration of version %d is %s until %s: publish after it, or --replace-running",
				cur.Version, p, cur.Migration.End().Format(time.RFC3339))
		}
	}
	if fromNodes == nil && cur != nil {
		fromNodes = cur.Nodes
	}

	// An equalized fleet stays so, on both sides of the change: the
	// tolerance is part of the placement.
	equalize := 0.0
	if cur != nil {
		equalize = cur.Equalize
	}
	next := &topology.Topology{Nodes: toNodes, Equalize: equalize, MaxRemovedShare: *share}
	if fromNodes != nil {
		m := &topology.Migration{Window: *window}
		if kind.kind != "ring" {
			m.FromKind, m.FromHash, m.FromHashTag = topology.Kind(kind.kind), kind.hash, kind.tag
		} else {
			m.FromEqualize = equalize
		}
		if !(&topology.Topology{Nodes: fromNodes}).Equal(&topology.Topology{Nodes: toNodes}) {
			m.From = fromNodes
		} else if m.FromKind == "" {
			return refused(stderr, cmd, "--to: the nodes are those of the topology now (version %d): nothing to publish", expected)
		}
		next.Migration = m
	}

	// The plan, as "shardcache plan" prints it.
	if cur != nil {
		fmt.Fprintf(stdout, "Topology at %s: version %d, %s", src.key, cur.Version, nodeCount(len(cur.Nodes)))
		if cur.Migration != nil {
			fmt.Fprintf(stdout, ", its migration %s", cur.PhaseAt(time.Now()))
		}
		fmt.Fprintln(stdout)
	} else {
		fmt.Fprintf(stdout, "No topology at %s yet.\n", src.key)
	}
	if next.Migration != nil {
		rep, err := makePlan(planInput{from: fromNodes, to: toNodes, kind: kind, vnodes: *vnodes, equalize: equalize, hitRate: *hitRate})
		if err != nil {
			return badInput(stderr, cmd, "%v", err)
		}
		fmt.Fprintln(stdout)
		writePlan(stdout, rep)
		fmt.Fprintf(stdout, "\nMigration: starts %v after the write, window %v.\n", *startIn, *window)
	} else {
		fmt.Fprintf(stdout, "First topology: %s, without a migration.\n", formatNodes(toNodes))
	}
	rctx, cancel = context.WithTimeout(ctx, src.timeout)
	if st, err := es.Status(rctx); err == nil && len(st.Processes) > 0 {
		fmt.Fprintf(stdout, "Fleet: %s.\n", st)
	}
	cancel()

	// Refused here as every process would refuse it.
	next.Migration = withStart(next.Migration, time.Now().Add(*startIn))
	prev := cur
	if prev == nil && fromNodes != nil {
		prev = &topology.Topology{Nodes: fromNodes}
	}
	if err := topology.Validate(prev, next); err != nil {
		return refused(stderr, cmd, "%v", err)
	}
	// Nodes a running migration still writes to (--replace-running) are
	// in use, not added.
	inUse := fromNodes
	if cur != nil && cur.Migration != nil {
		inUse = append(slices.Clone(inUse), cur.Migration.From...)
	}
	if add := ring.Added(inUse, toNodes); next.Migration != nil && len(add) > 0 && !*skipCheck {
		if *backend == "" {
			return badInput(stderr, cmd, "the change adds %s: give --backend, so that publish checks they hold no keys, or --skip-empty-check", formatNodes(add))
		}
		conn, err := connFlags.resolve(os.Getenv, stderr)
		if err != nil {
			return badInput(stderr, cmd, "%v", err)
		}
		if err := checkBackend(ctx, b, nodeServers(add), conn.tls,
			func(got client.Backend) string { return "--backend " + got.String() }); err != nil {
			return badInput(stderr, cmd, "--backend %v: %v", b, err)
		}
		if err := checkAdded(ctx, b, conn, add); err != nil {
			return failed(stderr, cmd, err)
		}
		fmt.Fprintf(stdout, "Checked: %s hold no keys.\n", formatNodes(add))
	}
	if *dryRun {
		fmt.Fprintln(stdout, "Dry run: nothing published.")
		return exitOK
	}
	if !*yes {
		ok, err := confirm(stdout, "Publish? [y/N] ")
		if err != nil {
			return badInput(stderr, cmd, "%v", err)
		}
		if !ok {
			fmt.Fprintln(stdout, "Nothing published.")
			return exitOK
		}
	}
	// The start counts from the write, not from the plan's reading.
	next.Migration = withStart(next.Migration, time.Now().Add(*startIn))
	rctx, cancel = context.WithTimeout(ctx, src.timeout)
	defer cancel()
	var opts []etcdsource.PublishOption
	if *overwrite {
		// The processes check the change against the nodes they run:
		// --from, when given (prev is then of it; nil otherwise).
		opts = append(opts, etcdsource.OverwriteBadValue(prev))
	}
	version, err := es.Publish(rctx, next, expected, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(err))
		return exitFail
	}
	fmt.Fprintf(stdout, "Published version %d at %s", version, src.key)
	if m := next.Migration; m != nil {
		fmt.Fprintf(stdout, ": start %s, window %v, end %s", m.Start.Format(time.RFC3339), m.Window, m.End().Format(time.RFC3339))
	}
	fmt.Fprintln(stdout, ".")
	return exitOK
}

// withStart returns m with its start at, to the second (nil for nil).
func withStart(m *topology.Migration, at time.Time) *topology.Migration {
	if m == nil {
		return nil
	}
	c := *m
	c.Start = at.Truncate(time.Second).Add(time.Second).UTC()
	return &c
}

// confirm asks a question on the terminal; without one it is an error,
// so that a script does not publish unless it says --yes.
func confirm(stdout io.Writer, question string) (bool, error) {
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return false, errors.New("no terminal to confirm on: add --yes to publish, or --dry-run to see the plan")
	}
	fmt.Fprint(stdout, question)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return false, nil
	}
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes", nil
}

const showAbout = `Prints the topology at its source: its version, its nodes and, with a
migration, where it stands (before the start, during the window, after),
or with --json or --yaml its encoding, as publish writes it and a topology
file holds it.`

func runTopologyShow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const cmd = "topology show"
	fs := newTopologyFlagSet("show", "Show a fleet's topology.", showAbout, false, stderr)
	src := addSourceFlags(fs.FlagSet, true)
	asJSON := fs.Bool("json", false, "print the topology as JSON")
	asYAML := fs.Bool("yaml", false, "print the topology as YAML")
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	if err := src.check(); err != nil {
		return badInput(stderr, cmd, "%v", err)
	}
	if *asJSON && *asYAML {
		return badInput(stderr, cmd, "--json and --yaml: give only one")
	}
	t, err := src.get(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(err))
		return exitFail
	}
	if *asJSON || *asYAML {
		f := topofile.JSON
		if *asYAML {
			f = topofile.YAML
		}
		data, err := topofile.Marshal(t, f)
		if err != nil {
			fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(err))
			return exitFail
		}
		_, _ = stdout.Write(data)
		return exitOK
	}
	writeTopology(stdout, src.what(), t, time.Now())
	return exitOK
}

// writeTopology prints t as a table, with its migration's phase at now.
func writeTopology(w io.Writer, from string, t *topology.Topology, now time.Time) {
	fmt.Fprintf(w, "Topology from %s: version %d, %s\n", from, t.Version, nodeCount(len(t.Nodes)))
	tw := newTable(w, 0)
	fmt.Fprintln(tw, "node\taddress\tweight\t")
	for _, n := range t.Nodes {
		name := n.Name
		if name == "" {
			name = n.Addr
		}
		fmt.Fprintf(tw, "%s\t%s\t%g\t\n", name, n.Addr, max(n.Weight, 1))
	}
	tw.Flush()
	if t.Equalize > 0 {
		fmt.Fprintf(w, "The ring is equalized to %s (every client's Options.Equalize must be %g).\n", pct(t.Equalize, 2), t.Equalize)
	}
	if m := t.Migration; m != nil {
		kind := string(m.FromKind)
		if kind == "" {
			kind = "ring"
		}
		if m.FromEqualize > 0 {
			kind += " equalized to " + pct(m.FromEqualize, 2)
		}
		fmt.Fprintf(w, "Migration from %s (%s), start %s, window %v, end %s: %s",
			formatNodes(t.OldNodes()), kind, m.Start.Format(time.RFC3339), m.Window, m.End().Format(time.RFC3339), t.PhaseAt(now))
		switch t.PhaseAt(now) {
		case topology.Before:
			fmt.Fprintf(w, ", starts in %v", m.Start.Sub(now).Round(time.Second))
		case topology.During:
			fmt.Fprintf(w, ", ends in %v", m.End().Sub(now).Round(time.Second))
		}
		fmt.Fprintln(w)
	}
	if t.MaxRemovedShare != 0 {
		fmt.Fprintf(w, "This change may remove up to %s of the weight.\n", pct(t.MaxRemovedShare, 0))
	}
}

const statusAbout = `Prints how many processes run each version of the topology at --key, as
they registered it under their etcd leases ("12 processes on version 8, 1
still on 7"), then each process. A process that has lost etcd for longer
than its lease is not counted. Check it before a migration's start.`

func runTopologyStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const cmd = "topology status"
	fs := newTopologyFlagSet("status", "Show which version of the topology each process runs.", statusAbout, false, stderr)
	src := addSourceFlags(fs.FlagSet, false)
	asJSON := fs.Bool("json", false, "print JSON: version and processes (id → version)")
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	if err := src.check(); err != nil {
		return badInput(stderr, cmd, "%v", err)
	}
	es, closeSrc, err := src.etcdSource(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(err))
		return exitFail
	}
	defer closeSrc()
	rctx, cancel := context.WithTimeout(ctx, src.timeout)
	defer cancel()
	st, err := es.Status(rctx)
	if err != nil {
		fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(err))
		return exitFail
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Version   int64            `json:"version"`
			Processes map[string]int64 `json:"processes"`
		}{st.Version, st.Processes})
		return exitOK
	}
	fmt.Fprintln(stdout, st)
	if len(st.Processes) > 0 {
		tw := newTable(stdout, 0)
		fmt.Fprintln(tw, "process\tversion\t")
		ids := make([]string, 0, len(st.Processes))
		for id := range st.Processes {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			fmt.Fprintf(tw, "%s\t%d\t\n", id, st.Processes[id])
		}
		tw.Flush()
	}
	return exitOK
}

const watchAbout = `Follows the topology at its source and prints a line for each update: the
version, the nodes and the migration's phase, or the error (a broken file,
an empty DNS answer, a lost etcd), which a process following the source
would log while it keeps its last topology. Until interrupted, or --count
updates.`

func runTopologyWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const cmd = "topology watch"
	fs := newTopologyFlagSet("watch", "Watch a fleet's topology change.", watchAbout, false, stderr)
	src := addSourceFlags(fs.FlagSet, true)
	count := fs.Int("count", 0, "stop after this many updates, errors included (0: until interrupted)")
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	if err := src.check(); err != nil {
		return badInput(stderr, cmd, "%v", err)
	}
	if *count < 0 {
		return badInput(stderr, cmd, "--count %d: want 0 or more", *count)
	}
	s, release, err := src.source(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(err))
		return exitFail
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := s.Watch(ctx)
	n := 0
	for u := range updates {
		now := time.Now()
		stamp := now.Format("15:04:05.000")
		if u.Err != nil {
			fmt.Fprintf(stdout, "%s error: %s\n", stamp, errText(u.Err))
		} else {
			t := u.Topology
			fmt.Fprintf(stdout, "%s version %d: %s %s", stamp, t.Version, nodeCount(len(t.Nodes)), formatNodes(t.Nodes))
			if m := t.Migration; m != nil {
				fmt.Fprintf(stdout, "; migration from %s, start %s, window %v: %s",
					nodeCount(len(t.OldNodes())), m.Start.Format(time.RFC3339), m.Window, t.PhaseAt(now))
			}
			fmt.Fprintln(stdout)
		}
		if n++; *count > 0 && n >= *count {
			cancel()
			for range updates { // until the source has stopped
			}
		}
	}
	return exitOK
}

// checkAdded checks that the nodes hold no keys (client.Client.CheckEmpty),
// through a client of those nodes alone.
func checkAdded(ctx context.Context, b client.Backend, conn *connection, nodes []ring.Node) error {
	opts := client.Options{Backend: b, Nodes: nodes}
	conn.apply(&opts)
	c, err := client.New(opts)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.CheckEmpty(ctx, nodes)
}
