package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/internal/testserver"
)

// BenchmarkLoadHit prices GetOrLoad's hit path beside a plain Get, and
// GetMultiOrLoad's beside GetMulti, on the same 4 servers in one run:
// BenchmarkLoadHit/BACKEND/OP/MODE/ROW, the plain call first. Every key is
// in the cache, so the loader is never called (a row whose loader runs
// fails). What a hit costs on top of a Get is the check for a negative
// entry; a miss is the database's cost, not the client's.
func BenchmarkLoadHit(b *testing.B) {
	for _, be := range []struct {
		name    string
		backend client.Backend
		start   func(testing.TB, int) []*testserver.Server
	}{{"redis", client.Redis, testserver.Redis}, {"memcached", client.Memcached, testserver.Memcached}} {
		b.Run(be.name, func(b *testing.B) {
			addrs := testserver.Addrs(be.start(b, benchNodes))
			sc := facade(b, be.backend, addrs)
			keys, sets, _ := loadData(b, sc, addrs[0])
			ctx := context.Background()
			errLoaded := errors.New("loader called on a hit")
			load := func(context.Context) ([]byte, error) { return nil, errLoaded }
			loadMulti := func(context.Context, []string) (map[string][]byte, error) { return nil, errLoaded }

			const mask = singleKeys - 1
			get := func(i int) error { return checkValue(sc.Get(ctx, keys[i&mask])) }
			getOrLoad := func(i int) error { return checkValue(sc.GetOrLoad(ctx, keys[i&mask], time.Hour, load)) }
			// MetaLeases: the hit is the lease's read (the script on Redis,
			// ms+mg on Memcached), so that a miss costs one round trip.
			leased := facadeWith(b, client.Options{Backend: be.backend, Lease: 5 * time.Second, MetaLeases: true}, addrs)
			getOrLoadLeased := func(i int) error {
				return checkValue(leased.GetOrLoad(ctx, keys[i&mask], time.Hour, load))
			}
			multi := func(i int) error {
				hits, err := sc.GetMulti(ctx, sets[i%multiBatches])
				if err != nil {
					return err
				}
				return checkHits(len(hits))
			}
			multiOrLoad := func(i int) error {
				hits, err := sc.GetMultiOrLoad(ctx, sets[i%multiBatches], time.Hour, loadMulti)
				if err != nil {
					return err
				}
				return checkHits(len(hits))
			}
			for _, mode := range []struct {
				name string
				run  func(func(int) error) func(*testing.B)
			}{{"serial", serial}, {"parallel", parallel}} {
				b.Run("Get/"+mode.name+"/Get", mode.run(get))
				b.Run("Get/"+mode.name+"/GetOrLoad", mode.run(getOrLoad))
				b.Run("Get/"+mode.name+"/GetOrLoadMetaLeases", mode.run(getOrLoadLeased))
				b.Run("GetMulti100/"+mode.name+"/GetMulti", mode.run(multi))
				b.Run("GetMulti100/"+mode.name+"/GetMultiOrLoad", mode.run(multiOrLoad))
			}
		})
	}
}
