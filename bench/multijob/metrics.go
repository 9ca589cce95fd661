package main

import (
	"math"
	"slices"

	"github.com/heterps/heterps/daemon/alloc"
)

// jobRecord is one job of a run as the metrics see it: seconds from the
// run's start when it was submitted, started running and finished, and
// its trace (times relative to its start).
type jobRecord struct {
	name     string
	kind     string
	arrival  float64
	started  float64
	finished float64
	trace    []alloc.TraceLine
}

// metrics are what `heterps sim --json` reports, from real loss histories.
type metrics struct {
	AvgQuality float64 `json:"avg_quality"`
	// AvgQualityFit is AvgQuality with each job's loss read off the curve
	// fitted to its whole trace at the step it had reached (what the
	// simulator's jobs follow), instead of its measured, noisy losses.
	AvgQualityFit float64 `json:"-"`
	MeanTimeTo90  float64 `json:"mean_time_to_90"`
	MeanTimeTo95  float64 `json:"mean_time_to_95"`
	P50TimeTo90   float64 `json:"p50_time_to_90"`
	P95TimeTo90   float64 `json:"p95_time_to_90"`
	P50TimeTo95   float64 `json:"p50_time_to_95"`
	P95TimeTo95   float64 `json:"p95_time_to_95"`
	MakespanS     float64 `json:"makespan_s"`
	DecisionMsMax float64 `json:"decision_ms_max"`
}

// smoothWindow is how many consecutive losses are averaged: a reported
// loss is one batch's.
const smoothWindow = 5

// jobCurve is a job's measured progress: at times at (seconds from the
// run's start), smoothed losses, and its quality scale.
type jobCurve struct {
	at, loss []float64
	fit      []float64 // the fitted curve's loss at each point's step (nil: no fit)
	l0, lmin float64
}

func newJobCurve(j jobRecord) jobCurve {
	c := jobCurve{}
	pts := make([]alloc.Point, len(j.trace))
	for i, l := range j.trace {
		lo := max(0, i-smoothWindow+1)
		sum := 0.0
		for _, m := range j.trace[lo : i+1] {
			sum += m.Loss
		}
		c.at = append(c.at, j.started+l.T)
		c.loss = append(c.loss, sum/float64(i+1-lo))
		pts[i] = alloc.Point{Iter: float64(l.Step), Loss: l.Loss}
	}
	if len(pts) == 0 {
		return c
	}
	c.l0 = j.trace[0].Loss
	c.lmin = slices.Min(c.loss)
	// The fitted floor, unless it extrapolates below the lowest loss by
	// more than the reduction seen (a curve still falling steeply).
	fit, err := alloc.FitCurve(pts, alloc.FitOptions{Decay: 1})
	if err != nil {
		return c
	}
	if fit.Floor() < c.lmin {
		c.lmin = math.Max(fit.Floor(), c.lmin-(c.l0-c.lmin))
	}
	for _, p := range pts {
		c.fit = append(c.fit, fit.Predict(p.Iter))
	}
	return c
}

// quality is the job's normalised loss reduction at time t, of its
// smoothed measured loss or (fitted) of its fitted curve.
func (c jobCurve) quality(t float64, fitted bool) float64 {
	i, _ := slices.BinarySearch(c.at, math.Nextafter(t, math.Inf(1)))
	if i == 0 {
		return 0
	}
	if fitted && c.fit != nil {
		return alloc.NormalisedReduction(c.l0, c.fit[i-1], c.lmin)
	}
	return alloc.NormalisedReduction(c.l0, c.loss[i-1], c.lmin)
}

// timeTo is the first time the job's smoothed loss has fallen by frac of
// its final reduction (its finish time if it never measurably does).
func (c jobCurve) timeTo(frac, finished float64) float64 {
	if len(c.loss) == 0 {
		return finished
	}
	target := c.l0 - frac*(c.l0-c.loss[len(c.loss)-1])
	for i, l := range c.loss {
		if l <= target {
			return c.at[i]
		}
	}
	return finished
}

// computeMetrics measures a run as the simulator does: quality averaged
// over epochs of the jobs arrived and not finished, times to 90 % / 95 %
// of each job's final loss reduction from its arrival, the makespan from
// the run's start.
func computeMetrics(jobs []jobRecord, epoch float64) metrics {
	var m metrics
	curves := make([]jobCurve, len(jobs))
	var to90, to95 []float64
	first, last := math.Inf(1), 0.0
	for i, j := range jobs {
		curves[i] = newJobCurve(j)
		to90 = append(to90, curves[i].timeTo(0.9, j.finished)-j.arrival)
		to95 = append(to95, curves[i].timeTo(0.95, j.finished)-j.arrival)
		first, last = math.Min(first, j.arrival), math.Max(last, j.finished)
	}
	m.MakespanS = last
	var sum, sumFit float64
	epochs := 0
	for t := first + epoch; t <= last+epoch; t += epoch {
		q, qFit, n := 0.0, 0.0, 0
		for i, j := range jobs {
			if j.arrival < t && t-epoch < j.finished {
				q += curves[i].quality(math.Min(t, j.finished), false)
				qFit += curves[i].quality(math.Min(t, j.finished), true)
				n++
			}
		}
		if n > 0 {
			sum, sumFit = sum+q/float64(n), sumFit+qFit/float64(n)
			epochs++
		}
	}
	if epochs > 0 {
		m.AvgQuality, m.AvgQualityFit = sum/float64(epochs), sumFit/float64(epochs)
	}
	m.MeanTimeTo90, m.P50TimeTo90, m.P95TimeTo90 = alloc.Summarise(to90)
	m.MeanTimeTo95, m.P50TimeTo95, m.P95TimeTo95 = alloc.Summarise(to95)
	return m
}

// relErr is |sim - real| / real (NaN when real is 0).
func relErr(sim, real float64) float64 {
	if real == 0 {
		return math.NaN()
	}
	return math.Abs(sim-real) / math.Abs(real)
}
