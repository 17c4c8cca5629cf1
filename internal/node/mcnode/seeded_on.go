//go:build shardcache_seeded

package mcnode

import "github.com/shardcache/shardcache/internal/seeded"

// The seeded bug of seeded.go, as a variable.
var bugNearBuryKeeps = seeded.On("nearburykeeps")
