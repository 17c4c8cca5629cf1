package backfill_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/backfill"
	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/migration"
)

// Two values read from old owners are copied to their new owner, which
// a write reached first for one of them: that copy is skipped, the newer
// value kept.
func Example() {
	ctx := context.Background()
	newOwner := nodetest.NewMap()
	_ = newOwner.Set(ctx, "user:2", []byte("written since"), time.Hour)
	cs := &migration.Counters{}

	copies := []node.Item{
		{Key: "user:1", Value: []byte("from the old owner"), TTL: time.Hour},
		{Key: "user:2", Value: []byte("from the old owner"), TTL: time.Hour},
	}
	stored, err := backfill.Write(ctx, cs, newOwner, copies, false, false)
	fmt.Println(stored, err)
	fmt.Printf("user:1 %q, user:2 %q\n", newOwner.Value("user:1"), newOwner.Value("user:2"))
	s := cs.Snapshot()
	fmt.Println("backfills", s.Backfills, "skipped", s.BackfillsSkipped, "dropped", s.BackfillsDropped)
	// Output:
	// [true false] <nil>
	// user:1 "from the old owner", user:2 "written since"
	// backfills 1 skipped 1 dropped 0
}
