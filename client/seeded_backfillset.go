//go:build shardcache_bug_backfillset && !shardcache_bug_nodualdelete && !shardcache_bug_notomb

package client

// A seeded bug: see seeded.go.
const (
	bugNoDualDelete = false
	bugBackfillSet  = true
	bugNoTomb       = false
)
