package main

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// samplesOf makes one sample per second at the given steps and losses.
func samplesOf(steps []int64, losses []float64) []sample {
	out := make([]sample, len(steps))
	for i := range steps {
		out[i] = sample{at: t0.Add(time.Duration(i) * time.Second), step: steps[i], loss: losses[i]}
	}
	return out
}

func TestLossEMAUpdatesOnlyOnNewSteps(t *testing.T) {
	s := samplesOf([]int64{0, 1, 1, 2}, []float64{9, 1, 5, 3})
	got := lossEMA(s, 0.5)
	if !math.IsNaN(got[0]) {
		t.Errorf("before the first step: %v, want NaN", got[0])
	}
	want := []float64{1, 1, 2} // a repeated step's loss is not counted again
	for i, w := range want {
		if got[i+1] != w {
			t.Errorf("ema[%d] = %v, want %v", i+1, got[i+1], w)
		}
	}
}

func TestReachedIsTheFirstSampleAtOrUnderTarget(t *testing.T) {
	s := samplesOf([]int64{1, 2, 3, 4}, []float64{4, 3, 2, 1})
	ema := lossEMA(s, 1)
	if i, ok := reached(s, ema, 2); !ok || i != 2 {
		t.Errorf("reached(2) = %d, %v; want 2, true", i, ok)
	}
	if _, ok := reached(s, ema, 0.5); ok {
		t.Error("reached(0.5) is true; no sample is that low")
	}
	if l, ok := lossAtStep(s, ema, 3); !ok || l != 2 {
		t.Errorf("lossAtStep(3) = %v, %v; want 2, true", l, ok)
	}
}

func TestIdealSplitFollowsTheShares(t *testing.T) {
	got := idealSplit(1000, []float64{0.2, 0.8})
	if got[0] != 200 || got[1] != 800 {
		t.Errorf("idealSplit = %v, want [200 800]", got)
	}
	if e := splitError([]int{100, 900}, got); e != 0.5 {
		t.Errorf("splitError = %v, want 0.5", e)
	}
}

func TestFirstWithinFindsWhereTheSplitSettled(t *testing.T) {
	s := samplesOf([]int64{1, 2, 3, 4}, []float64{0, 0, 0, 0})
	for i, b := range [][]int{{512, 512}, {300, 724}, {210, 814}, {200, 824}} {
		s[i].batches, s[i].adjustments = b, i
	}
	final := lastSplit(s)
	if final[0] != 200 || final[1] != 824 {
		t.Fatalf("lastSplit = %v", final)
	}
	if i, ok := firstWithin(s, final, 0.1); !ok || i != 2 {
		t.Errorf("firstWithin = %d, %v; want 2 (210 is within 10 %% of 200)", i, ok)
	}
}

func TestMeanStepTime(t *testing.T) {
	s := samplesOf([]int64{0, 10, 20, 40}, []float64{0, 0, 0, 0})
	if got := meanStepTime(s, 10, 40); got != 2*time.Second/30 {
		t.Errorf("meanStepTime(10, 40) = %v, want 2 s over 30 steps", got)
	}
	if got := meanStepTime(s, 50, 60); got != 0 {
		t.Errorf("meanStepTime past the end = %v, want 0", got)
	}
}

func TestBackWithinWaitsForTheStepTimeToRecover(t *testing.T) {
	// 1 step/s (slow) for 4 s after the throttle, then 4 steps/s.
	steps := []int64{100, 101, 102, 103, 104, 108, 112, 116, 120}
	s := samplesOf(steps, make([]float64, len(steps)))
	for i := range s {
		s[i].adjustments = i / 3
	}
	n, adj, got, ok := backWithin(s, 0, 200, 250*time.Millisecond, 0.1, 2*time.Second)
	if !ok {
		t.Fatal("backWithin: never, want the step time back at 250 ms")
	}
	if n != 12 || adj != 2 || got != 250*time.Millisecond {
		t.Errorf("backWithin = %d steps, %d adj, %v; want 12 steps, 2 adj, 250ms", n, adj, got)
	}
	if _, _, _, ok := backWithin(s, 0, 200, 100*time.Millisecond, 0.1, 2*time.Second); ok {
		t.Error("backWithin(100 ms) is ok; the step time never gets that low")
	}
}

// jobSamples makes one sample per second of job at the given steps, the
// job having started from restored.
func jobSamples(job string, restored int64, from time.Time, steps ...int64) []sample {
	out := make([]sample, len(steps))
	for i, st := range steps {
		out[i] = sample{at: from.Add(time.Duration(i) * time.Second), job: job, restored: restored, step: st, loss: float64(st)}
	}
	return out
}

func TestFreshCountsARestartedJobsStepsAgain(t *testing.T) {
	s := append(jobSamples("a", 0, t0, 0, 3, 3, 6), jobSamples("b", 4, t0.Add(4*time.Second), 4, 5, 7)...)
	got := fresh(s)
	want := []bool{false, true, false, true, false, true, true}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("fresh[%d] (job %s step %d) = %v, want %v", i, s[i].job, s[i].step, got[i], want[i])
		}
	}
	ema := lossEMA(s, 1)
	if ema[5] != 5 {
		t.Errorf("EMA after the restart's step 5 = %v, want 5 (its loss)", ema[5])
	}
}

func TestRestartsCountStepsTrainedTwiceAndTheGap(t *testing.T) {
	s := append(jobSamples("a", 0, t0, 2, 8, 8), jobSamples("b", 5, t0.Add(5*time.Second), 5, 5, 6, 9)...)
	rs := restarts(s)
	if len(rs) != 1 {
		t.Fatalf("restarts = %+v, want one", rs)
	}
	r := rs[0]
	// a's last new step was at t0+1 s; b's first at t0+7 s.
	if r.from != "a" || r.to != "b" || r.reached != 8 || r.restored != 5 || r.trainedTwice() != 3 || r.gap != 6*time.Second {
		t.Errorf("restart %+v (twice %d); want a reached 8, b from 5, 3 twice, gap 6s", r, r.trainedTwice())
	}
	if rs := restarts(jobSamples("a", 0, t0, 1, 2, 3)); len(rs) != 0 {
		t.Errorf("one job: restarts %+v, want none", rs)
	}
}

func TestInPlaceOverheadIsTheResizeIntervalsExcess(t *testing.T) {
	// 10 steps a second, except the interval in which the controller
	// adjusted: 10 steps in 1.5 s.
	at := []time.Duration{0, 1000, 2000, 3500, 4500, 5500}
	steps := []int64{10, 20, 30, 40, 50, 60}
	var s []sample
	for i := range at {
		adj := 0
		if i >= 3 {
			adj = 1
		}
		s = append(s, sample{at: t0.Add(at[i] * time.Millisecond), job: "a", step: steps[i], adjustments: adj})
	}
	if got := inPlaceOverhead(s); got != 500*time.Millisecond {
		t.Errorf("inPlaceOverhead = %v, want 500ms", got)
	}
	for i := range s {
		s[i].adjustments = 0
	}
	if got := inPlaceOverhead(s); got != 0 {
		t.Errorf("without adjustments inPlaceOverhead = %v, want 0", got)
	}
}
