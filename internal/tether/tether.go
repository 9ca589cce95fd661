// Package tether starts child processes that end with their parent: the
// node daemons `heterps run` and `heterps launch` start, the replicas of
// `heterps profile`. A parent that is killed outright (SIGKILL, the OOM
// killer) cannot stop its children itself, and daemons left behind would
// go on training on the machine's cores, holding their ports, for nobody.
//
// On Linux each child asks the kernel for SIGTERM when the thread that
// forked it ends (prctl PR_SET_PDEATHSIG). The kernel ties that signal to
// the thread, not the process, and the Go runtime ends a thread whenever a
// goroutine locked to it returns without unlocking; so every child is
// forked from one thread kept for the life of the process, and the signal
// comes when the process dies and not before. A daemon stops on SIGTERM as
// it does under systemd. Elsewhere children are started plainly and
// outlive a killed parent.
package tether

import (
	"os/exec"
	"sync"
)

var (
	startOnce sync.Once
	requests  chan request
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

// Start starts cmd (as cmd.Start does) tied to this process: the child
// gets SIGTERM when this process ends, however it ends.
func Start(cmd *exec.Cmd) error {
	if !tie(cmd) {
		return cmd.Start()
	}
	startOnce.Do(func() {
		requests = make(chan request)
		go forkFromOneThread(requests)
	})
	done := make(chan error, 1)
	requests <- request{cmd: cmd, done: done}
	return <-done
}

// Run starts cmd tied to this process (Start) and waits for it, as
// cmd.Run does.
func Run(cmd *exec.Cmd) error {
	if err := Start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}
