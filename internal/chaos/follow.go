package chaos

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/etcdsource"
)

// FollowConfig makes a worker follow a fleet's topology in an etcd key
// (client.Options.Topology over etcdsource.Source), as the processes of a
// fleet do, instead of being given its placements (WorkerConfig's Old,
// New and ReshardAt): the harness publishes, the workers act on what they
// receive, and record when (TopologyEvent).
type FollowConfig struct {
	// Etcd are the endpoints, Key the key that holds the topology.
	Etcd []string
	Key  string
	// Skew is client.TopologyOptions.Skew.
	Skew time.Duration
}

// TopologyEvent is what a worker saw of the topology it follows: each
// topology its client applied (Kind "apply", from
// client.TopologyOptions.OnApply, At when it was applied), and its
// client's TopologyInfo once New returned (Kind "status").
type TopologyEvent struct {
	Proc        int    `json:"p"`
	Incarnation int    `json:"n"`
	Kind        string `json:"kind"`
	At          int64  `json:"at"`
	Version     int64  `json:"version"`
	// Start and Window are the topology's migration, 0 without one.
	Start  int64         `json:"start,omitempty"`
	Window time.Duration `json:"window,omitempty"`
	// Phase is the client's (Kind "status") or the topology's at At.
	Phase topology.Phase `json:"phase"`
	// Late and Repairing are TopologyInfo's, for Kind "status".
	Late      int64 `json:"late,omitempty"`
	Repairing bool  `json:"repairing,omitempty"`
}

// Topology event kinds.
const (
	TopologyApplied = "apply"
	TopologyStatus  = "status"
)

// follow builds the worker's client on the topology of cfg.Follow. Each
// topology applied is recorded, and one with a migration is handed to
// migs (the sweep waits on it).
func (w *worker) follow(ctx context.Context, migs chan<- *topology.Topology) (func(), error) {
	f := w.cfg.Follow
	cli, err := clientv3.New(clientv3.Config{Endpoints: f.Etcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", f.Etcd, err)
	}
	opts := w.options(nil)
	opts.Topology = &client.TopologyOptions{
		Source: &etcdsource.Source{Client: cli, Key: f.Key, Retry: 100 * time.Millisecond},
		Skew:   f.Skew,
		OnApply: func(t *topology.Topology) {
			now := time.Now()
			ev := TopologyEvent{Proc: w.cfg.Proc, Incarnation: w.cfg.Incarnation, Kind: TopologyApplied,
				At: now.UnixNano(), Version: t.Version, Phase: t.PhaseAt(now)}
			if m := t.Migration; m != nil {
				ev.Start, ev.Window = m.Start.UnixNano(), m.Window
				select {
				case migs <- t:
				default:
				}
			}
			w.rec.Topology(ev)
		},
	}
	if w.cur, err = client.New(opts); err != nil {
		cli.Close()
		return nil, err
	}
	s := w.cur.TopologyInfo()
	ev := TopologyEvent{Proc: w.cfg.Proc, Incarnation: w.cfg.Incarnation, Kind: TopologyStatus,
		At: time.Now().UnixNano(), Version: s.Version, Phase: s.Phase, Late: s.Late, Repairing: s.Repairing}
	if m := w.cur.Migration(); m.Active {
		ev.Start, ev.Window = m.Start.UnixNano(), m.End.Sub(m.Start)
	}
	w.rec.Topology(ev)
	return func() { w.cur.Close(); cli.Close() }, nil
}

// sweepFollowed runs one Sweep half a second into the window of the first
// migration the client applies, recorded as an event.
func (w *worker) sweepFollowed(ctx context.Context, migs <-chan *topology.Topology) {
	select {
	case t := <-migs:
		w.sweepAt(ctx, t.Migration.Start.Add(500*time.Millisecond))
	case <-ctx.Done():
	}
}
