package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/cmd/shardcache/internal/balance"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/topofile"
)

const balanceAbout = `Reads every node's server (Redis INFO, Memcached stats: items, memory, its
limit, evictions), prints how the data sits on the nodes beside their ring
shares, and proposes weights that even out memory use: each node the share
at which every node fills the same fraction of its limit. A node's data is
its base (what the empty server takes: Redis used_memory_startup) plus its
bytes per unit of ring share times its share, so the weights go as its
memory limit over its bytes per unit of share; then they are corrected, a
few rounds, for where the ring's exact shares stray from the weights, and
normalised so that the median node keeps its weight (fewest keys move),
rounded to three significant digits. A node that evicts holds less than its
share puts on it: its bytes per unit of share are taken as the other nodes'
mean. A Redis without maxmemory is taken at the machine's memory.

Then it prints the change as "shardcache plan" does: the shares before and
after, and the keys that move. It proposes; an operator applies: --write
FILE writes the node list with the new weights, for Client.Reshard or
"shardcache topology publish --to FILE", and "shardcache sweep" copies the
moved keys during the window. Keys that moved stay on their old node until
their TTL or its evictions remove them, so its memory falls with them.

Nodes that hold almost nothing cannot be balanced: their memory is then
mostly the servers' own and a handful of keys, and weights proposed from it
follow that noise and move keys for nothing. Below a mean of 10% of their
limits, with no node evicting, balance refuses to propose (exit status 1)
and says so; --allow-low-fill proposes anyway, with a warning on stderr and
in the output. Run it once the cache holds its working set.

The nodes: --nodes, or the fleet's topology (--etcd with --key, --file or
--dns), whose nodes after any migration it describes are read.`

// balanceNode is one node's reading and proposal, in --json.
type balanceNode struct {
	Name   string  `json:"name"`
	Addr   string  `json:"addr"`
	Weight float64 `json:"weight"`
	// What the server says.
	Items       int64 `json:"items"`
	Bytes       int64 `json:"bytes"`
	BaseBytes   int64 `json:"base_bytes"`
	MemoryLimit int64 `json:"memory_limit"`
	// LimitFrom says where MemoryLimit comes from: "maxmemory",
	// "limit_maxbytes", or "system" for a Redis without maxmemory.
	LimitFrom string `json:"limit_from"`
	Evictions int64  `json:"evictions"`
	Hits      int64  `json:"hits"`
	Misses    int64  `json:"misses"`
	Policy    string `json:"eviction_policy,omitempty"`
	// What it means: fill is bytes over the limit; bytes_per_share the
	// data's bytes per unit of ring share (assumed: the one the proposal
	// takes, for a node that evicts).
	Fill          float64 `json:"fill"`
	Share         float64 `json:"share"`
	BytesPerShare float64 `json:"bytes_per_share"`
	Evicting      bool    `json:"evicting"`
	Assumed       float64 `json:"assumed_bytes_per_share"`
	// The proposal.
	ProposedWeight float64 `json:"proposed_weight"`
	ProposedShare  float64 `json:"proposed_share"`
	ProjectedFill  float64 `json:"projected_fill"`
}

// balanceReport is the output of balance; its JSON form is what --json
// prints.
type balanceReport struct {
	Backend string `json:"backend"`
	Vnodes  int    `json:"vnodes"`
	// Equalize is the ring's tolerance (--equalize, or the topology's), 0
	// for the classic ring.
	Equalize float64       `json:"equalize"`
	Nodes    []balanceNode `json:"nodes"`
	// Skew is the max/mean of the nodes' fills, CV their coefficient of
	// variation; Projected* the same with the proposed weights.
	Skew          float64     `json:"fill_max_over_mean"`
	CV            float64     `json:"fill_cv"`
	ProjectedSkew float64     `json:"projected_fill_max_over_mean"`
	ProjectedCV   float64     `json:"projected_fill_cv"`
	TargetFill    float64     `json:"target_fill"`
	Proposed      string      `json:"proposed"` // the node list with the new weights
	Plan          *planReport `json:"plan"`
	Written       string      `json:"written,omitempty"`
	Notes         []string    `json:"notes,omitempty"`
	// Warning, with --allow-low-fill, says that the nodes fill too little
	// for the proposal to mean anything (balance.LowFill).
	Warning string `json:"warning,omitempty"`
}

