package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

const planAbout = `Computes, from the placements themselves, each node's share of the keys
before and after the change and its ideal share by weight, the fraction of
keys that change server and from which node to which, and the hit rate and
database load expected right after the switch, switching at once (mod-N,
ring) or with a dual-ring migration. With neither --from nor --to: a demo
change, 8 nodes down to 6; give one and give the other.

` + fromKindHelp + `

Exact or sampled: the fractions are exact (no keys sampled) from ring to ring,
ketama to ketama and modulo to modulo of one hash (from the points' arcs or
the hash's residues), and between ring, ketama and modulo, which hash keys
independently (from their exact shares). From rendezvous they are counted
over 1048576 keys located in both placements, and the output says so with the
standard error. The "how" line and the JSON fields exact, method, samples and
std_err say which.

JSON (--json) fields, all fractions of all keys:
  moved          keys whose node changes: by name from ring to ring
                 (ring.Moved), by server from any other kind
  server_moved   keys whose server (address) changes: what the hit rates
                 and the migration count; it differs from moved when a node
                 keeps its name on another server, or its server under
                 another name
  readdressed    keys that stay on their node by name, whose node changes
                 address: in server_moved, not in moved
  nodes          each node's weight, share and ideal share before and after;
                 starts_without, for a node that changes address, is its
                 share after the change, which its new server starts without
  min_moved      the least any placement must move: the ideal shares lost
  equalize       the ring's tolerance (--equalize), 0 for the classic ring
  balance        the deviation before and after: how far the node furthest
                 from its fair share is from it, relative (each node's is
                 its deviation, share / ideal - 1)
  equalization   with --equalize from a ring: the keys moved and the
                 deviations on the classic and the equalized rings, the
                 least any placement moves (minimum), and the equalized
                 ring's moves over the classic's and over the minimum
  mod_n_moved    what hash(key) % N over the same lists' servers would move
  flows          from each node to each (from == to: keys that stay)
  after_switch   hit rate, database load (× the steady one) and the share of
                 reads that also ask the old owner, per mode
  sweep          with --keys: the sweep's estimated seconds, the old node
                 that sets them and the keys it lists, and the keys copied

With --keys, plan also estimates how long "shardcache sweep" takes to copy
the moved keys at --sweep-rate: each old node is listed at that rate, all in
parallel, so the node with the most keys sets the duration (an estimate that
assumes each node can serve the rate).

` + replicasHelp

// formatNodes writes nodes in the node-list grammar.
func formatNodes(nodes []ring.Node) string {
	items := make([]string, len(nodes))
	for i, n := range nodes {
		items[i] = n.Addr
		if n.Name != "" && n.Name != n.Addr {
			items[i] = n.Name + "=" + items[i]
		}
		if n.Weight != 0 && n.Weight != 1 {
			items[i] += fmt.Sprintf("*%g", n.Weight)
		}
		if n.Zone != "" {
			items[i] += "@" + n.Zone
		}
	}
	return strings.Join(items, ",")
}

