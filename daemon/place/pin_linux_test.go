package place

import (
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
