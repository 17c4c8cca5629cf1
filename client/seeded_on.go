//go:build shardcache_seeded

package client

import "github.com/shardcache/shardcache/internal/seeded"

// The seeded bugs of seeded.go, as variables: seeded.Env names the one on.
var (
	bugNoDualDelete       = seeded.On("nodualdelete")
	bugBackfillSet        = seeded.On("backfillset")
	bugNoTomb             = seeded.On("notomb")
	bugGetNoFallback      = seeded.On("getnofallback")
	bugGetMultiNoFallback = seeded.On("getmultinofallback")
	bugTombReplaceable    = seeded.On("tombreplaceable")
	bugHalfAck            = seeded.On("halfack")
)
