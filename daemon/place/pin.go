package place

import (
	"runtime"

	"github.com/heterps/heterps/internal/cpuset"
)

// pinToCPU locks the calling goroutine to its OS thread and that thread to
// CPU cpu (modulo the CPUs it may use), so that a device is one core; the
// returned func restores the thread's CPU set and unlocks it. Where the CPU
// set cannot be read or set (or off Linux), the goroutine only stays on its
// thread.
func pinToCPU(cpu int) (unpin func()) {
	runtime.LockOSThread()
	restore, err := cpuset.PinThread(cpu)
	if err != nil {
		return runtime.UnlockOSThread
	}
	return func() {
		restore()
		runtime.UnlockOSThread()
	}
}
