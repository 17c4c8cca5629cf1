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
module version "go install ...@VERSION" fetched, or "(devel)" for a build
from a checkout without one, then the commit it was built from when the
build recorded it (and "modified" when the checkout had uncommitted
changes), and the Go release that compiled it. "shardcache --version" does
the same.`

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
// checkout "shardcache (devel), commit 98d2a0d1b2c3 (modified), go1.26.0".
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
	if rev := settings["vcs.revision"]; rev != "" {
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
