//go:build race

package client

// raceEnabled: the race detector slows every call several times over, and
// unevenly; latency bounds are checked without it.
const raceEnabled = true
