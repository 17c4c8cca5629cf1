package seeded_test

import (
	"fmt"
	"os"

	"github.com/shardcache/shardcache/internal/seeded"
)

// A file built with the tag shardcache_seeded declares its bug as a
// variable; the normal build's twin declares it false.
func ExampleOn() {
	os.Setenv(seeded.Env, "notomb")
	defer os.Unsetenv(seeded.Env)
	fmt.Println(seeded.On("notomb"), seeded.On("nodualdelete"))
	// Output: true false
}
