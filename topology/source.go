package topology

import "context"

// Source is where topologies come from: DNS (DNS), a file (package
// topology/topofile), etcd (package topology/etcdsource). A client follows
// one through Watch.
type Source interface {
	// Watch returns a stream of updates: first the current topology, or
	// the error that kept the source from reading it, then one update per
	// change, until ctx is done, when the channel is closed. A source never
	// sends an empty topology: an empty answer, a missing key or a broken
	// file is an error, and the consumer keeps the last topology it
	// applied. The source waits for the consumer to receive each update;
	// each Topology received is the consumer's to keep.
	Watch(ctx context.Context) <-chan Update
}

// Update is one element of a Source's stream: a topology that passed
// Check, or an error.
type Update struct {
	Topology *Topology // nil when Err is set
	Err      error
}

// send delivers u on ch unless ctx ends first, and reports whether it did.
func send(ctx context.Context, ch chan<- Update, u Update) bool {
	select {
	case ch <- u:
		return true
	case <-ctx.Done():
		return false
	}
}
