//go:build !shardcache_seeded

package client

// Seeded bugs: each breaks the migration on purpose, so that the
// consistency checker (internal/chaos, TestSeededBugs) shows it finds what
// it is meant to. In a normal build every one is a false constant and its
// branch compiles away; built with the tag shardcache_seeded
// (seeded_on.go), the one named by SHARDCACHE_SEEDED_BUG (package
// internal/seeded) is on.
const (
	// bugNoDualDelete ("nodualdelete"): a migration's Delete reaches the
	// new owner only.
	bugNoDualDelete = false
	// bugBackfillSet ("backfillset"): a backfill overwrites (SET, not SET
	// NX; Memcached set, not add).
	bugBackfillSet = false
	// bugNoTomb ("notomb"): a migration's Delete deletes the key on its new
	// owner without burying it (copy.go).
	bugNoTomb = false
	// bugGetNoFallback ("getnofallback"): a Get that misses a moved key's
	// new owner does not look on the old one.
	bugGetNoFallback = false
	// bugGetMultiNoFallback ("getmultinofallback"): likewise for the keys
	// of a GetMulti.
	bugGetMultiNoFallback = false
	// bugTombReplaceable ("tombreplaceable"): a migration's Delete in the
	// window leaves the tombstone of a write before the start
	// (node.TombWritten), which a copy past the handover may replace
	// (copy.go).
	bugTombReplaceable = false
	// bugHalfAck ("halfack"): a migration's write or Delete is acknowledged
	// when its second owner's half failed (the old owner's copy of a
	// write, the plain delete beside the tombstone).
	bugHalfAck = false
)
