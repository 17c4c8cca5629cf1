// Package topology describes which cache nodes a fleet of processes uses,
// where that description comes from, and how the fleet moves from one to
// the next without a stale read.
//
// A Topology is a version, the nodes of a ring (ring.Node: names,
// addresses, weights) and optionally a Migration: the placement keys move
// from (other nodes, or another kind as the CLI's --from-kind: ketama,
// modulo, rendezvous), a start time and a window, written once by the
// publisher and so identical in every process whenever it received them.
// Package topology/topofile encodes it as the CLI's node files are (JSON or
// YAML): a list of {name, addr, weight}, or an object holding such a list
// as "nodes" beside "version", "migration" and "max_removed_share"; an
// unknown field is an error.
//
// A Source streams topologies (Watch): DNS resolves A/AAAA or SRV records
// (a Kubernetes headless service), topofile.Source follows a file (config
// management, a Kubernetes ConfigMap), and etcdsource.Source follows an
// etcd key, publishes to it and counts the processes on each version. A
// source reports errors as they come and never sends an empty topology.
// The sources with dependencies live in packages of their own, so that this
// one, which a client imports, needs nothing but the standard library and
// ring.
//
// Validate is what a client asks before it applies a topology: no nodes,
// duplicate names or addresses, a malformed address or weight, a window
// without a start, or a change that removes more than MaxRemovedShare of
// the weight at once (default one half) are refused with a typed error, and
// the client keeps the last topology that passed.
//
// # The rollout protocol
//
// The danger is a fleet that does not switch at one instant. Process A,
// still on the old placement O, updates a key k that moves: it writes the
// old owner O(k) alone. Process B, already reading the new owner N(k)
// first, finds there the copy it backfilled before A's write, and serves it:
// a read one write old, for every moved key that A writes. A window long
// enough does not help: the stale copy is on N(k), which B reads first.
//
// The cure is to separate receiving a topology from acting on it. publish
// writes the new topology with a start S far enough ahead for every process
// to receive it (etcd delivers within a second; "shardcache topology
// status" shows who runs which version before S), and a window W. Each
// process then goes through the phases of PhaseAt, whenever it received the
// topology:
//
//   - Before S: read the old placement alone. A write sets the old owner
//     and leaves a tombstone on the new owner (node.Bury in the client: a
//     marker that reads as a miss and that no copy stores over); a delete
//     deletes the old owner and buries the new one.
//   - During [S, S+W): read the new owner first, fall back to the old one on
//     a miss and backfill the new owner (add if absent: a write that got
//     there first, or a tombstone, wins); write both owners; a delete
//     deletes the old owner and buries the new one until the window's end.
//   - After S+W: read the new placement alone.
//
// Why no read is stale, when every process received the topology before S:
//
//   - Before S every read goes to O(k), and every write reaches O(k), from
//     processes on the old topology as from those waiting for S: O is
//     exactly what one cache would be.
//   - No value is set on N(k) before S; only tombstones reach it. Setting
//     N(k) there would not do: a process that has not received the
//     topology yet updates O(k) alone and would leave the earlier copy on
//     N(k) stale. A tombstone holds no value: N(k) has no copy from before
//     S to serve.
//   - From S every process writes both owners, so N(k) holds either nothing
//     (and the read falls back to O(k), which has every write), or a copy
//     backfilled from O(k) or written after S, which every later write
//     replaces on both, and which a delete removes from both; a copy read
//     from O(k) before a delete and landing after it finds the tombstone.
//
// # Clocks
//
// Processes agree on S and S+W, not on the instant their clocks reach
// them. With clocks within a skew ε of each other (DefaultClockSkew;
// package migration's WithSkew, which the client gives it):
//
//   - Backfills start at S+ε, not S. A process still Before by its clock
//     buries N(k) where it replaces O(k), and a backfill that read O(k)
//     before that write finds the tombstone. From S+ε every writer sets
//     both owners, and the backfill's add-if-absent loses to them.
//   - An update that depends on the value (an Incr, an append) runs on O(k)
//     until S+ε, burying N(k) as a write before the start does: until then
//     no copy may carry the value over. Such tombstones are of their own
//     kind (the write's, node.TombWritten): the value is current on O(k).
//     Every one was left before S+2ε by any clock and landed within the
//     network timeouts, so a copy whose read of O(k) began after S+3ε and
//     those timeouts (the handover) read every such write, and may replace
//     it; a Delete's tombstone it never replaces. Between S+ε and the
//     handover an update of a moved key waits: one that went to O(k) then
//     could follow a copy made at the handover, and be lost. From the
//     handover an update brings its key over, counters included, and a
//     sweep copies the keys written before the start.
//   - Writes and deletes keep reaching O(k) until S+W+ε: a process still
//     During by its clock may read O(k) as a fallback, and backfill from it.
//
// What it does not cover: the races of cache-aside on one node (a reader
// that read the database before a writer's invalidation, and sets after
// it), which leases solve (client.Options.Lease) and which the protocol
// neither adds nor removes; two processes setting one key at the same
// instant, whose sets may land in different orders on the two owners (as
// in any dual write: invalidating with Delete converges, setting may not);
// and a copy of k that N(k) holds from a time before the previous
// migration, when it last owned k, if k's TTL outlives the time since
// (publish a migration back to a placement only once such copies have
// expired).
//
// A process started mid-window (a restart, a scale-up) reads the topology
// from its source before it serves, and joins the phase its clock gives:
// during the window it reads the new owners first with fallback to the old
// ones and writes both, exactly as MigrateFrom resumes a migration, and it
// has written nothing before, so it made nothing stale. A process must not
// start serving on a static node list older than the published topology:
// with a source, the first Update comes first.
//
// # A change without a migration
//
// A source that knows nodes alone (DNS, a bare node list in a file) gives
// no start, and a node it drops is most likely gone (a pod deleted): a
// failure to reach a node such a change removed is forgiven, as FailOpen
// forgives a node held down, so that its keys can be written and deleted
// on their new owners; if it answers again during the window, holding
// values, a process falling back to it may read them. The client then starts the migration a lead after it received
// the change (client.TopologyOptions.Lead), for its Window, and adds the
// lead to the clock skew: the processes receive one DNS change up to a
// resolution interval apart, so their starts are up to that far apart,
// which is what the skew's rules cover. The lead must exceed the source's
// interval (plus any resolver caching).
//
// # A late process
//
// A process that receives a topology at or after its start (Late: it was
// cut off, or its watch lagged) has been writing O(k) alone while others
// read N(k) first: N(k) may hold copies staler than its writes. It must
// not serve a read from N before it has repaired them:
//
//   - It enters the phase Before, whatever the clock says, and serves no
//     read from N: it reads the old placement alone, and its writes wait.
//     That read is fresh or a miss during the window: every process writes
//     O(k) until S+W+ε, and an update that moves a key to N (an Incr
//     after the handover) deletes it on O(k).
//   - It buries, on its new owner, every key it wrote or deleted since S−ε
//     (the client keeps a bounded log of the keys it wrote recently,
//     client.TopologyOptions.WriteLog; a process that was on the old
//     topology wrote nothing else), with a write's tombstone, which a copy
//     made after the handover replaces with the value on O(k).
//   - Then it joins the phase of its clock, and its writes go on.
//
// If its log does not reach back to S (it overflowed: a long partition),
// it buries what it has and says so (an error, a counter), then joins its
// phase all the same, since its writes cannot wait for the window's end:
// the keys it wrote and did not log may read stale on their new owners,
// for it and for the others, until their TTL. If the window has already
// ended when it receives the topology, the old owners are no longer
// written by the others: it repairs from its log and uses the new
// placement alone; during the repair (a few round trips) its reads of the
// old placement may return values the others no longer update. The others may have read stale copies from N while it was cut off;
// no process can prevent that after the fact, which is why the start must
// leave room for every process to receive the topology: give --start-in
// more than the longest delay expected, check "shardcache topology status"
// before S, and keep the etcd lease (etcdsource.DefaultLeaseTTL) shorter
// than the lead, so that a process cut off for longer drops out of the
// count.
//
// PhaseAt and Late are this package's pure part: given a topology and an
// instant, which phase, and whether a process that received it then is
// late. Package migration's Route says, for a key, an instant and the
// skew, where each operation goes; client.Options.Topology follows a
// source and acts, as its doc says.
package topology
