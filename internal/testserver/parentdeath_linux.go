package testserver

import (
	"os/exec"
	"syscall"
)

// LinkToParent makes the kernel kill cmd's process (SIGKILL) when the test
// process that starts it dies, however it dies: a test binary that panics
// on its -timeout or is killed with SIGKILL runs no t.Cleanup, and a server
// it started would otherwise hold its port for good. Call it before
// cmd.Start; every server this package starts is linked so.
//
// The kernel sends the signal when the thread that forked the child exits
// (go.dev/issue/27505). Go ends a thread only when a goroutine locked to it
// with runtime.LockOSThread returns without unlocking, which the test
// helpers never do, so in practice the link holds for the process's life.
func LinkToParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = new(syscall.SysProcAttr)
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
