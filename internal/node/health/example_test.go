package health_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/health"
)

// Three connection-level failures in a row hold the node down; a miss is
// an answer and counts nothing against it. While it is down its probe
// pings it; on the first answer, ComeUp marks it up.
func Example() {
	h := health.New(health.Config{Name: "a", Addr: "10.0.0.1:6379", Threshold: 3,
		ProbeInterval: time.Millisecond, ProbeCap: 10 * time.Millisecond, ProbeTimeout: time.Second,
		Stats: true, Logger: slog.New(slog.DiscardHandler)})
	defer h.Close()
	h.Ping = func(context.Context) error { return nil } // the node is back
	up := make(chan struct{})
	h.ComeUp = func(context.Context) { // the client's last step before the node serves again
		if h.Success() {
			close(up)
		}
	}

	ctx := context.Background()
	refused := &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	h.Done(ctx, node.OpGet, h.Begin(), node.ErrCacheMiss)
	for range 3 {
		h.Done(ctx, node.OpGet, h.Begin(), refused)
	}
	fmt.Println("down:", h.Down(), "failures:", h.Failures.Load())
	<-up
	c := h.Ops()[0]
	fmt.Println("up again; gets:", c.OK, "answered,", c.Errors[health.Refused], "refused")
	// Output:
	// down: true failures: 3
	// up again; gets: 1 answered, 3 refused
}
