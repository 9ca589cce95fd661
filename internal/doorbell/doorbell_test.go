package doorbell

import (
	"runtime"
	"testing"
	"time"
)

// A ring before the wait is kept for it; a wait without a ring times out.
func TestARingBeforeTheWaitIsKept(t *testing.T) {
	var b Bell
	if b.Wait(time.Millisecond) {
		t.Fatal("Wait on a bell that never rang returned true")
	}
	b.Ring()
	b.Ring() // rings do not add up
	if !b.Wait(time.Second) {
		t.Fatal("Wait after a ring timed out")
	}
	if b.Wait(time.Millisecond) || b.Rung() {
		t.Fatal("two rings were taken as two")
	}
	b.Ring()
	if !b.Rung() || b.Rung() {
		t.Fatal("Rung did not take the one ring once")
	}
}

// Ring wakes a waiter asleep on its own thread, as the lanes that use it
// wait: a goroutine bound to its thread.
func TestRingWakesASleepingWaiter(t *testing.T) {
	var b Bell
	woke := make(chan bool)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		woke <- b.Wait(0)
	}()
	for b.state.Load() != asleep { // wait until it sleeps in the kernel
		time.Sleep(time.Millisecond)
	}
	b.Ring()
	select {
	case ok := <-woke:
		if !ok {
			t.Fatal("the waiter woke without the ring")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Ring did not wake the sleeping waiter")
	}
}
