//go:build !linux

package cpuset

import (
	"errors"
	"runtime"
)

var errLinux = errors.New("pinning to CPUs needs Linux")

// Allowed knows no CPUs off Linux.
func Allowed() ([]int, error) { return nil, errLinux }

// Check refuses off Linux.
func Check([]int) error { return errLinux }

// Pin refuses off Linux.
func Pin([]int) error { return errLinux }

// PinThread refuses off Linux.
func PinThread(int) (func(), error) { return nil, errLinux }

// PinThreadTo refuses off Linux.
func PinThreadTo(int) (func(), error) { return nil, errLinux }

// Restrict refuses off Linux.
func Restrict([]int) (func() error, error) { return nil, errLinux }

// LowerThreadPriority locks the goroutine to its thread; thread priorities
// are set on Linux only.
func LowerThreadPriority(int) (int, error) {
	runtime.LockOSThread()
	return 0, errors.New("thread priorities are set on Linux only")
}

// ThreadNice refuses off Linux.
func ThreadNice(int) (int, error) { return 0, errLinux }

// ThreadID is 0 off Linux: threads are not told apart there.
func ThreadID() int { return 0 }

// Yield yields the processor to other goroutines off Linux.
func Yield() { runtime.Gosched() }
