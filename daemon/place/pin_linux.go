package place

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// pinToCPU locks the calling goroutine to its OS thread and that thread to
// CPU cpu (modulo the CPUs it may use), so that a device is one core; the
// returned func restores the thread's CPU set and unlocks it. Where the CPU
// set cannot be read or set, the goroutine only stays on its thread.
func pinToCPU(cpu int) (unpin func()) {
	runtime.LockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil || old.Count() == 0 {
		return runtime.UnlockOSThread
	}
	var allowed []int
	for c := range 1024 {
		if old.IsSet(c) {
			allowed = append(allowed, c)
		}
	}
	var one unix.CPUSet
	one.Set(allowed[cpu%len(allowed)])
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return runtime.UnlockOSThread
	}
	return func() {
		_ = unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}
}
