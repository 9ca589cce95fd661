package batching

import (
	"math"
	"testing"
)

// balanced is the split with equal step times under t_k = c_k·b_k + o_k:
// b_k = (T - o_k)/c_k with T = (B + Σ o_k/c_k) / Σ 1/c_k. It is the
// throughput-proportional split at its own throughputs (X_k = b_k/T).
func balanced(global int, c, o []float64) []float64 {
	inv, shift := 0.0, 0.0
	for k := range c {
		inv += 1 / c[k]
		if o != nil {
			shift += o[k] / c[k]
		}
	}
	step := (float64(global) + shift) / inv
	b := make([]float64, len(c))
	for k := range c {
		b[k] = step / c[k]
		if o != nil {
			b[k] -= o[k] / c[k]
		}
	}
	return b
}

// near: every batch within 5% of its target (or 1 sample, for rounding).
func near(batches []int, target []float64) bool {
	for k, b := range batches {
		if math.Abs(float64(b)-target[k]) > math.Max(0.05*target[k], 1) {
			return false
		}
	}
	return true
}

// adjustmentsToReach counts the adjustments after which the split is first
// near target, or -1 if it never is.
func adjustmentsToReach(sim Simulation, target []float64) int {
	for i, b := range sim.AdjustmentBatches() {
		if near(b, target) {
			return i
		}
	}
	return -1
}

func mustController(t *testing.T, cfg Config) *Controller {
	t.Helper()
	c, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustSimulate(t *testing.T, c *Controller, start []int, steps int, times StepTimes) Simulation {
	t.Helper()
	sim, err := Simulate(c, start, steps, times)
	if err != nil {
		t.Fatal(err)
	}
	return sim
}

func scaled(xs []float64, f float64) []float64 {
	out := make([]float64, len(xs))
	for k, x := range xs {
		out[k] = x * f
	}
	return out
}