func runBalance(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const cmd = "balance"
	fs := newFlagSet(cmd, "Propose node weights that even out the memory the servers use.", balanceAbout)
	backend := fs.String("backend", "redis", "the servers' protocol: redis or memcached")
	nodesFlag := fs.String("nodes", "", "the nodes: a node `list` (see below), or use the topology flags")
	src := addSourceFlags(fs.FlagSet, true)
	vnodes := fs.Int("vnodes", ring.DefaultVnodes, "ring points per unit of weight, as the client's Options.Vnodes")
	equalize := addEqualizeFlag(fs.FlagSet)
	hitRate := fs.Float64("hit-rate", 0.95, "the steady hit rate, in [0, 1), for the plan")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	write := fs.String("write", "", "write the node list with the proposed weights to `file` (JSON, or YAML for .yaml and .yml)")
	allowLow := fs.Bool("allow-low-fill", false, "propose weights even though the nodes fill under 10% of their memory on average and none evicts, with a warning: there the proposal follows the servers' own memory, not the data")
	connFlags := addConnFlags(fs.FlagSet)
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	var b client.Backend
	switch *backend {
	case "redis":
		b = client.Redis
	case "memcached":
		b = client.Memcached
	default:
		return badInput(stderr, cmd, "--backend %q: want redis or memcached", *backend)
	}
	switch {
	case *vnodes < 1 || *vnodes > ring.MaxVnodes:
		return badInput(stderr, cmd, "--vnodes %d: want 1..%d", *vnodes, ring.MaxVnodes)
	case !(*hitRate >= 0 && *hitRate < 1):
		return badInput(stderr, cmd, "--hit-rate %v: want a fraction in [0, 1)", *hitRate)
	}
	if err := checkEqualize(*equalize); err != nil {
		return badInput(stderr, cmd, "%v", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var notes []string
	var nodes []ring.Node
	if *nodesFlag != "" {
		if src.etcd != "" || src.file != "" || src.dns != "" {
			return badInput(stderr, cmd, "--nodes and --etcd, --file or --dns: give only one")
		}
		var err error
		if nodes, err = parseNodes(*nodesFlag); err != nil {
			return badInput(stderr, cmd, "--nodes: %v", err)
		}
	} else {
		if err := src.check(); err != nil {
			return badInput(stderr, cmd, "want --nodes, or %v", strings.TrimPrefix(err.Error(), "want "))
		}
		t, err := src.get(ctx)
		if err != nil {
			return failed(stderr, cmd, err)
		}
		nodes = t.Nodes
		if !set["equalize"] {
			*equalize = t.Equalize // the fleet's ring
		}
		if p := t.PhaseAt(time.Now()); t.Migration != nil && p != topology.After {
			notes = append(notes, fmt.Sprintf("the topology's migration is %s: the data has not settled on its nodes yet; balance after the window", p))
		}
	}
	if _, err := topology.Ring(nodes, *vnodes, *equalize); err != nil {
		return badInput(stderr, cmd, "the nodes: %v", err)
	}
	conn, err := connFlags.resolve(os.Getenv, stderr)
	if err != nil {
		return badInput(stderr, cmd, "%v", err)
	}
	if err := checkBackend(ctx, b, nodeServers(nodes), conn.tls,
		func(got client.Backend) string { return "--backend " + got.String() }); err != nil {
		return badInput(stderr, cmd, "--backend %v: %v", b, err)
	}
	opts := client.Options{Backend: b, Nodes: nodes, Vnodes: *vnodes, Equalize: *equalize}
	conn.apply(&opts)
	c, err := client.New(opts)
	if err != nil {
		return badInput(stderr, cmd, "%v", err)
	}
	usage, err := c.NodeStats(ctx)
	c.Close()
	if err != nil {
		for _, u := range usage {
			if u.Err != nil {
				fmt.Fprintf(stderr, "shardcache %s: %s\n", cmd, errText(u.Err))
			}
		}
		fmt.Fprintf(stderr, "shardcache %s: no proposal without every node's reading\n", cmd)
		return exitFail
	}
	rep, err := makeBalance(b, usage, planInput{from: nodes, vnodes: *vnodes, equalize: *equalize, hitRate: *hitRate}, *allowLow)
	if err != nil {
		return failed(stderr, cmd, err)
	}
	if rep.Warning != "" {
		fmt.Fprintf(stderr, "shardcache %s: WARNING: %s\n", cmd, rep.Warning)
	}
	rep.Notes = append(notes, rep.Notes...)
	if *write != "" {
		var weighted []ring.Node
		for _, n := range rep.Nodes {
			weighted = append(weighted, ring.Node{Name: n.Name, Addr: n.Addr, Weight: n.ProposedWeight})
		}
		data, err := topofile.Marshal(&topology.Topology{Nodes: weighted}, topofile.FormatOf(*write))
		if err == nil {
			err = os.WriteFile(*write, data, 0o644)
		}
		if err != nil {
			return failed(stderr, cmd, err)
		}
		rep.Written = *write
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return failed(stderr, cmd, err)
		}
		return exitOK
	}
	writeBalance(stdout, rep)
	return exitOK
}

// makeBalance reads the usage of the nodes in.from (in their order, usage
// sorted by name) into a proposal and its plan, on the ring of in.vnodes
// and in.equalize, with in.hitRate. Nodes that fill too little to be
// measured (balance.LowFill) are refused, unless allowLow: then the
// report carries a warning.
func makeBalance(b client.Backend, usage []client.NodeUsage, in planInput, allowLow bool) (*balanceReport, error) {
	nodes, vnodes := in.from, in.vnodes
	byAddr := map[string]client.NodeUsage{}
	for _, u := range usage {
		byAddr[u.Node.Addr] = u
	}
	rep := &balanceReport{Backend: b.String(), Vnodes: vnodes, Equalize: in.equalize}
	readings := make([]balance.Reading, len(nodes))
	limitFrom := make([]string, len(nodes))
	for i, n := range nodes {
		u := byAddr[n.Addr]
		limit, from := u.MemoryLimit, "maxmemory"
		if b == client.Memcached {
			from = "limit_maxbytes"
		}
		if limit == 0 {
			if limit, from = u.SystemMemory, "system"; limit == 0 {
				return nil, fmt.Errorf("node %s (%s): no memory limit, and the server does not tell the machine's memory", u.Node.Name, n.Addr)
			}
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s has no maxmemory: taken at the machine's memory, %s, which it shares with whatever else runs there",
				u.Node.Name, balance.Bytes(float64(limit))))
		}
		limitFrom[i] = from
		readings[i] = balance.Reading{Node: n, Bytes: u.Bytes, BaseBytes: u.BaseBytes, Limit: limit, Evictions: u.Evictions}
	}
	if mean, fullest, low := balance.LowFill(readings); low {
		what := fmt.Sprintf("the nodes fill %s of their memory limits on average (the fullest %s), under the %s below which balance cannot be measured: "+
			"what they hold is mostly the servers' own memory and a handful of keys, and weights proposed from it follow that, not the data, and move keys for nothing",
			pct(mean, 1), pct(fullest, 1), pct(balance.MinFill, 0))
		if !allowLow {
			return nil, fmt.Errorf("%s. No proposal: run balance once the cache holds its working set, or give --allow-low-fill to propose anyway", what)
		}
		rep.Warning = what + " (--allow-low-fill: proposed anyway)"
	}
	p, err := balance.Propose(readings, vnodes, in.equalize)
	if err != nil {
		return nil, err
	}
	for i, n := range p.Nodes {
		u := byAddr[n.Node.Addr]
		rep.Nodes = append(rep.Nodes, balanceNode{
			Name: n.Node.Name, Addr: n.Node.Addr, Weight: n.Node.Weight,
			Items: u.Items, Bytes: u.Bytes, BaseBytes: u.BaseBytes, MemoryLimit: n.Limit, LimitFrom: limitFrom[i],
			Evictions: u.Evictions, Hits: u.Hits, Misses: u.Misses, Policy: u.EvictionPolicy,
			Fill: n.Fill, Share: n.Share, BytesPerShare: n.Density, Evicting: n.Evicting, Assumed: n.Assumed,
			ProposedWeight: n.Weight, ProposedShare: n.NewShare, ProjectedFill: n.NewFill,
		})
		if u.EvictionPolicy == "noeviction" {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s's maxmemory-policy is noeviction: at its limit it refuses writes rather than evict", n.Node.Name))
		}
	}
	rep.Skew, rep.CV, rep.ProjectedSkew, rep.ProjectedCV, rep.TargetFill = p.Skew, p.CV, p.NewSkew, p.NewCV, p.Target
	rep.Notes = append(rep.Notes, p.Notes...)
	from := make([]ring.Node, len(p.Nodes))
	for i, n := range p.Nodes {
		from[i] = n.Node
	}
	rep.Proposed = formatNodes(p.Weighted())
	rep.Plan, err = makePlan(planInput{from: from, to: p.Weighted(), kind: &fromKind{kind: "ring"}, vnodes: vnodes, equalize: in.equalize, hitRate: in.hitRate})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// writeBalance prints the report as tables.
