// Package cpuset reads the CPUs this process may run on and pins the
// whole process to some of them: a node daemon's cpus (heterpsd), and
// the CPUs `heterps run` deals to its daemons; and it pins one thread to
// one CPU (a device of package place); and it lowers one thread's
// priority (a stage's compute thread, which the threads that the network
// wakes should preempt). Linux only; elsewhere Allowed knows none and Pin,
// PinThread, Check and LowerThreadPriority refuse (LockToCPU only locks).
package cpuset

import "runtime"

// LockToCPU locks the calling goroutine to its OS thread and that thread
// to the n-th (modulo their count) of the CPUs it may run on, and returns
// what gives the thread its CPUs back and unlocks it: a device of package
// place is one core, and a benchmark's one-thread trainers take the CPUs
// in turn. Where the CPU set cannot be read or set (or off Linux), the
// goroutine only stays on its thread until then.
func LockToCPU(n int) (unlock func()) {
	runtime.LockOSThread()
	restore, err := PinThread(n)
	if err != nil {
		return runtime.UnlockOSThread
	}
	return func() {
		restore()
		runtime.UnlockOSThread()
	}
}
