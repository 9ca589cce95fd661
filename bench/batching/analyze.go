package main

import (
	"math"
	"time"
)

// Pure functions of a run's samples.

// fresh says which samples report a new step: one past the last step the
// same job reported, or past the step a restarted job started from.
func fresh(samples []sample) []bool {
	out := make([]bool, len(samples))
	job, last := "", int64(0)
	for i, s := range samples {
		if s.job != job {
			job, last = s.job, s.restored
		}
		if s.step > last {
			out[i], last = true, s.step
		}
	}
	return out
}

// lossEMA is the EMA of the loss over the samples, updated with weight w
// each time a sample reports a new step (the status's loss is the last
// step's, noisy); out[i] is its value at sample i (NaN before the first
// step).
func lossEMA(samples []sample, w float64) []float64 {
	out := make([]float64, len(samples))
	ema := math.NaN()
	for i, isNew := range fresh(samples) {
		if isNew {
			if math.IsNaN(ema) {
				ema = samples[i].loss
			} else {
				ema = (1-w)*ema + w*samples[i].loss
			}
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

// restart is one kill-restart of a run's job: the job that stopped, the
// step it had reached, the step its successor restarted from, and the
// time from the old job's last new step to the new job's first.
type restart struct {
	from, to string
	reached  int64
	restored int64
	gap      time.Duration
}

// trainedTwice is the steps the restart trains again.
func (r restart) trainedTwice() int64 { return max(0, r.reached-r.restored) }

// segment is the samples of one job of a run's chain.
type segment struct {
	job               string
	restored, reached int64
	firstNew, lastNew time.Time // its first and last sample with a new step
}

// segments splits the samples by job, in order.
func segments(samples []sample) []segment {
	var out []segment
	isNew := fresh(samples)
	for i, s := range samples {
		if len(out) == 0 || out[len(out)-1].job != s.job {
			out = append(out, segment{job: s.job, restored: s.restored, reached: s.restored})
		}
		g := &out[len(out)-1]
		if isNew[i] {
			g.reached = s.step
			if g.firstNew.IsZero() {
				g.firstNew = s.at
			}
			g.lastNew = s.at
		}
	}
	return out
}

// restarts are the job changes in the samples; the gap is zero where the
// old job never reported a step or the new one never did.
func restarts(samples []sample) []restart {
	var out []restart
	segs := segments(samples)
	for i := 1; i < len(segs); i++ {
		old, cur := segs[i-1], segs[i]
		r := restart{from: old.job, to: cur.job, reached: old.reached, restored: cur.restored}
		if !old.lastNew.IsZero() && !cur.firstNew.IsZero() {
			r.gap = cur.firstNew.Sub(old.lastNew)
		}
		out = append(out, r)
	}
	return out
}

// inPlaceOverhead estimates what the in-place resizes cost: for every
// interval between two samples with new steps in which the controller's
// adjustment count grew, the interval's time beyond its steps at the
// slower of the step times of the intervals before and after it (the old
// split's and the new one's); an interval without a neighbour on each
// side counts nothing.
func inPlaceOverhead(samples []sample) time.Duration {
	var pts []sample
	for i, isNew := range fresh(samples) {
		if isNew {
			pts = append(pts, samples[i])
		}
	}
	perStep := func(i int) time.Duration { // interval i: pts[i-1] to pts[i]
		return pts[i].at.Sub(pts[i-1].at) / time.Duration(pts[i].step-pts[i-1].step)
	}
	oneJob := func(i int) bool { return pts[i].job == pts[i-1].job && pts[i].step > pts[i-1].step }
	var total time.Duration
	for i := 2; i+1 < len(pts); i++ {
		if pts[i].adjustments <= pts[i-1].adjustments || !oneJob(i-1) || !oneJob(i) || !oneJob(i+1) {
			continue
		}
		ref := max(perStep(i-1), perStep(i+1))
		span := pts[i].at.Sub(pts[i-1].at)
		total += max(0, span-ref*time.Duration(pts[i].step-pts[i-1].step))
	}
	return total
}
