//go:build shardcache_bug_notomb && !shardcache_bug_nodualdelete && !shardcache_bug_backfillset

package client

// A seeded bug: see seeded.go.
const (
	bugNoDualDelete = false
	bugBackfillSet  = false
	bugNoTomb       = true
)
