package topology

import "time"

// FollowOptions makes a client follow a fleet's topology
// (client.Options.Topology, whose type, client.TopologyOptions, is this
// one): client.Options.Nodes, Placement and MigrateFrom are left empty.
type FollowOptions struct {
	// Source streams the topologies: topology.DNS, topofile.Source or
	// etcdsource.Source.
	Source Source
	// Wait bounds how long New waits for the source's first topology.
	// Default client.DefaultTopologyWait.
	Wait time.Duration
	// Skew is how far apart the clocks of the fleet's processes may be
	// (package topology, "Clocks"). Default DefaultClockSkew; a
	// negative Skew means none.
	Skew time.Duration
	// Lead and Window are the migration of a change that comes without
	// one: it starts Lead after this process received it and lasts
	// Window. Lead must exceed how far apart the processes may receive
	// one change (a DNS source's Interval, plus the resolvers' caching);
	// it is added to the skew, so that an update of a moved key that
	// depends on its value (Incr, Touch, an append) waits from the start
	// for about twice Skew+Lead and the network timeouts (the handover).
	// Defaults client.DefaultTopologyLead and
	// client.DefaultTopologyWindow.
	Lead, Window time.Duration
	// WriteLog is how many recent writes the client remembers for the
	// repair after a topology received late. Default client.DefaultWriteLog; a
	// negative WriteLog keeps none, and a late topology then repairs
	// nothing (a repair failure).
	WriteLog int
	// OnApply, when set, is called with each topology the client applies,
	// once it runs it, on the goroutine that follows the source: to report
	// the version the process runs (etcdsource.Registration.Set). It must
	// not call Close, which waits for that goroutine.
	OnApply func(*Topology)
}

// FollowStatus is where a client stands in the topology it follows, as
// client.Client.TopologyInfo reports it (client.TopologyStatus is this
// type).
type FollowStatus struct {
	// Following is set when the client follows a source.
	Following bool
	// Version is the version of the topology the client runs.
	Version int64
	// Phase is where the client stands in that topology's rollout.
	Phase Phase
	// Pending is the version of a topology waiting for the migration under
	// way to end; 0 when none waits.
	Pending int64
	// Applied counts the topologies applied (the first included),
	// Refused those Validate refused, SourceErrors the errors the source
	// reported.
	Applied, Refused, SourceErrors int64
	// Late counts the topologies received after their start; Repairing is
	// set while the client holds one before its start. Repaired counts the
	// keys the repairs buried on their new owners, RepairFailures the
	// repairs that could not complete (the write log did not reach back to
	// the start, or a new owner did not answer): the keys not buried may
	// read stale on their new owners.
	Late           int64
	Repairing      bool
	Repaired       int64
	RepairFailures int64
	// LastError is the last refusal or source error, empty when none.
	LastError string
}
