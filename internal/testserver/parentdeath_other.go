//go:build !linux

package testserver

import "os/exec"

// LinkToParent does nothing outside Linux, which alone has a parent-death
// signal: there a test binary killed without its cleanups leaves its
// servers running.
func LinkToParent(cmd *exec.Cmd) {}
