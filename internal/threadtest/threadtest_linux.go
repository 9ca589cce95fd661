package threadtest

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/heterps/heterps/internal/cpuset"
)

// Visited is how many distinct threads the calling goroutine ran on over
// rounds blocking system calls of 5 ms each, while goroutines as many as
// the Ps keep every P busy. As around a long cgo call, the runtime hands
// a blocked thread's P to another thread; back from the call, an unbound
// goroutine finds every P taken, is queued, and resumes on whichever
// thread next runs a P.
func Visited(rounds int) int {
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for !stop.Load() {
				runtime.Gosched()
			}
		})
	}
	defer wg.Wait()
	defer stop.Store(true)
	seen := map[int]bool{cpuset.ThreadID(): true}
	for range rounds {
		ts := syscall.NsecToTimespec(5e6)
		_ = syscall.Nanosleep(&ts, nil) // blocks the thread, not just the goroutine
		seen[cpuset.ThreadID()] = true
	}
	return len(seen)
}
