package sim

import "github.com/shardcache/shardcache/client"

// A step's reads, hits and fallback hits come from the client's own Stats,
// as an operator's dashboard reads them (promstats, the README's "Watching
// a resharding"): the reads are GetOrLoad's hits, negative hits and misses,
// the hits those it answered from the cache (fallback hits included), and
// the fallback hits those a migration found on a key's old owner after a
// miss on its new one. The database's load, the writes, the throttled and
// the stale reads are the simulation's own: no cache client can see them.

// statsReader turns successive Stats into the figures of each step.
type statsReader struct {
	loads        client.LoadStats
	fallbackHits int64
}

// stepStats is what one step did, as the client counted it.
type stepStats struct {
	reads, hits, fallbackHits int64
	cacheErrors               int64 // reads that failed, and loaded all the same
}

// step returns the counts since the last call.
func (r *statsReader) step(s client.Stats) stepStats {
	l, p := s.Loads, r.loads
	d := stepStats{
		reads:        (l.Hits + l.NegativeHits + l.Misses) - (p.Hits + p.NegativeHits + p.Misses),
		hits:         l.Hits - p.Hits,
		fallbackHits: s.MigrationTotals.FallbackHits - r.fallbackHits,
		cacheErrors:  l.CacheErrors - p.CacheErrors,
	}
	r.loads, r.fallbackHits = l, s.MigrationTotals.FallbackHits
	return d
}
