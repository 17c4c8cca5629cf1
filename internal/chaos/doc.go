// Package chaos checks the client's consistency the way Jepsen does: record
// a history of concurrent operations from several processes while faults are
// injected, then check the whole history against cache semantics.
//
// A worker process (cmd/chaosworker, RunWorker) runs every call of the
// client that reads or writes (Set, SetMulti, Add, a CAS store, Delete,
// DeleteMulti, Touch, Incr and Decr, Get, GetMulti, GetOrLoad,
// GetMultiOrLoad, RedisDo) over a small hot keyspace, and reads a cold one
// written before the migration (WorkerConfig.ColdKeys), each write with a
// unique value (Value), and records every operation's invocation and completion
// with a Recorder: JSON lines, one write(2) each, wall-clock times of the one
// machine, so that the histories of every process merge (Read). The harness
// (the package's tests, `make chaos`) starts the servers, the toxiproxies in
// front of them and the workers, and applies a seeded fault schedule
// (NewSchedule): server kills and restarts, SIGSTOP, latency, timeouts,
// resets, partitions, a client process killed in the middle of a migration.
//
// A worker may instead follow a topology published in etcd
// (WorkerConfig.Follow, client.Options.Topology), recording what it
// applied and when (TopologyEvent), or reshard on its own at its own time
// (WorkerConfig.SelfReshard): the fleet tests run the rollout protocol of
// package topology, and its counterexample, over several processes.
//
// Check and CheckWith apply the rules of a cache (see Rule); counters count
// (see CounterBackwards). Report and SaveReport print what they found, with
// the operations involved; Visualize draws one violation's sub-history with
// porcupine.
//
// # The rules of values, and why
//
// A cache is not a linearizable register, and the checker does not ask it
// to be one. A read may miss at any time: an eviction, a restarted node, a
// read failed open. Two writes under way at once may be read in either
// order, and back again: a migration's dual write may leave one on the new
// owner and the other on the old, and a restart of the new owner brings
// the old one's back. A write that failed may have been applied, on some
// of the key's nodes, or later: its request may wait in a stopped
// server's socket. Porcupine, which checks linearizability, would reject
// the second: the whole history is not for it. What a cache does promise,
// the rules check, each exactly, in O(n log n) over a whole history:
//
//   - A value read was written (UnknownValue), and not after the read
//     ended (FutureRead).
//   - It was not replaced for certain before the read began: by an
//     acknowledged write or delete that began after its write ended and
//     completed before the read began (StaleRead, DeletedRead).
//   - A failed write has no end, but it has a bound: its request is in
//     front of any request sent after the call returned, which a node
//     takes in order. So it takes effect, if ever, before any acknowledged
//     write or delete of the key that began after it returned (its
//     successor), and its value may be read only until one completed
//     (StaleFailedRead); a failed delete likewise deletes only before its
//     successors. A fault on the key's nodes voids the bound: a stopped or
//     cut-off node may hold the request back and take a later one first (a
//     multi-threaded Memcached resuming), and a FailOpen client drops
//     writes to a node it holds down while acknowledging them. A call cut
//     short by its process's kill returned at the kill.
//   - Reads are evidence: once a read returned the value of an
//     acknowledged Set, a read that began after it ended may not return a
//     value whose write was over before that Set began (ReadWentBack), as
//     two reads flip-flopping between two values, or a new value read and
//     then the old one, would. A value whose write failed is no evidence (it
//     may be on one replica only), nor is a load's (GetOrLoad hands it to
//     its callers stored or not). With replicas a read is evidence only
//     once its Set has returned too: processes read a key's members in
//     different orders (their zone first; a member one holds down and
//     another does not), so while a Set is in flight one may read the new
//     value on a member it reached and another, later, the old one on a
//     member it has not reached yet. Replicas promise no read older than
//     an acknowledged write; real-time order of reads would need a quorum.
//   - A miss needs a cause once the key's value is known (LostKey): the
//     last acknowledged Set before the miss began, and, between that
//     Set's start and the miss's end, something that may have removed its
//     value: a delete (a failed one before its successors only), an expiry
//     (Op.TTL), an eviction, a fault or with FailOpen a failure on the
//     key's nodes (up to CheckOptions.FaultSlack after), a migration's end
//     or a change of topology. A GetOrLoad that loaded missed too, but its
//     read is not recorded apart from its load: it is not checked. Check
//     knows no key's nodes, so a fault on any node explains any miss;
//     CheckWith is told them (CheckOptions.Owners), and which nodes
//     evicted keys (Evictions).
//
// Each rule rejects only histories that no register whose reads may miss
// could produce, its failed writes taking effect before their successors
// or never: TestRulesSoundAgainstPorcupine checks it against porcupine on
// random histories, failures, loads and concurrent writes included. Where
// every write and delete is acknowledged and none overlaps another, the
// rules reject every history that is not linearizable (a regular register
// without new-old inversion is atomic, as Lamport showed), which
// TestRulesCompleteForSequentialWrites checks; with writes under way at
// once they accept what the cache may do and porcupine does not. Only
// LostKey goes beyond a register: the causes it weighs are every way the
// servers and the client may lose a value, and any other is a bug.
package chaos
