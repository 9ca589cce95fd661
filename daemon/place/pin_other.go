//go:build !linux

package place

import "runtime"

// pinToCPU locks the calling goroutine to its OS thread; CPU sets are set
// on Linux only.
func pinToCPU(int) (unpin func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
