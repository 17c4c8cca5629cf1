package sim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
)

// A short run of the default change, 8 nodes down to 6: how low the hit
// rate falls after the reshard, in each mode, against its steady state.
func ExampleRun() {
	res, err := sim.Run(context.Background(), sim.Config{
		Keys: 1000, ZipfV: 40, Requests: 500,
		TTL: 5 * time.Minute, Steps: 20, ReshardAt: 4, Seed: 1,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range res.Modes {
		fmt.Printf("%-15v %2.0f%% of keys move, the hit rate falls to %2.0f%% of its steady state\n",
			m.Mode, 100*m.Moved, 100*m.MinHitRate/m.SteadyHitRate)
	}
	// Output:
	// mod-N           75% of keys move, the hit rate falls to 57% of its steady state
	// ring            26% of keys move, the hit rate falls to 88% of its steady state
	// dual-ring       26% of keys move, the hit rate falls to 98% of its steady state
	// dual-ring+sweep 26% of keys move, the hit rate falls to 98% of its steady state
}