// planReport is the output of plan; its JSON form is what --json prints.
type planReport struct {
	From     string `json:"from"`
	FromKind string `json:"from_kind"`
	To       string `json:"to"`
	Vnodes   int    `json:"vnodes"`
	// Equalize is the rings' tolerance (--equalize), 0 for the classic
	// ring.
	Equalize float64 `json:"equalize"`
	// Balance is how far each side's node furthest from its fair share is
	// from it (ring.Deviation).
	Balance planBalance `json:"balance"`
	// Equalization is, with --equalize from a ring, what equalizing gives
	// and costs on this change.
	Equalization *planEqualization `json:"equalization,omitempty"`
	// Nodes are both lists' nodes by name, sorted.
	Nodes []planNode `json:"nodes"`
	// Moved is the fraction of keys whose node changes: by name from ring
	// to ring (ring.Moved), by server from another kind.
	Moved float64 `json:"moved"`
	// ServerMoved is the fraction whose server changes: Moved, unless a node
	// changes address but keeps its name, or the reverse.
	ServerMoved float64 `json:"server_moved"`
	// Readdressed is the fraction of keys that stay on their node by name
	// while the node changes address: the ring does not move them, the
	// migration, which routes by address, copies them.
	Readdressed float64 `json:"readdressed"`
	// Exact tells whether the fractions are exact; else they are counted
	// over Samples keys and StdErr is the standard error of ServerMoved.
	// Method says how they were found (ring.Change).
	Exact   bool    `json:"exact"`
	Method  string  `json:"method"`
	Samples int     `json:"samples,omitempty"`
	StdErr  float64 `json:"std_err,omitempty"`
	// MinMoved is the least any placement must move to reach the new ideal
	// shares: the sum of the ideal shares that nodes lose.
	MinMoved float64 `json:"min_moved"`
	// ModNMoved is what hash(key) % N over the same lists' servers, in
	// their order, would move (ring.Compare).
	ModNMoved float64 `json:"mod_n_moved"`
	// Flows are the fractions of all keys going from each node to each,
	// staying put included (from == to); ring.Flows.
	Flows []planFlow `json:"flows"`
	// SteadyHitRate is the hit rate assumed before the switch (--hit-rate).
	SteadyHitRate float64 `json:"steady_hit_rate"`
	// AfterSwitch is what each mode expects right after the switch.
	AfterSwitch []planOutcome `json:"after_switch"`
	// Replicas is, with --replicas above 1, where each key's copies are
	// and what they cost.
	Replicas *planReplicas `json:"replicas,omitempty"`
	// Sweep is the estimate of a sweep's duration, with --keys.
	Sweep *planSweep `json:"sweep,omitempty"`
	Notes []string   `json:"notes,omitempty"`
}

// planSweep estimates how long `shardcache sweep` (client.Sweep) takes: the
// old nodes are listed in parallel, each at the rate, so the one with the
// most keys sets the duration.
type planSweep struct {
	Keys    int64   `json:"keys"`    // keys in the whole cache (--keys)
	Rate    int     `json:"rate"`    // keys read per second per old node (--sweep-rate)
	Seconds float64 `json:"seconds"` // the estimated duration
	Slowest string  `json:"slowest"` // the old node with the most keys
	Listed  int64   `json:"listed"`  // the keys it lists
	Copies  int64   `json:"copies"`  // keys copied, over all nodes
}

type planNode struct {
	Name   string    `json:"name"`
	Addr   string    `json:"addr"`
	Before *planSide `json:"before"` // nil when the node is not in --from
	After  *planSide `json:"after"`  // nil when the node is not in --to
	// StartsWithout is, for a node that keeps its name on another server,
	// its share after the change: its new server starts without any of it.
	StartsWithout float64 `json:"starts_without,omitempty"`
}

type planSide struct {
	Name   string  `json:"name,omitempty"` // the node's name on this side, when not the row's
	Addr   string  `json:"addr"`
	Weight float64 `json:"weight"`
	Share  float64 `json:"share"` // fraction of the keys (ring.Shares, or ring.Compare's)
	Ideal  float64 `json:"ideal"` // weight over total weight
	// Deviation is Share over Ideal, less 1: how far the node is from its
	// fair share, relative.
	Deviation float64 `json:"deviation"`
	Zone      string  `json:"zone,omitempty"` // the node's zone, from the list's NODE@ZONE
	// ReplicaShare is, with --replicas above 1, the fraction of the keys
	// the node keeps a copy of (ring.ReplicaShares); Share is its part as
	// first replica.
	ReplicaShare float64 `json:"replica_share,omitempty"`
}

type planFlow struct {
	From  string  `json:"from"`
	To    string  `json:"to"`
	Share float64 `json:"share"`
}

type planOutcome struct {
	Mode    string  `json:"mode"`
	HitRate float64 `json:"hit_rate"`
	// DBLoad is the database's read load as a multiple of the steady one.
	DBLoad float64 `json:"db_load"`
	// SecondReads is the fraction of reads that also ask the old owner.
	SecondReads float64 `json:"second_reads"`
}

