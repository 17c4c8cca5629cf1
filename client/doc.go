// Package client is a sharded cache client: it spreads keys over many Redis
// or Memcached nodes with a consistent-hash ring, and keeps the hit rate when
// nodes are added, removed or re-weighted.
//
// Its API is its own, not go-redis's or gomemcache's: values are []byte, a
// miss is ErrCacheMiss, TTLs are time.Duration, and call sites written for
// either library change. For code that keeps gomemcache's method set and
// types, use package compat/gomemcache; for go-redis's *redis.Ring,
// compat/goredis. Both are built on this package.
//
//	c, err := client.New(client.Options{
//		Backend: client.Redis,
//		Nodes: []ring.Node{
//			{Name: "a", Addr: "10.0.0.1:6379"},
//			{Name: "b", Addr: "10.0.0.2:6379", Weight: 2},
//		},
//	})
//	if err != nil { ... }
//	defer c.Close()
//	err = c.Set(ctx, "user:42", []byte("Ada"), time.Hour)
//	v, err := c.Get(ctx, "user:42") // errors.Is(err, client.ErrCacheMiss) on a miss
//
// # Nodes and connections
//
// Every operation locates its key on the ring and goes to that node's
// client, one per physical node, shared by both placements during a
// migration. A node sees at most Options.PoolSize connections from a
// client, whatever the mix of calls and options: a call that finds them all
// busy waits for one, within its context. A Redis node is one go-redis
// client, whose hooks see every command the client sends it (Client.Redis
// hands it out); a Memcached node speaks the protocol itself, in package
// internal/wire/memcache (gomemcache is the vocabulary of compat/gomemcache
// only). The client makes its go-redis clients print nothing of their failed
// dials, which reach the caller as errors and Health, and leaves go-redis's
// process-wide logger alone.
//
// Every call is bounded by its context and by the node's DialTimeout,
// ReadTimeout and WriteTimeout, on the caller's goroutine; a nil context is
// ErrNilContext.
//
// # Multi-key operations
//
// GetMulti sends one request per node, a Memcached "gets" or a Redis MGET,
// all written before any answer is read on the caller's goroutine, so that
// the servers work in parallel without a goroutine per node. A Redis node's
// MGET goes over connections of the node's own (in the same PoolSize) until
// its go-redis client is handed out, by Client.Redis or by a NewRedisClient
// hook: from then on through that client, so that any hook added to it
// sees it. Every answer is due one ReadTimeout after its request was sent,
// however many nodes are slow; one read late because a slower node's was
// read first has more time for as long as it brings bytes. The values of
// one node's answer may share a buffer (up to 64 KiB): a value kept keeps
// it alive, so copy the few kept for long. When a node fails, the hits of
// the others are returned with an error that joins one *NodeError per
// failed node. SetMulti and DeleteMulti send one round trip per node, in
// parallel.
//
// # Resharding
//
// Reshard starts a dual-ring migration (package migration): for one window,
// reads fall back to the old owner and backfill the new one, writes and
// deletes reach both; Sweep copies every moved key to its new owner
// meanwhile, with its type and remaining TTL, so a resharding moves keys
// without losing them, those without expiry included, and the window need
// only cover the rollout and the sweep (the walk of each old node is
// package internal/sweep's, the copies from old owners, their writes and
// the AsyncBackfill queue internal/backfill's). Options.MigrateFrom resumes a
// migration in a process started during its window. A copy never
// overwrites a value the new owner got meanwhile (add, SET NX, RESTORE
// without REPLACE), nor a key deleted meanwhile: a Delete of a moved key
// leaves a tombstone on its new owner until the window's end and a minute
// (Redis a key "shardcache:tomb:" + key beside it; Memcached the key
// itself, an empty value that every read of the client reports as a miss
// and that another client, gomemcache say, reads as an empty value). A
// write of a moved key is acknowledged only once both owners have it: a
// failure on the old one is an error. Incr and Touch bring their key over
// first, synchronously.
//
// Options.Equalize is part of the placement, as the nodes and their
// weights are: every client of a fleet must use the same value, or they
// place keys apart, and a change of it is a change of placement (give the
// old ring as MigrateFrom.Placement, or ReshardTo the new one). It plays no
// part in a Placement of the caller's.
//
// # A fleet
//
// Reshard changes one process. A fleet never switches at one instant, and
// a process that has not switched yet writes the old owners alone while
// others read the new ones first. Options.Topology makes every process
// follow one source (DNS, a file, etcd) and run each change as the same
// migration, with a start published ahead of time: until the start every
// process reads the old placement and leaves tombstones on the new
// owners; a process that receives the topology late repairs from the log
// of its recent writes before it reads a new owner (internal/follow; the
// protocol's argument is in package topology). TopologyInfo says where the
// client stands.
//
// # Consistency
//
// Through a migration, under node failures, a process never reads a value
// older than one whose write was acknowledged before its read began, and a
// key whose Delete was acknowledged does not come back: the history
// checker of internal/chaos checks it on real servers under kills,
// stops, resets, partitions and timeouts. The boundary: with FailOpen, a
// write to a node held down is dropped and acknowledged, and the node's
// older value may be read once it is back; a write or a Delete that
// returned an error may have been applied, in part.
//
// # Node failures
//
// Options.FailureThreshold connection-level failures of a node in a row (a
// refused or timed-out dial, an i/o timeout, a reset, a connection closed
// mid-reply) mark it down: its calls then fail at once, without touching
// the network, with a *NodeError whose cause is ErrNodeDown, until a
// background probe (Redis PING, Memcached "version") gets an answer. A
// miss, an error reply, or the caller's context ending never counts against
// a node. With Options.FailOpen a down node's keys read as misses (the
// application then loads from its database) and writes to it are dropped,
// counted in Health; Delete, DeleteMulti and Incr still fail, since a
// dropped delete would let a stale value come back with the node. Keys are
// never sent to another regular node.
//
// With Options.Gutter (Facebook's gutter pool) a down node's reads and
// writes go instead to one node of a small pool kept for that, outside a
// migration, every TTL capped at Options.GutterTTL: its keys are cached for
// a while instead of falling on the database. Counters are not (Incr still
// fails with ErrNodeDown). Each key written through the gutter is kept as a
// hint, and before the node is marked up again the probe deletes the hinted
// keys there and on the gutter (flushes the node past DefaultGutterHints),
// so a node that was paused or cut off, not restarted, never serves a value
// a write replaced while it was down. The hints are each process's own:
// between two processes' probes, a reader of the first may see a value the
// second replaced.
//
// # Replicas
//
// With Options.Replicas = R, every key is kept on the R distinct nodes that
// follow it on the ring (ring.LocateN; with ring.Node.Zone set, distinct
// zones first), and a dead node costs no hit rate: writes go to all R at
// once and are acknowledged only when all took them (with a replica down
// they land on the others and return ErrNodeDown; FailOpen acknowledges
// them, at its usual price); a read goes to the first
// replica in the process's Options.Zone, then the others on a miss or a
// failure, and copies a value found past a miss back to the replicas that
// missed it, never over a value or a tombstone. Add reads the key first
// (present on any replica is ErrNotStored). Deletes bury the key on every
// replica (a short tombstone that refuses a read's late copy) and fail if
// one missed it. Incr, and the Items updates that read the present value,
// run on the key's first replica in ring order, which must be up, and bury
// the key on the others. A replica that misses a write is held
// down and the key kept as its hint; before it serves again the probe
// deletes its hinted keys there, so a replica that was paused, not killed,
// never serves a value older than one this process wrote. Reads are not
// in real-time order across processes while a write is in flight: one
// process may read its value on a replica it reached and another, after,
// the older value on a replica it has not reached yet (processes read their
// own zone first, and skip the replicas they hold down); once the write
// is acknowledged, no read returns an older value. A migration moves
// a key when its replica set changes, old set to new set, and a sweep
// copies it. Replicas is refused today with Gutter, NearCache, Topology,
// Lease, MetaLeases, StaleWhileRevalidate, EarlyRefresh and a negative
// FailureThreshold.
//
// # Loading
//
// GetOrLoad and GetMultiOrLoad read through the cache to a loader (the
// database): one load per key however many callers miss at once in a
// process (singleflight), negative caching (Options.NegativeTTL), a cap on
// loads (Options.LoadLimit), and with Options.Lease one load per key for
// the whole fleet: the process that misses first takes a lease on the key,
// in the cache, and the others re-read the key every LeaseRetry until the
// value lands or the lease expires. A value loaded under a lease that was
// lost (a Delete cleared it, or it expired) is not stored. On Redis the
// store is one Lua script, atomic; on Memcached it is a set, a check of the
// lease and, if it was lost, a delete, so for one round trip a reader can
// see a value that is then withdrawn. Every process must agree on Lease: a
// Delete without it clears no lease. The leases' mechanism is package
// internal/lease's, the loader's plumbing (negative entries, the limiter,
// a loader's panic, the background refreshes) internal/loading's.
//
// With Options.MetaLeases the lease is taken by the read itself, one round
// trip: on Memcached ≥ 1.6 a placeholder item in the key's place, its CAS
// id the lease (its flags tell our reads it is a miss); on Redis one
// script that reads the key and takes the same lease key as without it.
// On Memcached every process must run a version with MetaLeases before it
// is set: an older one reads a placeholder as an empty value, as another
// client (gomemcache, say) always does, for as long as a load lasts.
//
// With Options.StaleWhileRevalidate a value is kept that long past its TTL
// (the soft TTL), and a read past the TTL hands its reload to one caller of
// the fleet, in the background, while every caller is answered at once
// with the value read; Options.EarlyRefresh does the same that long before
// the (soft) TTL. Keys stored without a TTL are never refreshed. Memcached
// needs the meta commands for either (without them the value is only kept
// longer), and a Delete clears a refresh's lease as it clears a load's.
// GetMultiOrLoad takes its leases and its refreshes per key, one round trip
// per owner, and reloads the keys one call wins in one background call of
// its loader.
//
// # Auto-pipelining and the near cache
//
// With Options.AutoPipeline, concurrent callers share round trips. On Redis
// each node's single-key commands go through go-redis's auto-pipeliner on
// the node's own client (EXPERIMENTAL in go-redis; go.mod pins the
// version): while a batch is on the wire, the commands that arrive wait and
// go together in the next, GetMulti's MGETs too. On Memcached the Gets that
// arrive while one is in flight go together as one multi-get. Neither has a
// timer: a call that finds none other under way to its node is sent at
// once. A queued caller whose context ends returns at once, but its command
// may still run.
//
// With Options.NearCache, hot keys are answered from process memory: each
// node has a store of copies that Get and GetMulti read before anything
// else, so that a hit costs a lookup, no command and no allocation (a
// GetMulti answers the keys held and asks the nodes for the others). The
// value a near hit returns is the store's own, shared by every caller: it
// must not be changed. The rules of a copy:
//
//   - On Redis the store is filled by go-redis's client-side caching (RESP3
//     CLIENT TRACKING) on each node's client, and a write by any client
//     invalidates the copy: the server tells the connection that read the
//     key, which go-redis reads within NearCache.DrainInterval while it is
//     idle. A miss is kept too, and invalidated when the key is created.
//   - On Memcached the store is filled by the façade's Gets, and nothing
//     invalidates a copy: a write by another process is seen once the copy
//     is NearCache.MaxAge old, not before. A miss is not kept.
//   - This client's own writes drop the key's copy at once, on both
//     backends, and a read in flight meanwhile keeps nothing.
//   - MaxAge bounds any copy's life, from the read that filled it.
//   - Copies answer only for a key's current owner: during a migration a
//     miss held near does not stop the fallback to the old owner, and the
//     old owner's copies are not read. A node held down serves none.
//   - A GetMulti fills nothing, and item reads (GetItem, GetItems) never
//     come from the near cache: it holds no flags nor CAS ids.
//
// Near hits are counted in NearCacheStats, not in Stats.
package client
