//go:build race

package ring

// Under the race detector the equalization tests run fewer fleets: the
// ring is immutable, and the detector multiplies their minutes of
// arithmetic without finding more.
func init() { raceEnabled = true }
