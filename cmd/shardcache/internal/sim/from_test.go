package sim

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/shardcache/shardcache/ring"
)

// TestRunFromPlacement runs the ring modes from a mod-N fleet: they start
// on the given placement and move keys off it, by server.
func TestRunFromPlacement(t *testing.T) {
	cfg := small()
	cfg.Steps, cfg.ReshardAt = 12, 4
	cfg.Modes = []Mode{ModeDualRing}
	cfg.FromKind = "modulo"
	cfg.FromPlacement = func(nodes []ring.Node) (ring.Locator, error) {
		slots, err := ring.ModuloSlots(nodes)
		if err != nil {
			return nil, err
		}
		return ring.NewModulo(slots)
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	from, _ := cfg.FromPlacement(res.Config.From)
	to, _ := ring.New(res.Config.To, ring.WithVnodes(res.Config.Vnodes))
	want := ring.Compare(from, to).Moved
	for _, m := range res.Modes {
		if math.Abs(m.Moved-want) > 1e-12 {
			t.Errorf("%v: moved %v, want %v (crc32 %% 8 to the ring)", m.Mode, m.Moved, want)
		}
	}
	if dual := res.Modes[0]; dual.Total.FallbackHits == 0 || dual.Backfills == 0 {
		t.Errorf("dual-ring from mod-N found nothing on the old owners: %+v", dual.Total)
	}

	cfg.FromPlacement = func([]ring.Node) (ring.Locator, error) { return nil, ring.ErrBadHash }
	if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrBadConfig) || !errors.Is(err, ring.ErrBadHash) {
		t.Errorf("a placement that does not build: %v, want ErrBadConfig and its cause", err)
	}
}
