package node

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// lowerThreadPriority locks the calling goroutine to its OS thread for
// good and raises that thread's nice value by by (up to 19), returning the
// value it set. The goroutine must not unlock it: the thread then exits
// with the goroutine, and its priority with it.
func lowerThreadPriority(by int) (int, error) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return 0, fmt.Errorf("read the thread's priority: %w", err)
	}
	nice := min(20-raw+by, 19) // the system call answers 20 - nice
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
		return 0, fmt.Errorf("set the thread's nice to %d: %w", nice, err)
	}
	return nice, nil
}