func runPlan(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("plan", "Plan a change of cache nodes.", planAbout)
	from := fs.String("from", "", "the nodes now: a node `list` (see below); with neither --from nor --to, the demo's "+demoFrom)
	to := fs.String("to", "", "the nodes after the change: a node `list`; with neither, the demo's "+demoTo)
	vnodes := fs.Int("vnodes", ring.DefaultVnodes, "ring points per unit of weight, as the client's Options.Vnodes")
	equalize := addEqualizeFlag(fs.FlagSet)
	kind := addFromKindFlags(fs.FlagSet)
	hitRate := fs.Float64("hit-rate", 0.95, "the steady hit rate, in [0, 1), from which to expect the rate after the switch")
	replicas := fs.Int("replicas", 1, "the copies of each key, as the client's Options.Replicas: above 1, plan shows where they are and what they cost")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	keys := fs.Int64("keys", 0, "the keys in the whole cache: with it, plan estimates how long a sweep takes")
	sweepRate := fs.Int("sweep-rate", client.DefaultSweepRate, "with --keys, the sweep's rate: keys read per second from each old node (shardcache sweep --rate)")
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	if *keys < 0 || *sweepRate <= 0 {
		return badInput(stderr, "plan", "--keys %d, --sweep-rate %d: want --keys of 0 or more, a --sweep-rate above 0", *keys, *sweepRate)
	}
	if !(*hitRate >= 0 && *hitRate < 1) {
		return badInput(stderr, "plan", "--hit-rate %v: want a fraction in [0, 1), such as 0.95", *hitRate)
	}
	if *replicas < 1 {
		return badInput(stderr, "plan", "--replicas %d: want 1 or more, the copies of each key", *replicas)
	}
	if *vnodes < 1 || *vnodes > ring.MaxVnodes {
		return badInput(stderr, "plan", "--vnodes %d: want 1..%d", *vnodes, ring.MaxVnodes)
	}
	if err := checkEqualize(*equalize); err != nil {
		return badInput(stderr, "plan", "%v", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := kind.check(set); err != nil {
		return badInput(stderr, "plan", "%v", err)
	}
	fromNodes, toNodes, err := nodeLists(*from, *to, set)
	if err != nil {
		return badInput(stderr, "plan", "%v", err)
	}
	// The mistakes of a list come before the want of the other.
	if _, err := kind.placement(fromNodes, *vnodes, *equalize); fromNodes != nil && err != nil {
		return badInput(stderr, "plan", "--from: %v", err)
	}
	if _, err := topology.Ring(toNodes, *vnodes, *equalize); toNodes != nil && err != nil {
		return badInput(stderr, "plan", "--to: %v", err)
	}
	if err := bothLists(set); err != nil {
		return badInput(stderr, "plan", "%v", err)
	}
	rep, err := makePlan(planInput{from: fromNodes, to: toNodes, kind: kind, vnodes: *vnodes, equalize: *equalize, hitRate: *hitRate, replicas: *replicas})
	if err != nil {
		return badInput(stderr, "plan", "%v", err)
	}
	if *keys > 0 {
		rep.Sweep = estimateSweep(rep, *keys, *sweepRate)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return failed(stderr, "plan", err)
		}
		return exitOK
	}
	writePlan(stdout, rep)
	return exitOK
}

// The demo change, plan's and simulate's with neither --from nor --to.
var (
	demoFrom = fmt.Sprintf("%s (%s)", nodeCount(len(sim.DefaultFrom())), nodeNames(sim.DefaultFrom()))
	demoTo   = fmt.Sprintf("%s (%s)", nodeCount(len(sim.DefaultTo())), nodeNames(sim.DefaultTo()))
)

// nodeLists reads the --from and --to lists given on the command line (set
// names its flags), or with neither the demo change. A list not given is
// nil, and bothLists refuses it once the given one is checked.
func nodeLists(from, to string, set map[string]bool) (fromNodes, toNodes []ring.Node, err error) {
	if !set["from"] && !set["to"] {
		return sim.DefaultFrom(), sim.DefaultTo(), nil
	}
	if set["from"] {
		if fromNodes, err = parseNodes(from); err != nil {
			return nil, nil, fmt.Errorf("--from: %w", err)
		}
	}
	if set["to"] {
		if toNodes, err = parseNodes(to); err != nil {
			return nil, nil, fmt.Errorf("--to: %w", err)
		}
	}
	return fromNodes, toNodes, nil
}

// bothLists refuses --from without --to, and the reverse: the other list
// would be the demo's, and a plan of a real fleet against it says nothing
// true. set names the flags given on the command line.
func bothLists(set map[string]bool) error {
	switch {
	case set["from"] && !set["to"]:
		return errors.New("--from without --to: give the nodes after the change too (with neither, the demo change runs)")
	case set["to"] && !set["from"]:
		return errors.New("--to without --from: give the nodes before the change too (with neither, the demo change runs)")
	}
	return nil
}

// modulo is the mod-N placement of nodes that plan compares with: the ring's
// hash of the key, modulo the slots, each address Weight times in order.
func modulo(nodes []ring.Node) (*ring.Modulo, error) {
	slots, err := ring.ModuloSlots(nodes)
	if err != nil {
		return nil, err
	}
	return ring.NewModulo(slots, ring.WithModuloHash(ring.ModuloMurmur3), ring.WithModuloHashTag("{}"))
}

// wholeWeights returns nodes with their weights rounded to whole numbers,
// at least 1, for a mod-N placement, whose slots repeat an address weight
// times; rounded reports a weight that was not whole.
func wholeWeights(nodes []ring.Node) (out []ring.Node, rounded bool) {
	out = slices.Clone(nodes)
	for i, n := range out {
		if w := max(math.Round(n.Weight), 1); n.Weight != 0 && w != n.Weight {
			out[i].Weight, rounded = w, true
		}
	}
	return out, rounded
}

// planInput is what plan is asked.
type planInput struct {
	from, to []ring.Node
	kind     *fromKind // of from
	vnodes   int
	equalize float64 // the rings' tolerance, 0 for the classic ring
	hitRate  float64
	replicas int // copies of each key; 1 (or 0): no replicas section
}

// makePlan computes the plan of a change from one node list to another.
func makePlan(in planInput) (*planReport, error) {
	before, err := in.kind.placement(in.from, in.vnodes, in.equalize)
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	after, err := topology.Ring(in.to, in.vnodes, in.equalize)
	if err != nil {
		return nil, fmt.Errorf("--to: %w", err)
	}
	wholeFrom, roundedFrom := wholeWeights(in.from)
	modFrom, err := modulo(wholeFrom)
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	wholeTo, roundedTo := wholeWeights(in.to)
	modTo, err := modulo(wholeTo)
	if err != nil {
		return nil, fmt.Errorf("--to: %w", err)
	}

	change := ring.Compare(before, after)
	rep := &planReport{
		From: formatNodes(in.from), FromKind: in.kind.kind, To: formatNodes(in.to), Vnodes: in.vnodes, Equalize: in.equalize,
		ServerMoved: change.Moved,
		Exact:       change.Exact, Method: change.Method, Samples: change.Samples, StdErr: change.StdErr,
		ModNMoved:     ring.Compare(modFrom, modTo).Moved,
		SteadyHitRate: in.hitRate,
	}
	// Rows: nodes by name from ring to ring, where a name is a place on
	// the ring; by server from another kind, whose names are not ours.
	rows := map[string]*planNode{}
	key := func(n ring.Node) string { return n.Name }
	if in.kind.kind != "ring" {
		key = func(n ring.Node) string { return n.Addr }
	}
	var reps *replicaFigures
	if in.replicas > 1 {
		if reps, err = replicaPlan(before, after, in.replicas); err != nil {
			return nil, err
		}
		rep.Replicas = reps.report
		if in.kind.kind == "modulo" && slices.ContainsFunc(in.from, func(n ring.Node) bool { return n.Zone != "" }) {
			rep.Notes = append(rep.Notes, "mod-N has no zones: its replicas are the servers of the next slots, whatever their zones")
		}
	}
	// Each node's replica share, 0 without replicas: before by name from a
	// ring, else by address (as the rows), after by name.
	beforeReplicas := func(n ring.Node) float64 {
		if reps == nil {
			return 0
		}
		if _, ok := before.(*ring.Ring); ok {
			return reps.before[n.Name]
		}
		return reps.before[n.Addr]
	}
	afterReplicas := func(n ring.Node) float64 {
		if reps == nil {
			return 0
		}
		return reps.after[n.Name]
	}
	side := func(nodes []ring.Node, share, replicas func(ring.Node) float64, set func(*planNode, *planSide)) {
		total := 0.0
		for _, n := range nodes {
			total += n.Weight
		}
		for _, n := range nodes {
			p := rows[key(n)]
			if p == nil {
				p = &planNode{Name: n.Name}
				rows[key(n)] = p
			}
			p.Addr = n.Addr // the address after the change, when the node stays
			s := &planSide{Addr: n.Addr, Weight: n.Weight, Share: share(n), Ideal: n.Weight / total, Zone: n.Zone, ReplicaShare: replicas(n)}
			s.Deviation = s.Share/s.Ideal - 1
			if n.Name != p.Name {
				s.Name = n.Name
			}
			set(p, s)
		}
	}
	if r, ok := before.(*ring.Ring); ok {
		shares := r.Shares()
		side(r.Nodes(), func(n ring.Node) float64 { return shares[n.Name] }, beforeReplicas, func(p *planNode, s *planSide) { p.Before = s })
		rep.Moved = min(max(ring.Moved(r, after), 0), 1) // the sum of arcs may round past 1
		rep.Balance.Before = r.Deviation()
	} else {
		side(before.Nodes(), func(n ring.Node) float64 { return change.Before[n.Addr] }, beforeReplicas, func(p *planNode, s *planSide) {
			p.Before = s
			rep.Balance.Before = max(rep.Balance.Before, math.Abs(s.Deviation))
		})
		rep.Moved = change.Moved
	}
	rep.Balance.After = after.Deviation()
	switch {
	case in.equalize > 0 && in.kind.kind == "ring":
		if rep.Equalization, err = equalization(in); err != nil {
			return nil, err
		}
	case in.equalize > 0:
		rep.Notes = append(rep.Notes, "what equalizing costs in keys moved is computed from ring to ring; here the keys move off "+in.kind.kind+" in any case")
	}
	afterShares := after.Shares()
	side(after.Nodes(), func(n ring.Node) float64 { return afterShares[n.Name] }, afterReplicas, func(p *planNode, s *planSide) {
		p.After = s
		if s.Name != "" { // a server that keeps its keys under our name
			p.Before.Name, p.Name, s.Name = p.Name, s.Name, ""
		}
	})
	// By server, a foreign name may be one of ours on another server: tell
	// such rows apart by their address.
	seen := map[string]int{}
	for _, p := range rows {
		seen[p.Name]++
	}
	for _, p := range rows {
		if seen[p.Name] > 1 {
			p.Name += "@" + p.Addr
		}
	}
	for _, p := range rows {
		rep.Nodes = append(rep.Nodes, *p)
	}
	slices.SortFunc(rep.Nodes, func(a, b planNode) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range rep.Nodes {
		lost := 0.0
		if p.Before != nil {
			lost = p.Before.Ideal
		}
		if p.After != nil {
			lost -= p.After.Ideal
		}
		rep.MinMoved = min(rep.MinMoved+max(lost, 0), 1) // rounding may add up past 1
	}

	// Flows between rows: by name from ring to ring (ring.Flows), else
	// change.Flows, by server.
	rowName := func(k string) string { return rows[k].Name }
	if r, ok := before.(*ring.Ring); ok {
		for a, row := range ring.Flows(r, after) {
			for b, share := range row {
				rep.Flows = append(rep.Flows, planFlow{From: rowName(a), To: rowName(b), Share: share})
				// A node that keeps its name on another server: the keys
				// it keeps change server all the same.
				if p := rows[a]; a == b && p.Before.Addr != p.After.Addr {
					rep.Readdressed += share
				}
			}
		}
		for i, p := range rep.Nodes {
			if p.Before != nil && p.After != nil && p.Before.Addr != p.After.Addr {
				rep.Nodes[i].StartsWithout = p.After.Share
			}
		}
	} else {
		for a, row := range change.Flows {
			for b, share := range row {
				rep.Flows = append(rep.Flows, planFlow{From: rowName(a), To: rowName(b), Share: share})
			}
		}
	}
	slices.SortFunc(rep.Flows, func(x, y planFlow) int {
		if c := strings.Compare(x.From, y.From); c != 0 {
			return c
		}
		return strings.Compare(x.To, y.To)
	})
	if roundedFrom || roundedTo {
		rep.Notes = append(rep.Notes, "mod-N has no fractional weights: it is planned with each weight rounded to a whole number of slots, at least one")
	}
	if d := rep.ServerMoved - rep.Moved - rep.Readdressed; d > 1e-9 || d < -1e-9 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s of keys change node but %s change server: the hit rates count servers",
			pct(rep.Moved, 2), pct(rep.ServerMoved, 2)))
	}

	// Right after the switch, a read of a key that moved misses, unless a
	// dual-ring migration finds it on its old server; the database takes the
	// misses. Popularity is independent of placement, so the share of reads
	// that moved is the share of keys that did.
	outcome := func(mode string, moved float64, dual bool) planOutcome {
		o := planOutcome{Mode: mode, HitRate: in.hitRate * (1 - moved), DBLoad: 1}
		if dual {
			o.HitRate, o.SecondReads = in.hitRate, moved
		} else {
			o.DBLoad = (1 - o.HitRate) / (1 - in.hitRate)
		}
		return o
	}
	rep.AfterSwitch = []planOutcome{
		outcome(sim.ModeModN.String(), rep.ModNMoved, false),
		outcome(sim.ModeRing.String(), rep.ServerMoved, false),
		outcome(sim.ModeDualRing.String(), rep.ServerMoved, true),
	}
	return rep, nil
}

