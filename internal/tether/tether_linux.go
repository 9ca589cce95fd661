package tether

import (
	"os/exec"
	"runtime"
	"syscall"
)

// tie asks for SIGTERM to cmd's child when its forking thread ends.
func tie(cmd *exec.Cmd) bool {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	return true
}

// forkFromOneThread starts every child on this goroutine's thread, which
// it never unlocks and never leaves: the thread lives as long as the
// process, and so the children's death signal waits for the process.
func forkFromOneThread(requests <-chan request) {
	runtime.LockOSThread()
	for r := range requests {
		r.done <- r.cmd.Start()
	}
}
