package native

// #include "heterps_kernels.h"
import "C"

import (
	"fmt"
	"runtime"

	"github.com/heterps/heterps/internal/cpuset"
)

// Pinning says whether a CPU backend binds each of its threads to a CPU of
// its own: thread 0 is the goroutine that runs the steps (it calls
// PinCaller), thread k >= 1 the kernels' pool helper k, and a lane split
// off the backend (Split) runs on its share's CPUs. Unpinned, the kernel
// moves the threads between CPUs as it likes and the Go scheduler moves
// the goroutines between threads, each move leaving a core's caches
// behind: on the 2-core Xeon VM, 2-thread ctrdnn training (batch 512, the
// generator beside it) ran 92-100k samples/s unpinned and 112-118k pinned,
// its 90th-percentile step 6.6-7.3 ms against 4.6-4.8 ms.
type Pinning int

const (
	// PinNever leaves the threads to the kernel's scheduler.
	PinNever Pinning = iota
	// PinAuto pins when the backend has as many threads as the process
	// may use CPUs (a machine, a cgroup or a node's cpus given whole to
	// one trainer). With fewer threads it does not, so that two trainers
	// started side by side are not both put on the first CPUs. Two
	// trainers that each take every CPU lose by it: on the 2-core VM
	// they ran 8-15 % slower pinned (both main lanes on CPU 0) than not.
	PinAuto
	// PinAlways pins whenever the process may use a CPU for each thread,
	// and fails otherwise.
	PinAlways
)

// String names a policy as the CLI spells it.
func (p Pinning) String() string {
	switch p {
	case PinNever:
		return "never"
	case PinAuto:
		return "auto"
	case PinAlways:
		return "always"
	}
	return fmt.Sprintf("Pinning(%d)", int(p))
}

// MarshalText spells p as String does.
func (p Pinning) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads "never", "auto" or "always".
func (p *Pinning) UnmarshalText(text []byte) error {
	for _, q := range []Pinning{PinNever, PinAuto, PinAlways} {
		if string(text) == q.String() {
			*p = q
			return nil
		}
	}
	return fmt.Errorf("pinning %q: want never, auto or always", text)
}

// pin applies policy p to a new backend: it picks the CPUs and binds the
// pool's helpers 1..threads-1 to theirs.
func (b *CPU) pin(p Pinning) error {
	if p == PinNever {
		return nil
	}
	cpus, err := cpuset.Allowed()
	if err != nil {
		if p == PinAlways {
			return fmt.Errorf("native: pinning %d threads: %w", b.threads, err)
		}
		return nil
	}
	switch {
	case len(cpus) < b.threads && p == PinAlways:
		return fmt.Errorf("native: pinning %d threads one to a CPU: this process may run on %d of them (CPUs %v)", b.threads, len(cpus), cpus)
	case len(cpus) < b.threads, p == PinAuto && len(cpus) != b.threads:
		return nil
	}
	cpus = cpus[:b.threads]
	for k := 1; k < b.threads; k++ {
		one := C.int(cpus[k])
		if rc := C.hps_pool_pin(C.int(k), &one, 1); rc != 0 {
			return fmt.Errorf("native: pinning kernel helper %d to CPU %d: errno %d", k, cpus[k], int(rc))
		}
	}
	b.cpus = cpus
	return nil
}

// Pinned lists the CPU of each thread, or nil when b is not pinned.
func (b *CPU) Pinned() []int { return b.cpus }

// PinCaller binds the calling goroutine to its thread and the thread to
// b's first CPU, as the caller of b's split kernels sharing them with the
// helpers pinned for b's other threads, and returns what undoes that. On
// an unpinned backend it binds the goroutine to its thread only, leaving
// the thread to go to whichever CPU the kernel gives it: a goroutine that
// resumes from every wait on whichever thread the Go scheduler hands it
// runs its kernels on cold caches, after a thread hand-off — heterps
// train at 2 unpinned threads ran a median 8 % faster with its steps' and
// side lane's goroutines bound (0.95-1.16x in 6 alternated rounds on the
// Zen 4 VM), as much as pinning gained in the same rounds.
func (b *CPU) PinCaller() (unpin func()) {
	runtime.LockOSThread()
	if b.cpus == nil {
		return runtime.UnlockOSThread
	}
	restore, err := cpuset.PinThreadTo(b.cpus[0])
	if err != nil { // the CPU set changed under us: run unpinned
		return runtime.UnlockOSThread
	}
	C.hps_pool_set_base(C.int(b.base))
	return func() {
		C.hps_pool_set_base(0)
		restore()
		runtime.UnlockOSThread()
	}
}

// poolHelperPiecesOf is how many pieces pool helper k has run (tests).
func poolHelperPiecesOf(k int) int64 { return int64(C.hps_pool_helper_pieces(C.int(k))) }

// setPoolBase makes the calling thread thread b of a pinned backend, as
// PinCaller does (tests; the caller locks its goroutine to the thread).
func setPoolBase(b int) { C.hps_pool_set_base(C.int(b)) }

// poolHelperCPU is the one CPU pool helper k may run on, or -1 (tests).
func poolHelperCPU(k int) int { return int(C.hps_pool_pinned_cpu(C.int(k))) }