// estimateSweep estimates a sweep of keys keys at rate keys/s per old node.
func estimateSweep(rep *planReport, keys int64, rate int) *planSweep {
	sw := &planSweep{Keys: keys, Rate: rate, Copies: int64(math.Round(rep.ServerMoved * float64(keys)))}
	byAddr := map[string]float64{} // nodes sharing a server are one node to sweep
	names := map[string]string{}
	for _, n := range rep.Nodes {
		if n.Before != nil {
			byAddr[n.Before.Addr] += n.Before.Share
			names[n.Before.Addr] = n.Name
		}
	}
	for _, addr := range slices.Sorted(maps.Keys(byAddr)) {
		if listed := int64(math.Round(byAddr[addr] * float64(keys))); listed > sw.Listed {
			sw.Listed, sw.Slowest = listed, names[addr]
		}
	}
	sw.Seconds = float64(sw.Listed) / float64(rate)
	return sw
}

// writePlan prints the plan as tables.
func writePlan(w io.Writer, rep *planReport) {
	nFrom, nTo := 0, 0
	for _, n := range rep.Nodes {
		if n.Before != nil {
			nFrom++
		}
		if n.After != nil {
			nTo++
		}
	}
	vnodes := count(rep.Vnodes, "vnode", "")
	if rep.FromKind == "ring" {
		fmt.Fprintf(w, "Plan: %s → %s, %s per unit of weight\n\n", count(nFrom, "node", ""), count(nTo, "node", ""), vnodes)
	} else {
		fmt.Fprintf(w, "Plan: %s, %s → ring, %s, %s per unit of weight\n\n",
			fromKindNames[rep.FromKind], count(nFrom, "server", ""), count(nTo, "node", ""), vnodes)
	}

	tw := newTable(w, 0)
	fmt.Fprintln(tw, "node\taddress\tweight\tshare before\tideal\toff\tshare after\tideal\toff\t")
	for _, n := range rep.Nodes {
		wb, sb, ib, db := "-", "-", "-", "-"
		if s := n.Before; s != nil {
			wb, sb, ib, db = fmt.Sprint(s.Weight), pct(s.Share, 2), pct(s.Ideal, 2), fmt.Sprintf("%+.2f%%", 100*s.Deviation)
		}
		wa, sa, ia, da := "-", "-", "-", "-"
		if s := n.After; s != nil {
			wa, sa, ia, da = fmt.Sprint(s.Weight), pct(s.Share, 2), pct(s.Ideal, 2), fmt.Sprintf("%+.2f%%", 100*s.Deviation)
		}
		name := n.Name
		if n.Before != nil && n.Before.Name != "" {
			name = n.Before.Name + " → " + n.Name // a foreign name, then ours
		}
		addr := n.Addr
		if n.StartsWithout > 0 {
			addr = n.Before.Addr + " → " + n.After.Addr
		}
		fmt.Fprintf(tw, "%s\t%s\t%s → %s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, addr, wb, wa, sb, ib, db, sa, ia, da)
	}
	tw.Flush()
	writeRingBalance(w, rep)

	fmt.Fprintf(w, "\nKeys that move: %s of all keys (the least any placement must move: %s; mod-N would move %s)\n",
		pct(rep.Moved, 2), pct(rep.MinMoved, 2), pct(rep.ModNMoved, 2))
	if rep.Readdressed > 0 {
		fmt.Fprintf(w, "Keys that change server: %s of all keys (%s more than move). The ring places keys by name, so a node\n",
			pct(rep.ServerMoved, 2), pct(rep.Readdressed, 2))
		fmt.Fprintln(w, "that changes address keeps its keys on the ring; but its new server starts without them, and the")
		fmt.Fprintln(w, "migration, which routes by address, copies them there. The hit rates below count them:")
		for _, n := range rep.Nodes {
			if n.StartsWithout > 0 {
				fmt.Fprintf(w, "  %s changes address, %s to %s: its new server starts without %s's whole share, %s of all keys\n",
					n.Name, n.Before.Addr, n.After.Addr, n.Name, pct(n.StartsWithout, 2))
			}
		}
	}
	if rep.Exact {
		fmt.Fprintf(w, "How: %s.\n", rep.Method)
	} else {
		fmt.Fprintf(w, "How: %s, %s: the fractions are estimates, standard error %s on the keys that move.\n",
			rep.Method, count(rep.Samples, "key", ""), pct(rep.StdErr, 3))
	}
	writeFlows(w, rep)
	if rep.Replicas != nil {
		writeReplicas(w, rep)
	}

	fmt.Fprintf(w, "\nRight after the switch, from a steady hit rate of %s:\n", pct(rep.SteadyHitRate, 1))
	tw = newTable(w, 0)
	fmt.Fprintln(tw, "\thit rate\tdatabase load\treads that also ask the old owner\t")
	for _, o := range rep.AfterSwitch {
		second := "-"
		if o.SecondReads > 0 {
			second = pct(o.SecondReads, 1)
		}
		fmt.Fprintf(tw, "%s\t%s\t×%.2f\t%s\t\n", o.Mode, pct(o.HitRate, 1), o.DBLoad, second)
	}
	tw.Flush()
	fmt.Fprintln(w, "These are the rates the instant after the switch, before misses refill the cache;")
	fmt.Fprintln(w, "`shardcache simulate` runs a workload through it and shows the recovery.")
	if sw := rep.Sweep; sw != nil {
		d := time.Duration(sw.Seconds * float64(time.Second)).Round(time.Second)
		fmt.Fprintf(w, "\nSweep of %s at %d keys/s per old node: about %v, set by the largest old node, %s (%s to list);\n",
			count(sw.Keys, "key", ""), sw.Rate, d, sw.Slowest, count(sw.Listed, "key", ""))
		fmt.Fprintf(w, "%s to copy. With a sweep, the window must cover the rollout of the new nodes to every\n", count(sw.Copies, "key", ""))
		fmt.Fprintln(w, "process plus the sweep; without one, the longest TTL (and keys without expiry are lost).")
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "Note: %s.\n", n)
	}
}

