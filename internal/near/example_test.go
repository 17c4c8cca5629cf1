package near_test

import (
	"fmt"
	"time"

	"github.com/shardcache/shardcache/internal/near"
)

// A read through the store: a lookup first; on a miss, a reservation, the
// read from the node, and the copy kept unless a write ran meanwhile.
func Example() {
	c := near.New(near.Config{MaxEntries: 10000, MaxAge: 10 * time.Second})
	server := map[string]string{"user:42": "Ada"}
	get := func(key string) (string, bool) {
		if v, found, ok := c.Get(key); ok {
			return string(v), found
		}
		tok := c.Reserve(key)
		v, found := server[key]
		c.Fulfill(key, tok, []byte(v), found, 0)
		return v, found
	}
	get("user:42") // from the server
	v, _ := get("user:42")
	fmt.Println(v, c.Stats().Hits, c.Stats().Misses)

	server["user:42"] = "Grace" // a write, then its Delete
	c.Delete("user:42")
	v, _ = get("user:42")
	fmt.Println(v)
	// Output:
	// Ada 1 1
	// Grace
}
