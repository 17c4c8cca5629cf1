package node

import "context"

// Usage is what a cache server holds and has done since it started, as the
// server itself counts it: what balancing nodes by their memory needs, and
// what no client can see from its own calls (another process's keys, the
// server's evictions).
type Usage struct {
	// Items is the keys the server holds: Redis, those of the node's
	// database (INFO keyspace); Memcached curr_items.
	Items int64
	// Bytes is the memory the data takes: Redis used_memory (what maxmemory
	// is compared with), Memcached bytes (the items' sizes).
	Bytes int64
	// BaseBytes is the part of Bytes an empty server takes: Redis
	// used_memory_startup; 0 for Memcached, whose Bytes counts items only.
	BaseBytes int64
	// Limit is the memory limit the server evicts at: Redis maxmemory, 0
	// when it has none (it then grows until the machine runs out);
	// Memcached limit_maxbytes (-m).
	Limit int64
	// SystemMemory is the machine's memory as Redis reports it
	// (total_system_memory), 0 when unknown (Memcached): the bound of a
	// Redis without a Limit.
	SystemMemory int64
	// Evictions counts the keys evicted for room since the server started:
	// Redis evicted_keys, Memcached evictions.
	Evictions int64
	// Hits and Misses count the server's own reads that found their key
	// and those that did not: Redis keyspace_hits and keyspace_misses,
	// Memcached get_hits and get_misses. Every client's reads count.
	Hits, Misses int64
	// Policy is Redis's maxmemory-policy (noeviction refuses writes at the
	// limit instead of evicting); empty for Memcached, which evicts the
	// least recently used items.
	Policy string
}

// UsageReporter is a node that can read its server's Usage. It is off the
// path of every request: the caller polls it, in a goroutine of its own,
// every so often. A node observes the read as node.OpOther.
type UsageReporter interface {
	Usage(ctx context.Context) (Usage, error)
}
