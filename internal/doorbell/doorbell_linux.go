package doorbell

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futex(2)'s operations on a word of this process's memory only.
const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// sleep blocks the thread while the bell is asleep, for up to d (0: no
// limit), or less.
func (b *Bell) sleep(d time.Duration) {
	var ts *unix.Timespec
	if d > 0 {
		t := unix.NsecToTimespec(d.Nanoseconds())
		ts = &t
	}
	// A system call that blocks: the Go scheduler runs other goroutines
	// meanwhile. EAGAIN (rung already), EINTR and ETIMEDOUT all return to
	// Wait, which looks again.
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&b.state)), futexWaitPrivate, uintptr(asleep),
		uintptr(unsafe.Pointer(ts)), 0, 0)
}

// wake wakes the thread asleep on the bell.
func (b *Bell) wake() {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&b.state)), futexWakePrivate, 1, 0, 0, 0)
}
