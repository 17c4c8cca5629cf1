// Package seeded names the bugs the client can be built with on purpose,
// so that the consistency checker (internal/chaos, TestSeededBugs) shows it
// finds each. Only files built with the tag shardcache_seeded import it:
// in a normal build every seeded bug is a false constant whose branch
// compiles away.
//
// The one bug that is on is named by the environment variable Env, read
// once per call of On (at a package's initialisation).
package seeded

import (
	"fmt"
	"os"
	"slices"
)

// Env names the environment variable that turns one seeded bug on.
const Env = "SHARDCACHE_SEEDED_BUG"

// Names are the seeded bugs, each named where its constant is declared.
var Names = []string{
	"nodualdelete", "backfillset", "notomb",
	"getnofallback", "getmultinofallback", "nearburykeeps", "tombreplaceable",
	"halfack",
}

// On reports whether Env names the bug name. It panics when Env names no
// bug at all, so that a test of a bug renamed or removed fails at once
// rather than checking a sound client.
func On(name string) bool {
	v := os.Getenv(Env)
	if v != "" && !slices.Contains(Names, v) {
		panic(fmt.Sprintf("seeded: %s=%q names no seeded bug (%v)", Env, v, Names))
	}
	return v == name
}
