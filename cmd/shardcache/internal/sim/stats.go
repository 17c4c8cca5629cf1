package sim

import "github.com/shardcache/shardcache/client"

// A step's reads, hits and fallback hits come from the client's own Stats,
// as an operator's dashboard reads them (promstats, the README's "Watching
// a resharding"): the reads are the Get calls the new owners received, and
// the hits those they answered plus those a migration found on an old owner
// after a miss there. The database's load, the writes and the stale reads
// are the simulation's own: no cache client can see them.

// statsReader turns successive Stats into the figures of each step.
type statsReader struct {
	gets         map[string]client.OpStats // each node's "get" counts at the last step, by address
	fallbackHits int64
}

func newStatsReader() *statsReader {
	return &statsReader{gets: map[string]client.OpStats{}}
}

// step returns the reads, hits and fallback hits since the last call. A node
// that left the placements took its counts with it; one whose counts went
// back (its pool was closed and opened again) counts from zero.
func (r *statsReader) step(s client.Stats) (reads, hits, fallbackHits int64) {
	for _, n := range s.Nodes {
		g, prev := n.Op("get"), r.gets[n.Node.Addr]
		if g.Calls() < prev.Calls() {
			prev = client.OpStats{}
		}
		reads += g.Calls() - prev.Calls()
		hits += g.Hits - prev.Hits
		r.gets[n.Node.Addr] = g
	}
	fallbackHits = s.MigrationTotals.FallbackHits - r.fallbackHits
	r.fallbackHits = s.MigrationTotals.FallbackHits
	return reads, hits + fallbackHits, fallbackHits
}
