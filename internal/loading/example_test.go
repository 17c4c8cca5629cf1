package loading_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/loading"
)

// A read-through load guarded by a limiter of two loads at once, never
// waiting for a token: the third load is refused, and a loader's panic
// comes back as an error.
func Example() {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a clock that stands still
	clock := func() time.Time { return now }
	lim := loading.NewLimiter(1, 2, -1, clock)
	db := func(context.Context) ([]byte, error) { return []byte("row"), nil }

	for _, key := range []string{"user:1", "user:2", "user:3"} {
		if err := lim.Admit(ctx, clock(), key); errors.Is(err, loading.ErrThrottled) {
			fmt.Println(err)
			continue
		}
		v, err := loading.Call(ctx, key, db)
		fmt.Printf("%s: %s %v\n", key, v, err)
	}
	_, err := loading.Call(ctx, "user:4", func(context.Context) ([]byte, error) { panic("nil map") })
	fmt.Println(err)
	fmt.Println(loading.IsNegative([]byte(loading.Negative)), loading.IsNegative([]byte("row")))
	// Output:
	// user:1: row <nil>
	// user:2: row <nil>
	// shardcache: load throttled: key "user:3": next token in 1s
	// shardcache: loader panicked: key "user:4": nil map
	// true false
}
