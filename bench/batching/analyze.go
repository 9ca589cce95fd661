package main

import (
	"math"
	"time"
)

// Pure functions of a run's samples.

// lossEMA is the EMA of the loss over the samples, updated with weight w
// each time a sample reports a new step (the status's loss is the last
// step's, noisy); out[i] is its value at sample i (NaN before the first
// step).
func lossEMA(samples []sample, w float64) []float64 {
	out := make([]float64, len(samples))
	ema, last := math.NaN(), int64(0)
	for i, s := range samples {
		if s.step > last {
			if math.IsNaN(ema) {
				ema = s.loss
			} else {
				ema = (1-w)*ema + w*s.loss
			}
			last = s.step
		}
		out[i] = ema
	}
	return out
}

// lossAtStep is the EMA at the first sample at or past step; ok is false
// when no sample reaches it.
func lossAtStep(samples []sample, ema []float64, step int64) (float64, bool) {
	for i, s := range samples {
		if s.step >= step && !math.IsNaN(ema[i]) {
			return ema[i], true
		}
	}
	return 0, false
}

// reached is the first sample whose EMA is at or under target; ok is false
// when none is.
func reached(samples []sample, ema []float64, target float64) (int, bool) {
	for i := range samples {
		if ema[i] <= target {
			return i, true
		}
	}
	return 0, false
}

// idealSplit is the global batch split in proportion to the shares (the
// replicas' throughputs), unrounded.
func idealSplit(batch int, shares []float64) []float64 {
	sum := 0.0
	for _, s := range shares {
		sum += s
	}
	out := make([]float64, len(shares))
	for k, s := range shares {
		out[k] = float64(batch) * s / sum
	}
	return out
}

// splitError is max_k |got_k - want_k| / want_k.
func splitError(got []int, want []float64) float64 {
	worst := 0.0
	for k := range want {
		if k < len(got) && want[k] > 0 {
			worst = max(worst, math.Abs(float64(got[k])-want[k])/want[k])
		}
	}
	return worst
}

// lastSplit is the last split the samples show, as floats.
func lastSplit(samples []sample) []float64 {
	for i := len(samples) - 1; i >= 0; i-- {
		if b := samples[i].batches; len(b) > 0 {
			out := make([]float64, len(b))
			for k, x := range b {
				out[k] = float64(x)
			}
			return out
		}
	}
	return nil
}

// firstWithin is the first sample whose split is within tol (relative)
// of want; ok is false when none is.
func firstWithin(samples []sample, want []float64, tol float64) (int, bool) {
	for i, s := range samples {
		if len(s.batches) > 0 && splitError(s.batches, want) <= tol {
			return i, true
		}
	}
	return 0, false
}

// timeAtStep is when the samples first show step or later; ok is false
// when none does.
func timeAtStep(samples []sample, step int64) (time.Time, int64, bool) {
	for _, s := range samples {
		if s.step >= step {
			return s.at, s.step, true
		}
	}
	return time.Time{}, 0, false
}

// meanStepTime is the time per step between the first samples at or past
// from and at or past to (0 when the samples do not span two steps).
func meanStepTime(samples []sample, from, to int64) time.Duration {
	t0, s0, ok0 := timeAtStep(samples, from)
	t1, s1, ok1 := timeAtStep(samples, to)
	if !ok0 || !ok1 || s1 <= s0 {
		return 0
	}
	return t1.Sub(t0) / time.Duration(s1-s0)
}

// backWithin is the first point after sample index from at which the
// step time over the last window (at least window long, between samples
// that report new steps) is within tol of balanced: the steps and
// adjustments since from, and the step time then; ok is false when it
// never is before step until.
func backWithin(samples []sample, from int, until int64, balanced time.Duration, tol float64, window time.Duration) (steps int64, adj int, got time.Duration, ok bool) {
	if from >= len(samples) {
		return 0, 0, 0, false
	}
	start := samples[from]
	var fresh []sample // samples that report a new step
	last := start.step
	for _, s := range samples[from+1:] {
		if s.step > until {
			break
		}
		if s.step > last {
			fresh = append(fresh, s)
			last = s.step
		}
	}
	for j := range fresh {
		for i := j - 1; i >= 0; i-- {
			span := fresh[j].at.Sub(fresh[i].at)
			if span < window {
				continue
			}
			per := span / time.Duration(fresh[j].step-fresh[i].step)
			if float64(per) <= (1+tol)*float64(balanced) {
				return fresh[j].step - start.step, fresh[j].adjustments - start.adjustments, per, true
			}
			break
		}
	}
	return 0, 0, 0, false
}

// sampleIndexAt is the index of the last sample taken at or before at.
func sampleIndexAt(samples []sample, at time.Time) int {
	idx := 0
	for i, s := range samples {
		if s.at.After(at) {
			break
		}
		idx = i
	}
	return idx
}
