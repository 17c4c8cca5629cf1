package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
	"github.com/shardcache/shardcache/ring"
)

const planAbout = `Computes from the ring itself, exactly (no keys are sampled): each node's
share of the keys before and after the change and its ideal share by weight,
the fraction of keys that move and from which node to which, and the hit rate
and database load expected right after the switch, switching at once (mod-N,
ring) or with a dual-ring migration. With no flags: 8 nodes down to 6.`

// formatNodes writes nodes in the node-list grammar.
func formatNodes(nodes []ring.Node) string {
	items := make([]string, len(nodes))
	for i, n := range nodes {
		items[i] = n.Addr
		if n.Name != "" && n.Name != n.Addr {
			items[i] = n.Name + "=" + items[i]
		}
		if n.Weight > 1 {
			items[i] += fmt.Sprintf("*%d", n.Weight)
		}
	}
	return strings.Join(items, ",")
}

// planReport is the output of plan; its JSON form is what --json prints.
type planReport struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Vnodes int    `json:"vnodes"`
	// Nodes are both lists' nodes by name, sorted.
	Nodes []planNode `json:"nodes"`
	// Moved is the fraction of keys whose node changes (ring.Moved).
	Moved float64 `json:"moved"`
	// ServerMoved is the fraction whose server changes: Moved, unless a node
	// changes address but keeps its name, or the reverse.
	ServerMoved float64 `json:"server_moved"`
	// MinMoved is the least any placement must move to reach the new ideal
	// shares: the sum of the ideal shares that nodes lose.
	MinMoved float64 `json:"min_moved"`
	// ModNMoved is what hash(key) % N over the same lists' servers, in
	// their order, would move (ring.ModuloMoved).
	ModNMoved float64 `json:"mod_n_moved"`
	// Flows are the fractions of all keys going from each node to each,
	// staying put included (from == to); ring.Flows.
	Flows []planFlow `json:"flows"`
	// SteadyHitRate is the hit rate assumed before the switch (--hit-rate).
	SteadyHitRate float64 `json:"steady_hit_rate"`
	// AfterSwitch is what each mode expects right after the switch.
	AfterSwitch []planOutcome `json:"after_switch"`
	Notes       []string      `json:"notes,omitempty"`
}

type planNode struct {
	Name   string    `json:"name"`
	Addr   string    `json:"addr"`
	Before *planSide `json:"before"` // nil when the node is not in --from
	After  *planSide `json:"after"`  // nil when the node is not in --to
}