func writeBalance(w io.Writer, rep *balanceReport) {
	eq := ""
	if rep.Equalize > 0 {
		eq = ", the ring equalized to " + pct(rep.Equalize, 2)
	}
	fmt.Fprintf(w, "Balance of %s (%s), %s per unit of weight%s\n\n", count(len(rep.Nodes), "node", ""), rep.Backend, count(rep.Vnodes, "vnode", ""), eq)
	tw := newTable(w, 0)
	fmt.Fprintln(tw, "node\taddress\tweight\titems\tmemory\tlimit\tof limit\tevictions\tring share\tbytes per share\t")
	for _, n := range rep.Nodes {
		limit := balance.Bytes(float64(n.MemoryLimit))
		if n.LimitFrom == "system" {
			limit += " (system)"
		}
		perShare := balance.Bytes(n.BytesPerShare)
		if n.Evicting {
			perShare += " (evicting: taken as " + balance.Bytes(n.Assumed) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%g\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t\n", n.Name, n.Addr, n.Weight, n.Items,
			balance.Bytes(float64(n.Bytes)), limit, pct(n.Fill, 1), n.Evictions, pct(n.Share, 2), perShare)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nMemory over limit: max/mean %.3f, coefficient of variation %s.\n", rep.Skew, pct(rep.CV, 1))
	if rep.Warning != "" {
		fmt.Fprintf(w, "\nWARNING: %s.\n", rep.Warning)
	}

	fmt.Fprintln(w, "\nProposed weights (memory limit over bytes per unit of share, corrected for the ring's own skew):")
	tw = newTable(w, 0)
	fmt.Fprintln(tw, "node\tweight\tring share\tprojected of limit\t")
	for _, n := range rep.Nodes {
		fmt.Fprintf(tw, "%s\t%g → %g\t%s → %s\t%s → %s\t\n", n.Name, n.Weight, n.ProposedWeight,
			pct(n.Share, 2), pct(n.ProposedShare, 2), pct(n.Fill, 1), pct(n.ProjectedFill, 1))
	}
	tw.Flush()
	fmt.Fprintf(w, "Projected memory over limit: max/mean %.3f, coefficient of variation %s (every node at %s on a perfect ring).\n",
		rep.ProjectedSkew, pct(rep.ProjectedCV, 1), pct(rep.TargetFill, 1))
	fmt.Fprintf(w, "Proposed node list: %s\n", rep.Proposed)
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "Note: %s.\n", n)
	}

	fmt.Fprintln(w, "\nThe change, as `shardcache plan` prints it:")
	fmt.Fprintln(w)
	writePlan(w, rep.Plan)
	if rep.Written != "" {
		fmt.Fprintf(w, "\nWrote the proposed node list to %s: apply it with Reshard, or `shardcache topology publish --to %[1]s`,\n", rep.Written)
		fmt.Fprintln(w, "and `shardcache sweep` during the window.")
	}
}
