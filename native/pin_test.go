package native

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/internal/threadtest"
)

// allowedCPUs is what this test process may run on; tests that pin need
// two CPUs or more.
func allowedCPUs(t *testing.T) []int {
	t.Helper()
	cpus, err := cpuset.Allowed()
	if err != nil {
		t.Skipf("no CPU set here: %v", err)
	}
	if len(cpus) < 2 {
		t.Skipf("this process may run on %d CPU", len(cpus))
	}
	return cpus
}

// TestPinningPolicies: never pins nothing; auto pins exactly when the
// threads are every CPU the process may use; always pins whenever there
// is a CPU a thread, refusing otherwise with the counts.
func TestPinningPolicies(t *testing.T) {
	cpus := allowedCPUs(t)
	all := len(cpus)
	for _, c := range []struct {
		pin     Pinning
		threads int
		want    []int
	}{
		{PinNever, all, nil},
		{PinAuto, all, cpus},
		{PinAuto, all - 1, nil},
		{PinAuto, all + 1, nil},
		{PinAlways, 1, cpus[:1]},
		{PinAlways, all, cpus},
	} {
		b, err := NewCPU(CPUOptions{Threads: c.threads, Pin: c.pin})
		if err != nil {
			t.Fatalf("%v, %d threads: %v", c.pin, c.threads, err)
		}
		if !slices.Equal(b.Pinned(), c.want) {
			t.Errorf("%v, %d threads on CPUs %v: pinned to %v, want %v", c.pin, c.threads, cpus, b.Pinned(), c.want)
		}
	}
	_, err := NewCPU(CPUOptions{Threads: all + 1, Pin: PinAlways})
	if err == nil || !strings.Contains(err.Error(), "pinning") {
		t.Errorf("always, %d threads on %d CPUs: %v, want a refusal", all+1, all, err)
	}
}

// TestPinnedBackendBindsHelpersAndCaller: helper k runs on thread k's CPU,
// and PinCaller puts the calling thread on thread 0's until undone.
func TestPinnedBackendBindsHelpersAndCaller(t *testing.T) {
	cpus := allowedCPUs(t)
	b, err := NewCPU(CPUOptions{Threads: 2, Pin: PinAlways})
	if err != nil {
		t.Fatal(err)
	}
	if got := poolHelperCPU(1); got != cpus[1] {
		t.Errorf("helper 1 runs on CPU %d, want %d", got, cpus[1])
	}
	runtime.LockOSThread() // read this thread's CPUs before and after
	defer runtime.UnlockOSThread()
	before, _ := cpuset.Allowed()
	unpin := b.PinCaller()
	pinned, _ := cpuset.Allowed()
	unpin()
	after, _ := cpuset.Allowed()
	if !slices.Equal(pinned, cpus[:1]) {
		t.Errorf("the pinned caller may run on %v, want %v", pinned, cpus[:1])
	}
	if !slices.Equal(after, before) {
		t.Errorf("after unpinning the caller may run on %v, want %v back", after, before)
	}
}

// TestSplitGivesEachShareItsCPUs: a pinned backend's lanes each get the
// CPUs of their threads, the side share numbered after the main one.
func TestSplitGivesEachShareItsCPUs(t *testing.T) {
	cpus := allowedCPUs(t)
	b, err := NewCPU(CPUOptions{Threads: 2, Pin: PinAlways})
	if err != nil {
		t.Fatal(err)
	}
	main, side := b.Split(1)
	if main.Threads() != 1 || side.Threads() != 1 || !slices.Equal(main.Pinned(), cpus[:1]) || !slices.Equal(side.Pinned(), cpus[1:2]) || side.base != 1 {
		t.Errorf("split of %v: main %d threads on %v, side %d on %v (thread %d first)", b.Pinned(),
			main.Threads(), main.Pinned(), side.Threads(), side.Pinned(), side.base)
	}
	unpinned, _ := NewCPU(CPUOptions{Threads: 4})
	main, side = unpinned.Split(2)
	if main.Pinned() != nil || side.Pinned() != nil || main.Threads() != 2 || side.Threads() != 2 {
		t.Errorf("split of an unpinned backend: %d threads on %v and %d on %v", main.Threads(), main.Pinned(), side.Threads(), side.Pinned())
	}
}

// TestCallerSharesWithTheHelpersAfterItsBase: a caller pinned as thread b
// hands pieces to helpers b+1..., never to those of the threads before it
// (another lane's CPUs).
func TestCallerSharesWithTheHelpersAfterItsBase(t *testing.T) {
	allowedCPUs(t) // a helper may never run before the caller has claimed every piece on one CPU
	be, err := NewCPU(CPUOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	setPoolBase(2)
	defer setPoolBase(0)
	const rows, cols = 2048, 512 // 16 pieces of bias-act
	x, bias, y := make(HostBuffer, rows*cols), make(HostBuffer, cols), make(HostBuffer, rows*cols)
	first, third := poolHelperPiecesOf(1), poolHelperPiecesOf(3)
	for start := time.Now(); poolHelperPiecesOf(3) == third && time.Since(start) < 10*time.Second; {
		if err := be.BiasAct(ReLU, rows, cols, x, bias, y); err != nil {
			t.Fatal(err)
		}
	}
	if poolHelperPiecesOf(3) == third {
		t.Error("helper 3 took no piece from thread 2's splits")
	}
	if poolHelperPiecesOf(1) != first {
		t.Errorf("helper 1 ran %d pieces of thread 2's splits", poolHelperPiecesOf(1)-first)
	}
}

// TestPinningParsesAsTheCLISpellsIt: the three names round-trip, and an
// unknown one is refused with the choices.
func TestPinningParsesAsTheCLISpellsIt(t *testing.T) {
	for _, p := range []Pinning{PinNever, PinAuto, PinAlways} {
		text, _ := p.MarshalText()
		var q Pinning
		if err := q.UnmarshalText(text); err != nil || q != p {
			t.Errorf("%v: %q read back as %v, %v", p, text, q, err)
		}
	}
	var q Pinning
	if err := q.UnmarshalText([]byte("sometimes")); err == nil || !strings.Contains(err.Error(), "never, auto or always") {
		t.Errorf("sometimes: %v", err)
	}
}

// TestPinCallerBindsAnUnpinnedCallerToItsThread: on an unpinned backend
// PinCaller leaves the CPUs alone but keeps the caller on one thread
// through its waits.
func TestPinCallerBindsAnUnpinnedCallerToItsThread(t *testing.T) {
	b, err := NewCPU(CPUOptions{Threads: 2, Pin: PinNever})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := cpuset.Allowed()
	var threads int
	var during []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer b.PinCaller()()
		during, _ = cpuset.Allowed()
		threads = threadtest.Visited(20)
	}()
	<-done
	if threads != 1 {
		t.Errorf("the caller ran on %d threads through 20 blocking calls, want 1", threads)
	}
	if !slices.Equal(during, before) {
		t.Errorf("the unpinned caller may run on %v, want the process's %v", during, before)
	}
}
