package client

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: probes,
// the backfill worker, context watchers and the servers' helpers must all
// end with Close and t.Cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
