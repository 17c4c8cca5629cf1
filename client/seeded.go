//go:build !shardcache_bug_nodualdelete && !shardcache_bug_backfillset && !shardcache_bug_notomb

package client

// Seeded bugs: each build tag shardcache_bug_* breaks the migration on
// purpose, one at a time, so that the consistency checker (internal/chaos,
// TestSeededBugs) shows it finds what it is meant to. None is set in a
// normal build.
const (
	// bugNoDualDelete (shardcache_bug_nodualdelete): a migration's Delete
	// reaches the new owner only.
	bugNoDualDelete = false
	// bugBackfillSet (shardcache_bug_backfillset): a backfill overwrites
	// (SET, not SET NX; Memcached set, not add).
	bugBackfillSet = false
	// bugNoTomb (shardcache_bug_notomb): a migration's Delete deletes the
	// key on its new owner without burying it (copy.go).
	bugNoTomb = false
)
