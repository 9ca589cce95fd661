package place

import (
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// cpusOfThisThread is the CPU set of the calling thread.
func cpusOfThisThread(t *testing.T) unix.CPUSet {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	return set
}

// TestExecutePinsEachDeviceToACPU: every op of a device runs on a thread
// allowed one CPU, the same for all of that device's ops and another for
// each device (where the process may use two CPUs).
func TestExecutePinsEachDeviceToACPU(t *testing.T) {
	allowed := cpusOfThisThread(t)
	g, x := alternatingExecutor(t, "mlp-digits", 8)
	var mu sync.Mutex
	seen := map[int]map[unix.CPUSet]bool{} // device: CPU sets its ops ran on
	for i := range g.Ops {
		x.run[i] = func() error {
			set := cpusOfThisThread(t)
			mu.Lock()
			defer mu.Unlock()
			d := x.placement[i]
			if seen[d] == nil {
				seen[d] = map[unix.CPUSet]bool{}
			}
			seen[d][set] = true
			return nil
		}
	}
	if _, err := x.step(t.Context()); err != nil {
		t.Fatal(err)
	}
	var sets []unix.CPUSet
	for d, s := range seen {
		if len(s) != 1 {
			t.Errorf("device %d ran on %d CPU sets", d, len(s))
		}
		for set := range s {
			if set.Count() != 1 {
				t.Errorf("device %d ran on a thread allowed %d CPUs", d, set.Count())
			}
			sets = append(sets, set)
		}
	}
	if allowed.Count() >= 2 && len(sets) == 2 && sets[0] == sets[1] {
		t.Errorf("both devices ran on the same CPU")
	}
}

// TestUnpinningRestoresTheThread: the thread gets its CPU set back.
func TestUnpinningRestoresTheThread(t *testing.T) {
	runtime.LockOSThread() // stay on this thread across the unpin
	defer runtime.UnlockOSThread()
	before := cpusOfThisThread(t)
	unpin := pinToCPU(1)
	if pinned := cpusOfThisThread(t); pinned.Count() != 1 {
		t.Errorf("pinned to %d CPUs", pinned.Count())
	}
	unpin()
	if after := cpusOfThisThread(t); after != before {
		t.Errorf("CPU set after unpinning: %d CPUs, before %d", after.Count(), before.Count())
	}
}