// maxFlowColumns is the widest flow table printed as a matrix; a wider one
// is printed as a list.
const maxFlowColumns = 10

// writeFlows prints where keys go: a matrix of old nodes by new nodes, or for
// many new nodes a list of the flows between different nodes.
func writeFlows(w io.Writer, rep *planReport) {
	var olds, news []string
	for _, n := range rep.Nodes {
		if n.Before != nil {
			olds = append(olds, n.Name)
		}
		if n.After != nil {
			news = append(news, n.Name)
		}
	}
	share := map[[2]string]float64{}
	for _, f := range rep.Flows {
		share[[2]string{f.From, f.To}] = f.Share
	}
	tw := newTable(w, 0)
	if len(news) > maxFlowColumns {
		fmt.Fprintln(w, "\nKeys that change node (% of all keys):")
		fmt.Fprintln(tw, "from\tto\tshare\t")
		for _, f := range rep.Flows {
			if f.From != f.To {
				fmt.Fprintf(tw, "%s\t%s\t%s\t\n", f.From, f.To, pct(f.Share, 2))
			}
		}
		tw.Flush()
		return
	}
	fmt.Fprintln(w, "\nWhere the keys go (% of all keys; rows: before, columns: after):")
	heads := make([]string, len(news))
	for i, b := range news {
		heads[i] = fmt.Sprintf("%5s", b)
	}
	fmt.Fprintf(tw, "\t%s\t\n", strings.Join(heads, "\t"))
	for _, a := range olds {
		cells := make([]string, len(news))
		for i, b := range news {
			cells[i] = "    ."
			if s := share[[2]string{a, b}]; s > 0 {
				cells[i] = fmt.Sprintf("%5.2f", 100*s)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", a, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

// pct formats a fraction as a percentage with prec decimals.
func pct(f float64, prec int) string {
	return fmt.Sprintf("%.*f%%", prec, 100*f)
}