type planSide struct {
	Addr   string  `json:"addr"`
	Weight int     `json:"weight"`
	Share  float64 `json:"share"` // exact fraction of the keys (ring.Shares)
	Ideal  float64 `json:"ideal"` // weight over total weight (ring.IdealShares)
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
	fs := newFlagSet("plan", "Plan a change of cache nodes.", planAbout, stderr)
	from := fs.String("from", formatNodes(sim.DefaultFrom()), "the nodes now: a node `list` (see below)")
	to := fs.String("to", formatNodes(sim.DefaultTo()), "the nodes after the change: a node `list`")
	vnodes := fs.Int("vnodes", ring.DefaultVnodes, "ring points per unit of weight, as the client's Options.Vnodes")
	hitRate := fs.Float64("hit-rate", 0.95, "the steady hit rate, in [0, 1), from which to expect the rate after the switch")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	if code, done := parseFlags(fs, args, stdout); done {
		return code
	}
	if !(*hitRate >= 0 && *hitRate < 1) {
		return badInput(stderr, "plan", "--hit-rate %v: want a fraction in [0, 1), such as 0.95", *hitRate)
	}
	fromNodes, err := parseNodes(*from)
	if err != nil {
		return badInput(stderr, "plan", "--from: %v", err)
	}
	toNodes, err := parseNodes(*to)
	if err != nil {
		return badInput(stderr, "plan", "--to: %v", err)
	}
	rep, err := makePlan(fromNodes, toNodes, *vnodes, *hitRate)
	if err != nil {
		return badInput(stderr, "plan", "%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "shardcache plan: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	writePlan(stdout, rep)
	return exitOK
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

// makePlan computes the plan of a change from one node list to another.
func makePlan(fromNodes, toNodes []ring.Node, vnodes int, hitRate float64) (*planReport, error) {
	before, err := ring.New(fromNodes, ring.WithVnodes(vnodes))
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	after, err := ring.New(toNodes, ring.WithVnodes(vnodes))
	if err != nil {
		return nil, fmt.Errorf("--to: %w", err)
	}
	modFrom, err := modulo(fromNodes)
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	modTo, err := modulo(toNodes)
	if err != nil {
		return nil, fmt.Errorf("--to: %w", err)
	}
	modMoved, _ := ring.ModuloMoved(modFrom, modTo)

	rep := &planReport{
		From: formatNodes(fromNodes), To: formatNodes(toNodes), Vnodes: vnodes,
		Moved:         ring.Moved(before, after),
		ModNMoved:     modMoved,
		SteadyHitRate: hitRate,
	}
	byName := map[string]*planNode{}
	side := func(r *ring.Ring, set func(*planNode, *planSide)) {
		shares, ideal := r.Shares(), r.IdealShares()
		for _, n := range r.Nodes() {
			p := byName[n.Name]
			if p == nil {
				p = &planNode{Name: n.Name}
				byName[n.Name] = p
			}
			p.Addr = n.Addr // the address after the change, when the node stays
			set(p, &planSide{Addr: n.Addr, Weight: n.Weight, Share: shares[n.Name], Ideal: ideal[n.Name]})
		}
	}
	side(before, func(p *planNode, s *planSide) { p.Before = s })
	side(after, func(p *planNode, s *planSide) { p.After = s })
	for _, p := range byName {
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
		rep.MinMoved += max(lost, 0)
		switch {
		case p.Before != nil && p.After != nil && p.Before.Addr != p.After.Addr:
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s changes address, %s to %s: its keys stay on the ring, but the new server starts empty",
				p.Name, p.Before.Addr, p.After.Addr))
		}
	}

	for a, row := range ring.Flows(before, after) {
		for b, share := range row {
			rep.Flows = append(rep.Flows, planFlow{From: a, To: b, Share: share})
			if byName[a].Before.Addr != byName[b].After.Addr {
				rep.ServerMoved += share
			}
		}
	}
	slices.SortFunc(rep.Flows, func(x, y planFlow) int {
		if c := strings.Compare(x.From, y.From); c != 0 {
			return c
		}
		return strings.Compare(x.To, y.To)
	})
	if d := rep.ServerMoved - rep.Moved; d > 1e-9 || d < -1e-9 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%.2f%% of keys change node but %.2f%% change server: the hit rates count servers",
			100*rep.Moved, 100*rep.ServerMoved))
	}

	// Right after the switch, a read of a key that moved misses, unless a
	// dual-ring migration finds it on its old server; the database takes the
	// misses. Popularity is independent of placement, so the share of reads
	// that moved is the share of keys that did.
	outcome := func(mode string, moved float64, dual bool) planOutcome {
		o := planOutcome{Mode: mode, HitRate: hitRate * (1 - moved), DBLoad: 1}
		if dual {
			o.HitRate, o.SecondReads = hitRate, moved
		} else {
			o.DBLoad = (1 - o.HitRate) / (1 - hitRate)
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
	fmt.Fprintf(w, "Plan: %d nodes → %d nodes, %d vnodes per unit of weight\n\n", nFrom, nTo, rep.Vnodes)

	tw := newTable(w, 0)
	fmt.Fprintln(tw, "node\taddress\tweight\tshare before\tideal\tshare after\tideal\t")
	for _, n := range rep.Nodes {
		wb, sb, ib := "-", "-", "-"
		if s := n.Before; s != nil {
			wb, sb, ib = fmt.Sprint(s.Weight), pct(s.Share, 2), pct(s.Ideal, 2)
		}
		wa, sa, ia := "-", "-", "-"
		if s := n.After; s != nil {
			wa, sa, ia = fmt.Sprint(s.Weight), pct(s.Share, 2), pct(s.Ideal, 2)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s → %s\t%s\t%s\t%s\t%s\t\n", n.Name, n.Addr, wb, wa, sb, ib, sa, ia)
	}
	tw.Flush()

	fmt.Fprintf(w, "\nKeys that move: %s of all keys (the least any placement must move: %s; mod-N would move %s)\n",
		pct(rep.Moved, 2), pct(rep.MinMoved, 2), pct(rep.ModNMoved, 2))
	writeFlows(w, rep)

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
