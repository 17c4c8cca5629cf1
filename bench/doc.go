// Package bench compares shardcache with other Go libraries: ring.Locate with
// their placements, and the client with go-redis and gomemcache on real
// servers. It is a module of its own so that the libraries it measures never
// become dependencies of shardcache; it holds only tests and benchmarks.
package bench
