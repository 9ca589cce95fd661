// Package doorbell wakes a goroutine that waits for work on a thread of
// its own, straight from the kernel: a goroutine bound to its thread
// (runtime.LockOSThread) that blocks on a channel is handed back to its
// thread through the Go scheduler, by a second thread that the kernel may
// wake behind a busy one — 0.3-1 ms on a 2-core VM where the work itself
// took as long. A Bell's waiter sleeps in the kernel on its own thread,
// which Ring wakes directly.
package doorbell

import (
	"sync/atomic"
	"time"
)

// A Bell has one waiter at a time and any number of ringers. A ring
// before the wait is not lost: the next Wait returns at once.
type Bell struct {
	state atomic.Uint32 // idle, rung or asleep
	ch    chan struct{} // off Linux: what the waiter blocks on
}

const (
	idle uint32 = iota
	rung
	asleep
)

// Ring wakes the waiter, or the next Wait if none waits now.
func (b *Bell) Ring() {
	if b.state.Swap(rung) == asleep {
		b.wake()
	}
}

// Wait returns true once the bell has rung since the last Wait returned
// true, or false after timeout (0: no timeout) without a ring.
func (b *Bell) Wait(timeout time.Duration) bool {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		if b.state.CompareAndSwap(rung, idle) {
			return true
		}
		left := time.Duration(0)
		if timeout > 0 {
			if left = time.Until(deadline); left <= 0 {
				return false
			}
		}
		if b.state.CompareAndSwap(idle, asleep) {
			b.sleep(left)
			b.state.CompareAndSwap(asleep, idle) // timed out, or woken without a ring
		}
	}
}

// Rung reports whether the bell has rung since the last Wait or Rung
// that said so, and clears it: a waiter that spins calls it.
func (b *Bell) Rung() bool { return b.state.CompareAndSwap(rung, idle) }
