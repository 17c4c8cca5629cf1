// Package chaos checks the client's consistency the way Jepsen does: record
// a history of concurrent operations from several processes while faults are
// injected, then check the whole history against cache semantics.
//
// A worker process (cmd/chaosworker, RunWorker) runs Set, Get, Delete, Incr,
// GetMulti and GetOrLoad over a small hot keyspace, each write with a unique
// value (Value), and records every operation's invocation and completion
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
// Check applies the rules of a cache: a read may miss at any time, but a
// value it returns was not overwritten or deleted by an acknowledged
// operation that completed before the read began (see Rule); counters count
// (see CounterBackwards). Report and SaveReport print what it found, with
// the operations involved; Visualize draws one violation's sub-history with
// porcupine.
package chaos
