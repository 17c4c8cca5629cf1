package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/shardcache/shardcache/ring"
)

// replicasHelp documents --replicas, for plan's help.
const replicasHelp = `With --replicas R above 1 (client.Options.Replicas: every key kept on its
R distinct nodes, ring.LocateN's order, distinct zones first), plan also
shows each node's share of the keys it keeps a copy of (its first-replica
share is the share above), the memory the copies take (the sum of those
shares: ×R the data, or ×N with N nodes fewer than R), the zones (a node
list gives them as NODE@ZONE) and the fraction of keys whose R replicas span
min(R, zones) zones, and the keys whose replica set changes: a migration
over replicas copies every one of them. From ring to ring these are exact,
from the arcs between points; from another --from-kind, whose nodes are
taken to keep R replicas in their own order (ring.LocatorN), the --from
side and the set changes are counted over 1048576 keys.
JSON: "replicas" {r, before and after {memory, zones, spread_zones, spread},
set_moved, exact, method, samples, std_err}, and each node side's
replica_share.`

// planReplicas is, with --replicas above 1, where each key's R copies are
// and what they cost.
type planReplicas struct {
	R      int             `json:"r"`
	Before planReplicaSide `json:"before"`
	After  planReplicaSide `json:"after"`
	// SetMoved is the fraction of keys whose set of R nodes changes (by
	// name from ring to ring, ring.MovedN; by server from another kind): a
	// migration over replicas copies each of them.
	SetMoved float64 `json:"set_moved"`
	// Exact tells whether the figures are exact; else the --from side's
	// and SetMoved are counted over Samples keys, and StdErr is the
	// standard error of SetMoved. Method says how they were found.
	Exact   bool    `json:"exact"`
	Method  string  `json:"method"`
	Samples int     `json:"samples,omitempty"`
	StdErr  float64 `json:"std_err,omitempty"`
}

// planReplicaSide is one side's replicas.
type planReplicaSide struct {
	// Memory is the sum of the nodes' replica shares, to 9 decimals: the
	// copies of the data the nodes keep, R (or the nodes, when fewer).
	Memory float64 `json:"memory"`
	// Zones is the number of distinct zones of the nodes; nodes without a
	// zone are one zone.
	Zones int `json:"zones"`
	// SpreadZones is min(R, Zones, nodes): the zones a key's replicas can
	// span. Spread is the fraction of keys whose replicas span them.
	SpreadZones int     `json:"spread_zones"`
	Spread      float64 `json:"spread"`
}

// replicaFigures are the replica shares of each side's nodes, by the key of
// plan's rows (name from a ring, address from another kind), and the
// figures of the report.
type replicaFigures struct {
	before, after map[string]float64
	report        *planReplicas
}

// replicaPlan computes the replicas of r copies from before to after:
// before's shares by name when it is a ring, else by address, as plan's
// rows.
func replicaPlan(before ring.Locator, after *ring.Ring, r int) (*replicaFigures, error) {
	f := &replicaFigures{
		after:  after.ReplicaShares(r),
		report: &planReplicas{R: r},
	}
	f.report.After = replicaSide(after.Nodes(), f.after, byName, r, after.ZoneSpread(r))
	if b, ok := before.(*ring.Ring); ok {
		f.before = b.ReplicaShares(r)
		f.report.Before = replicaSide(b.Nodes(), f.before, byName, r, b.ZoneSpread(r))
		f.report.SetMoved = ring.MovedN(b, after, r)
		f.report.Exact, f.report.Method = true, "exact, from the arcs between the points of both rings"
		return f, nil
	}
	b, ok := before.(ring.LocatorN)
	if !ok {
		return nil, fmt.Errorf("--replicas %d: the --from placement does not place replicas", r)
	}
	var spread float64
	f.before, spread, f.report.SetMoved = sampleReplicas(b, after, r, ring.CompareSamples)
	f.report.Before = replicaSide(b.Nodes(), f.before, byAddr, r, spread)
	f.report.Samples = ring.CompareSamples
	f.report.StdErr = math.Sqrt(f.report.SetMoved * (1 - f.report.SetMoved) / float64(ring.CompareSamples))
	f.report.Method = "the ring side exact, from the arcs between its points; the --from side and the set changes counted over keys located in both"
	return f, nil
}

// replicaSide sums one side's figures; key gives a node's key in shares.
func replicaSide(nodes []ring.Node, shares map[string]float64, key func(ring.Node) string, r int, spread float64) planReplicaSide {
	s := planReplicaSide{Zones: zoneCount(nodes), Spread: spread}
	s.SpreadZones = min(r, s.Zones, len(nodes))
	seen := map[string]bool{} // nodes sharing a server are one server
	for _, n := range nodes {
		if k := key(n); !seen[k] {
			seen[k] = true
			s.Memory += shares[k]
		}
	}
	// Every key has the same number of copies: the sum is a whole number
	// but for the rounding of the shares' sums.
	s.Memory = math.Round(s.Memory*1e9) / 1e9
	return s
}

