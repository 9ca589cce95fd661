package tether

import (
	"os/exec"
	"runtime"
	"syscall"

	"github.com/heterps/heterps/internal/timerslack"
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
// process, and so the children's death signal waits for the process. The
// thread has the timer slack the process inherited, and so have the
// children: a daemon sets its own, and a competitor the benchmarks start
// (PyTorch, Paddle) runs as it would from a shell.
func forkFromOneThread(requests <-chan request) {
	runtime.LockOSThread()
	_ = timerslack.RestoreThread() // on failure children run with ours: slower timers, no harm
	for r := range requests {
		r.done <- r.cmd.Start()
	}
}
