//go:build !shardcache_seeded

package mcnode

// bugNearBuryKeeps ("nearburykeeps", a seeded bug: see internal/seeded):
// a tombstone buried through the near cache leaves the key's copy.
const bugNearBuryKeeps = false