func byName(n ring.Node) string { return n.Name }
func byAddr(n ring.Node) string { return n.Addr }

// zoneCount returns the number of distinct zones of nodes, those without a
// zone counting as one.
func zoneCount(nodes []ring.Node) int {
	zones := map[string]bool{}
	for _, n := range nodes {
		zones[n.Zone] = true
	}
	return len(zones)
}

// sampleReplicas locates samples keys, r replicas each, in from and to, as
// ring.Compare samples (the same keys): each server of from's share of the
// keys it keeps a copy of, by address; the fraction of keys whose replicas
// in from span min(r, zones) zones; and the fraction whose set of servers
// differs between from and to.
func sampleReplicas(from ring.LocatorN, to *ring.Ring, r, samples int) (shares map[string]float64, spread, moved float64) {
	nodes := from.Nodes()
	want := min(r, zoneCount(nodes), len(nodes))
	counts := map[string]int{}
	spreadKeys, movedKeys := 0, 0
	var a, b []ring.Node
	buf := []byte("shardcache-sample:")
	base := len(buf)
	for i := range samples {
		key := string(strconv.AppendInt(buf[:base], int64(i), 10))
		a, b = from.AppendLocateN(a[:0], key, r), to.AppendLocateN(b[:0], key, r)
		zones := 0
		for j, n := range a {
			counts[n.Addr]++
			if !slices.ContainsFunc(a[:j], func(m ring.Node) bool { return m.Zone == n.Zone }) {
				zones++
			}
		}
		if zones >= want {
			spreadKeys++
		}
		same := len(a) == len(b)
		for _, n := range a {
			same = same && slices.ContainsFunc(b, func(m ring.Node) bool { return m.Addr == n.Addr })
		}
		if !same {
			movedKeys++
		}
	}
	shares = make(map[string]float64, len(counts))
	for _, n := range nodes {
		shares[n.Addr] = float64(counts[n.Addr]) / float64(samples)
	}
	return shares, float64(spreadKeys) / float64(samples), float64(movedKeys) / float64(samples)
}

// writeReplicas prints the replicas section of the plan.
func writeReplicas(w io.Writer, rep *planReport) {
	rr := rep.Replicas
	fmt.Fprintf(w, "\nReplicas (--replicas %d): every key on %d distinct nodes (ring.LocateN), distinct zones first\n", rr.R, rr.R)
	zoned := false // any node with a zone
	for _, n := range rep.Nodes {
		zoned = zoned || n.Before != nil && n.Before.Zone != "" || n.After != nil && n.After.Zone != ""
	}
	tw := newTable(w, 0)
	fmt.Fprintln(tw, "node\tzone\tcopies before\tfirst\tcopies after\tfirst\t")
	for _, n := range rep.Nodes {
		cb, fb, ca, fa := "-", "-", "-", "-"
		var zb, za string
		if s := n.Before; s != nil {
			cb, fb, zb = pct(s.ReplicaShare, 2), pct(s.Share, 2), s.Zone
		}
		if s := n.After; s != nil {
			ca, fa, za = pct(s.ReplicaShare, 2), pct(s.Share, 2), s.Zone
		}
		zone := cmp.Or(za, zb, "-")
		if n.Before != nil && n.After != nil && zb != za {
			zone = cmp.Or(zb, "-") + " → " + cmp.Or(za, "-")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", n.Name, zone, cb, fb, ca, fa)
	}
	tw.Flush()
	fmt.Fprintf(w, "Memory: ×%.2f the data before, ×%.2f after (the sum of the copies)\n", rr.Before.Memory, rr.After.Memory)
	if zoned {
		fmt.Fprintf(w, "Zones: %d before, %d after; keys whose replicas span %s before: %s, %s after: %s\n",
			rr.Before.Zones, rr.After.Zones, count(rr.Before.SpreadZones, "zone", ""), pct(rr.Before.Spread, 2),
			count(rr.After.SpreadZones, "zone", ""), pct(rr.After.Spread, 2))
	}
	fmt.Fprintf(w, "Keys whose replica set changes: %s of all keys (beside the %s that move owner); a migration over replicas copies each of them\n",
		pct(rr.SetMoved, 2), pct(rep.Moved, 2))
	if rr.Exact {
		fmt.Fprintf(w, "How: %s.\n", rr.Method)
	} else {
		fmt.Fprintf(w, "How: %s, %s: standard error %s on the set changes.\n", rr.Method, count(rr.Samples, "key", ""), pct(rr.StdErr, 3))
	}
}
