//go:build !linux

package node

import (
	"errors"
	"runtime"
)

// lowerThreadPriority locks the goroutine to its thread; thread priorities
// are set on Linux only.
func lowerThreadPriority(by int) (int, error) {
	runtime.LockOSThread()
	return 0, errors.New("thread priorities are set on Linux only")
}
