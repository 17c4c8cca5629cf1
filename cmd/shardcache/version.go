package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

const versionHelp = `Usage: shardcache version

Prints the version of this build, from the module's build information: the
module version "go install ...@VERSION" fetched; for a build from a
checkout, the pseudo-version Go makes of its commit (+dirty when it had
uncommitted changes), or "(devel)" and the commit when Go recorded only
that; then the Go release that compiled it. "shardcache --version" does the
same.`

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if a := args[0]; a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprintln(stdout, versionHelp)
			return exitOK
		}
		fmt.Fprintf(stderr, "shardcache version: unexpected argument %q: the command takes none\n", args[0])
		return exitUsage
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(info, ok))
	return exitOK
}

// versionLine describes a build: "shardcache v0.1.0, go1.26.0", or from a
// checkout "shardcache v0.0.0-20261201185521-98d2a0d7a712+dirty, go1.26.0"
// (Go's pseudo-version), or without one "shardcache (devel), commit
// 98d2a0d7a712 of 2026-12-01T18:55:21Z (modified), go1.26.0".
func versionLine(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "shardcache (devel), no build information"
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)" // a test binary, or go run
	}
	var b strings.Builder
	fmt.Fprintf(&b, "shardcache %s", version)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// Go 1.24 and later stamp a checkout's build with a pseudo-version that
	// holds the commit already ("v0.0.0-20261201185521-98d2a0d7a712", with
	// "+dirty" when modified): the commit is said once.
	if rev := settings["vcs.revision"]; rev != "" && !strings.Contains(version, rev[:min(len(rev), 12)]) {
		fmt.Fprintf(&b, ", commit %s", rev[:min(len(rev), 12)])
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " of %s", t)
		}
		if settings["vcs.modified"] == "true" {
			b.WriteString(" (modified)")
		}
	}
	if info.GoVersion != "" {
		fmt.Fprintf(&b, ", %s", info.GoVersion)
	}
	return b.String()
}
