// Package bench compares ring.Locate with the placements of other Go
// libraries. It is a module of its own so that the libraries it measures never
// become dependencies of shardcache; it holds only tests and benchmarks.
package bench
