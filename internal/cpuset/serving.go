package cpuset

import (
	"runtime"
	"sync"
)

// Serving a while. A node daemon pinned to its CPUs computes on them and,
// only where it hosts a parameter-server shard, also serves other
// processes. With as many Go Ps as CPUs, a server's goroutines wait while
// the stage's compute goroutine holds its P through a kernel call (until
// the runtime takes the P back, up to 10 ms when its monitor idles); one P
// more lets them run at once, on the niced compute thread's CPU. A daemon
// that serves no one gains nothing by the extra P and pays for it: its
// runtime wakes a second thread for every message, and on two cores that
// thread takes turns with the other daemons' compute. On the 2-core Intel
// VM, four one-core nodes of an allreduce job ran 1.01-1.06x faster with
// the extra P on the shard's daemon only than with it on all four (13
// alternated pairs, median 1.03x; a ps-synced job 0.98-0.99x over 3
// pairs); two nodes, BSP and asynchronous, moved within the noise, and
// without the extra P anywhere the asynchronous pair ran at 0.64x.

// procs is the GOMAXPROCS of a pinned process and its servers' count.
var procs struct {
	sync.Mutex
	pinned  int // the GOMAXPROCS Pin set: its CPUs; 0 when none was set
	serving int // Serving's holders
}

// setPinnedProcs records the GOMAXPROCS that Pin set (0: none), keeping
// an extra P for holders of Serving.
func setPinnedProcs(n int) {
	procs.Lock()
	defer procs.Unlock()
	procs.pinned = n
	if n > 0 {
		runtime.GOMAXPROCS(n + min(procs.serving, 1))
	}
}

// Serving gives a process that Pin pinned one Go P more than its CPUs
// until the returned function is called (by every holder: the P goes once
// the last lets go). It changes nothing in a process that Pin did not
// pin, or whose GOMAXPROCS the GOMAXPROCS variable set.
func Serving() (done func()) {
	procs.Lock()
	defer procs.Unlock()
	if procs.serving++; procs.serving == 1 && procs.pinned > 0 {
		runtime.GOMAXPROCS(procs.pinned + 1)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			procs.Lock()
			defer procs.Unlock()
			if procs.serving--; procs.serving == 0 && procs.pinned > 0 {
				runtime.GOMAXPROCS(procs.pinned)
			}
		})
	}
}

// PinServing is Pin for a process that serves others for good while it
// computes (a profile's replica that hosts the shard): it is Serving from
// the start and never lets go.
func PinServing(cpus []int) error {
	if err := Pin(cpus); err != nil {
		return err
	}
	Serving()
	return nil
}
