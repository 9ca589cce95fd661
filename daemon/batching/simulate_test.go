package batching

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestSimulateWait: two replicas 3x apart start uniform; the fast one waits
// at the barrier until the first adjustment balances them.
func TestSimulateWait(t *testing.T) {
	cfg := Config{Interval: 2, MinBatch: 1}
	sim := mustSimulate(t, mustController(t, cfg), []int{200, 200}, 6, LinearTimes([]float64{1 * ms, 3 * ms}, nil))
	wantBatches := [][]int{{200, 200}, {200, 200}, {300, 100}, {300, 100}, {300, 100}, {300, 100}}
	wantWait := [][]float64{{0.4, 0}, {0.4, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}}
	for i, st := range sim.Steps {
		if !slices.Equal(st.Batches, wantBatches[i]) || !closeTo(st.Wait, wantWait[i]) {
			t.Errorf("step %d: batches %v wait %v; want %v and %v", i, st.Batches, st.Wait, wantBatches[i], wantWait[i])
		}
	}
	if sim.Adjustments != 1 || !sim.Steps[1].Changed {
		t.Errorf("%d adjustments; want 1, after step 1", sim.Adjustments)
	}
	if math.Abs(sim.TotalWait-0.8) > 1e-9 || math.Abs(sim.TotalTime-(2*0.6+4*0.3)) > 1e-9 {
		t.Errorf("total wait %v time %v; want 0.8 and 2.4", sim.TotalWait, sim.TotalTime)
	}
	if got := sim.AdjustmentBatches(); len(got) != 2 || !slices.Equal(got[1], []int{300, 100}) {
		t.Errorf("splits per adjustment %v", got)
	}
}

func closeTo(a, b []float64) bool {
	for k := range a {
		if math.Abs(a[k]-b[k]) > 1e-9 {
			return false
		}
	}
	return len(a) == len(b)
}

func TestSimulateRefusesABadModel(t *testing.T) {
	short := func(int64, []int) []float64 { return []float64{1} }
	_, err := Simulate(mustController(t, testConfig()), []int{10, 10}, 3, short)
	if err == nil || !strings.Contains(err.Error(), "model gave 1 times for 2 replicas") {
		t.Errorf("error %v", err)
	}
	_, err = Simulate(mustController(t, testConfig()), []int{10, 0}, 3, LinearTimes([]float64{1, 1}, nil))
	if err == nil || !strings.Contains(err.Error(), "batch 0 is not positive") {
		t.Errorf("error %v", err)
	}
}
