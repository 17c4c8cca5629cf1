package client

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// go-redis v9 prints every failed dial to stderr ("connection pool: failed
// to dial after 1 attempts: ... connection refused") through a logger that
// is global to the process: redis.SetLogger is its only setting, and v9.23
// has no logger per client. A node that is down would fill the
// application's stderr with these lines, although each failure reaches the
// application as an error and in Health.
//
// So the first New that makes a go-redis client itself (no NewRedisClient)
// installs, once per process, a logger that drops those lines and prints
// every other one to stderr as go-redis's default does. This is the
// library's one piece of global state; an application that wants go-redis's
// lines its own way calls redis.SetLogger after New. Where Options gains a
// logger, the dropped lines can go there.

var quietDial sync.Once

// quietDialErrors installs dialFilter as go-redis's logger, once.
func quietDialErrors() {
	quietDial.Do(func() {
		redis.SetLogger(dialFilter{log.New(os.Stderr, "redis: ", log.LstdFlags)})
	})
}

// dialFilter drops go-redis's failed-dial lines and prints the others.
type dialFilter struct{ out *log.Logger }

func (f dialFilter) Printf(_ context.Context, format string, v ...any) {
	if strings.Contains(format, "failed to dial") {
		return
	}
	f.out.Print(fmt.Sprintf(format, v...))
}
