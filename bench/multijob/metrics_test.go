package main

import (
	"math"
	"testing"

	"github.com/heterps/heterps/daemon/alloc"
)

// job has losses loss(k) for k = 0..steps, one step a second from
// started.
func job(arrival, started float64, steps int, loss func(k float64) float64) jobRecord {
	j := jobRecord{arrival: arrival, started: started, finished: started + float64(steps)}
	for k := range steps + 1 {
		j.trace = append(j.trace, alloc.TraceLine{T: float64(k), Step: int64(k + 1), Loss: loss(float64(k))})
	}
	return j
}

func linear(k float64) float64 { return 1 - k/100 }

func decaying(k float64) float64 { return 0.5 + math.Exp(-k/10) }

func TestTimesToReachFromArrival(t *testing.T) {
	// The smoothed loss (a mean of 5) at step i is 1 - (i-2)/100 and ends
	// at 0.02: 90 % of the reduction is reached at i = 91, 95 % at 96.
	m := computeMetrics([]jobRecord{job(0, 10, 100, linear)}, 1)
	if math.Abs(m.MeanTimeTo90-101) > 1e-9 || math.Abs(m.MeanTimeTo95-106) > 1e-9 || m.MakespanS != 110 {
		t.Errorf("t90 %v, t95 %v, makespan %v; want 101, 106, 110", m.MeanTimeTo90, m.MeanTimeTo95, m.MakespanS)
	}
}

func TestAverageQualityCountsQueuedJobs(t *testing.T) {
	running := computeMetrics([]jobRecord{job(0, 0, 100, decaying)}, 1)
	if running.AvgQuality < 0.8 || running.AvgQuality > 0.95 {
		t.Errorf("avg quality %v, want about 0.87 (1 - e^(-k/10) over 100 steps)", running.AvgQuality)
	}
	// Without noise the fitted curve follows the losses, ahead of their
	// smoothed mean.
	if d := running.AvgQualityFit - running.AvgQuality; d < 0 || d > 0.05 {
		t.Errorf("avg quality %v fitted, %v measured: want the fitted a little higher", running.AvgQualityFit, running.AvgQuality)
	}
	// Queued as long as it runs: quality 0 for the first half.
	queued := computeMetrics([]jobRecord{job(0, 100, 100, decaying)}, 1)
	if math.Abs(queued.AvgQuality-running.AvgQuality/2) > 0.02 {
		t.Errorf("queued for half the time: avg quality %v, want about %v", queued.AvgQuality, running.AvgQuality/2)
	}
	two := computeMetrics([]jobRecord{job(0, 0, 100, decaying), job(0, 0, 100, decaying)}, 1)
	if math.Abs(two.AvgQuality-running.AvgQuality) > 1e-12 {
		t.Errorf("two equal jobs %v, one %v: want the same average", two.AvgQuality, running.AvgQuality)
	}
}

func TestRelErr(t *testing.T) {
	if e := relErr(1.1, 1); math.Abs(e-0.1) > 1e-9 || !math.IsNaN(relErr(1, 0)) {
		t.Errorf("relErr: %v, %v", e, relErr(1, 0))
	}
}
