package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
)

// pollIntervals are the node poll's intervals in BenchmarkNodeStatsPoll:
// 300 and 3000 times as often as promstats' default (30 s), so that its
// cost, if any, shows.
var pollIntervals = []time.Duration{100 * time.Millisecond, 10 * time.Millisecond}

// BenchmarkNodeStatsPoll is the cost to a Get of the servers' usage being
// polled meanwhile (client.NodeStats, what promstats.NewNodeCollector runs
// in the background): the same façade Get on the same servers, paired, the
// baseline without the poll and ours with a goroutine calling NodeStats
// at each of pollIntervals, serially and from parallelism goroutines per
// CPU: BenchmarkNodeStatsPoll/BACKEND/poll=INTERVAL/Get/{serial,parallel}. The poll runs only
// during ours' blocks (each side's calls say which runs), so that its own
// CPU and its servers' time count against ours alone. Read cpu-ratio and
// wall-ratio: throughput with the poll is 1/wall-ratio of that without.
func BenchmarkNodeStatsPoll(b *testing.B) {
	for _, backend := range []client.Backend{client.Redis, client.Memcached} {
		b.Run(backend.String(), func(b *testing.B) {
			var servers []*testserver.Server
			if backend == client.Redis {
				servers = testserver.Redis(b, benchNodes)
			} else {
				servers = testserver.Memcached(b, benchNodes)
			}
			addrs := testserver.Addrs(servers)
			c := facadeWith(b, client.Options{Backend: backend}, addrs)
			keys, _, _ := loadData(b, c, addrs[0])
			if _, err := c.NodeStats(context.Background()); err != nil {
				b.Fatal(err)
			}

			for _, every := range pollIntervals {
				b.Run("poll="+every.String(), func(b *testing.B) { pollWhileOurs(b, c, keys, every) })
			}
		})
	}
}

// pollWhileOurs runs the paired Get rows of BenchmarkNodeStatsPoll on c,
// polling c every interval during ours' blocks.
func pollWhileOurs(b *testing.B, c *client.Client, keys []string, every time.Duration) {
	const mask = singleKeys - 1
	ctx := context.Background()
	// The poller polls while polling is set: by ours' calls, cleared by
	// the baseline's.
	var polling atomic.Bool
	var polls, failures atomic.Int64
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
			if polling.Load() {
				if _, err := c.NodeStats(pctx); err != nil && pctx.Err() == nil {
					failures.Add(1)
				}
				polls.Add(1)
			}
		}
	})
	defer func() { stop(); wg.Wait() }()
	get := func(poll bool) func(int) error {
		return func(i int) error {
			if polling.Load() != poll {
				polling.Store(poll)
			}
			return checkValue(c.Get(ctx, keys[i&mask]))
		}
	}
	b.Run("Get/serial", pairedSerial(get(false), get(true)))
	b.Run("Get/parallel", pairedParallel(get(false), get(true)))
	polling.Store(false)
	if failures.Load() > 0 {
		b.Fatalf("%d of %d polls failed", failures.Load(), polls.Load())
	}
}
