// Command chaosworker is one client process of the chaos harness
// (internal/chaos): it reads its chaos.WorkerConfig from the environment
// variable SHARDCACHE_CHAOS_WORKER, runs its operations against the cache
// until the run's end, and records each one in its history file. The
// harness builds it, with the build tags of the system under test, and
// starts several.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/shardcache/shardcache/internal/chaos"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg chaos.WorkerConfig
	if err := json.Unmarshal([]byte(os.Getenv(chaos.WorkerEnv)), &cfg); err != nil {
		return fmt.Errorf("%s: %w", chaos.WorkerEnv, err)
	}
	f, err := os.OpenFile(cfg.History, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return chaos.RunWorker(context.Background(), cfg, chaos.NewRecorder(f))
}
