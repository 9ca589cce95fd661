package batching

import (
	"fmt"
	"math"
	"slices"
)

// Config tunes the closed-loop controller.
type Config struct {
	// Interval is the number of steps between adjustments; the times of a
	// window are measured at one split, so a window starts again whenever
	// the batches change.
	Interval int
	// Smoothing is the EMA factor of each replica's step time:
	// t_k ← Smoothing·t_k + (1-Smoothing)·sample. 0 keeps only the latest
	// sample; it must be below 1.
	Smoothing float64
	// Deadband is the relative error max_k |t_k - t̄|/t̄ under which the
	// batches are left alone.
	Deadband float64
	// MinBatch is every replica's smallest batch (at least 1: a replica with
	// batch 0 has no throughput to measure).
	MinBatch int
	// MaxBatch is each replica's largest batch (from its memory); nil means
	// no bound. Its length must match the number of replicas observed.
	MaxBatch []int
}

// DefaultConfig adjusts every 10 steps, smooths lightly and ignores
// imbalances under 5%.
func DefaultConfig() Config {
	return Config{Interval: 10, Smoothing: 0.5, Deadband: 0.05, MinBatch: 1}
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Interval < 1:
		return fmt.Errorf("batching: interval %d: must be at least 1 step", c.Interval)
	case math.IsNaN(c.Smoothing) || c.Smoothing < 0 || c.Smoothing >= 1:
		return fmt.Errorf("batching: smoothing %v: must be in [0, 1)", c.Smoothing)
	case math.IsNaN(c.Deadband) || math.IsInf(c.Deadband, 0) || c.Deadband < 0:
		return fmt.Errorf("batching: deadband %v: must be a finite number ≥ 0", c.Deadband)
	case c.MinBatch < 1:
		return fmt.Errorf("batching: min_batch %d: must be at least 1", c.MinBatch)
	}
	for k, m := range c.MaxBatch {
		if m < c.MinBatch {
			return fmt.Errorf("batching: max_batch[%d] = %d < min_batch %d", k, m, c.MinBatch)
		}
	}
	return nil
}

// Reason says why a Decision left the batches as they were or changed them.
type Reason string

const (
	Adjusted       Reason = "adjusted"
	InsideDeadband Reason = "inside deadband"
	WarmingUp      Reason = "warming up"
	HeldByBounds   Reason = "held by bounds" // the update rounds back to the same split
	SingleReplica  Reason = "single replica" // nothing to balance
	InvalidInput   Reason = "invalid input"  // the observation was refused; see Detail
)

// Decision is what one Observe concluded, in a form the coordinator can show
// in its status.
type Decision struct {
	Step     int64             `json:"step"`
	Reason   Reason            `json:"reason"`
	Notes    []string          `json:"notes,omitempty"` // ignored samples, resets, refused input
	MeanTime float64           `json:"mean_seconds"`    // t̄, 0 until every replica has a time
	MaxError float64           `json:"max_error"`       // max_k |t_k - t̄|/t̄
	Replicas []ReplicaDecision `json:"replicas"`
}

// ReplicaDecision is one replica's part of a Decision.
type ReplicaDecision struct {
	ID         int     `json:"id"`
	Batch      int     `json:"batch"`      // for the next step
	Seconds    float64 `json:"seconds"`    // t_k, the EMA of its step's compute time (0: none yet)
	Throughput float64 `json:"throughput"` // X_k = b_k/t_k in samples/s at the measured batch
	Samples    int     `json:"samples"`    // valid times in the current window
}

// Controller is the closed-loop (dynamic) batch controller of one
// data-parallel stage. It is not safe for concurrent use.
type Controller struct {
	cfg  Config
	gain float64 // exponent of t̄/t_k; 1 in production, 0 switches the update off in tests

	ids      []int
	lastStep int64
	started  bool
	win      window
	// global is the sum of the batches the run started with: a split that
	// sums to something else is one in transition (replicas that apply a
	// change at different steps), never decided on.
	global int
	// pending is the split of the last adjustment until every replica
	// reports running it; waited is how many observations it has waited.
	pending []int
	waited  int
}

// window holds the times measured at one split of the batches.
type window struct {
	batches []int
	steps   int
	ema     []float64
	samples []int
}

// NewController returns a controller with no history.
func NewController(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.MaxBatch = slices.Clone(cfg.MaxBatch)
	return &Controller{cfg: cfg, gain: 1}, nil
}

// Observe takes one step's report: the replicas' ids (nil: their positions),
// the batches they ran and their compute seconds. Every Interval steps at one
// split it sets b_k ← b_k·t̄/t_k and re-splits the same global batch within the
// bounds. next is the split for the coming steps (a copy of batches unless
// changed). Bad input never panics: it yields an InvalidInput decision and
// the batches unchanged.
func (c *Controller) Observe(step int64, ids []int, batches []int, computeSeconds []float64) (next []int, changed bool, why Decision) {
	next = slices.Clone(batches)
	why = Decision{Step: step}
	if err := c.checkObservation(ids, batches, computeSeconds); err != nil {
		why.Reason, why.Notes = InvalidInput, []string{err.Error()}
		return next, false, why
	}
	if ids == nil {
		ids = positions(len(batches))
	}
	why.Notes = c.resetIfNewRun(step, ids, batches)
	c.restartChangedReplicas(batches)
	why.Notes = append(why.Notes, c.record(ids, computeSeconds)...)
	c.win.steps++
	why.Replicas = c.replicaDecisions(ids, batches)
	why.Reason = c.decide(&next, &why)
	for k := range why.Replicas {
		why.Replicas[k].Batch = next[k]
	}
	return next, why.Reason == Adjusted, why
}

func (c *Controller) checkObservation(ids, batches []int, seconds []float64) error {
	n := len(batches)
	switch {
	case n == 0:
		return fmt.Errorf("batching: no replicas in the report")
	case len(seconds) != n:
		return fmt.Errorf("batching: %d compute times for %d batches", len(seconds), n)
	case ids != nil && len(ids) != n:
		return fmt.Errorf("batching: %d replica ids for %d batches", len(ids), n)
	case c.cfg.MaxBatch != nil && len(c.cfg.MaxBatch) != n:
		return fmt.Errorf("batching: max_batch has %d entries for %d replicas", len(c.cfg.MaxBatch), n)
	}
	for k, b := range batches {
		if b < 1 {
			return fmt.Errorf("batching: replica %d: batch %d is not positive", k, b)
		}
	}
	return nil
}

func positions(n int) []int {
	ids := make([]int, n)
	for k := range ids {
		ids[k] = k
	}
	return ids
}

// resetIfNewRun forgets everything when the replica set changes or the step
// goes back (a restore from a checkpoint).
func (c *Controller) resetIfNewRun(step int64, ids, batches []int) []string {
	var notes []string
	reset := !c.started
	switch {
	case !c.started:
	case !slices.Equal(ids, c.ids):
		notes = append(notes, fmt.Sprintf("replica set changed from %v to %v: history reset", c.ids, ids))
		reset = true
	case step <= c.lastStep:
		notes = append(notes, fmt.Sprintf("step %d is not after step %d: history reset", step, c.lastStep))
		reset = true
	}
	if reset {
		c.win, c.pending, c.global = window{}, nil, sum(batches)
	}
	c.ids, c.lastStep, c.started = slices.Clone(ids), step, true
	return notes
}

// restartChangedReplicas forgets the times of each replica whose batch
// changed (a time measured at another batch says nothing of this one) and
// starts the window's count of steps again; the others keep theirs.
func (c *Controller) restartChangedReplicas(batches []int) {
	n := len(batches)
	if len(c.win.batches) != n {
		c.win = window{batches: slices.Clone(batches), ema: make([]float64, n), samples: make([]int, n)}
		return
	}
	for k, b := range batches {
		if b != c.win.batches[k] {
			c.win.batches[k], c.win.ema[k], c.win.samples[k], c.win.steps = b, 0, 0, 0
		}
	}
}

// setWindow starts a window at batches, every replica's history forgotten.
func (c *Controller) setWindow(batches []int) {
	n := len(batches)
	c.win = window{batches: slices.Clone(batches), ema: make([]float64, n), samples: make([]int, n)}
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// record folds the valid times into the EMAs and names the ignored ones.
func (c *Controller) record(ids []int, seconds []float64) []string {
	var notes []string
	for k, t := range seconds {
		if math.IsNaN(t) || math.IsInf(t, 0) || t <= 0 {
			notes = append(notes, fmt.Sprintf("replica %d: compute time %v ignored (not a positive finite number)", ids[k], t))
			continue
		}
		if c.win.samples[k] == 0 {
			c.win.ema[k] = t
		} else {
			c.win.ema[k] = c.cfg.Smoothing*c.win.ema[k] + (1-c.cfg.Smoothing)*t
		}
		c.win.samples[k]++
	}
	return notes
}

// decide applies the update once a window is full, and sets next.
func (c *Controller) decide(next *[]int, why *Decision) Reason {
	if len(c.win.batches) == 1 {
		return SingleReplica
	}
	if c.waitingForPending(why) || c.win.steps < c.cfg.Interval {
		return WarmingUp
	}
	if got := sum(c.win.batches); got != c.global {
		why.Notes = append(why.Notes, fmt.Sprintf("split %v sums to %d, not %d: in transition", c.win.batches, got, c.global))
		c.win.steps = 0
		return WarmingUp
	}
	for k, s := range c.win.samples {
		if s == 0 {
			why.Notes = append(why.Notes, fmt.Sprintf("replica %d: no valid compute time in the last %d steps", c.ids[k], c.win.steps))
			c.win.steps = 0
			return WarmingUp
		}
	}
	why.MeanTime, why.MaxError = meanAndMaxError(c.win.ema)
	if why.MaxError < c.cfg.Deadband {
		c.win.steps = 0
		return InsideDeadband
	}
	proposed, err := c.rebalance(why.MeanTime)
	if err != nil {
		why.Notes = append(why.Notes, err.Error())
		c.win.steps = 0
		return InvalidInput
	}
	if slices.Equal(proposed, c.win.batches) {
		c.win.steps = 0
		return HeldByBounds
	}
	*next = proposed
	c.setWindow(proposed)
	c.pending, c.waited = proposed, 0
	return Adjusted
}

// pendingPatience is how many windows the controller waits for its last
// split to reach every replica before it goes on without (a split set
// elsewhere, say).
const pendingPatience = 4

// waitingForPending reports whether the last adjustment's split has yet to
// reach every replica: until it has, the times reported are (at least in
// part) of the split before, and deciding on them would adjust twice.
func (c *Controller) waitingForPending(why *Decision) bool {
	if c.pending == nil {
		return false
	}
	if slices.Equal(c.win.batches, c.pending) {
		c.pending = nil
		return false
	}
	c.waited++
	if c.waited > pendingPatience*c.cfg.Interval {
		why.Notes = append(why.Notes, fmt.Sprintf("split %v never reached the replicas (they run %v): no longer waited for", c.pending, c.win.batches))
		c.pending = nil
		return false
	}
	return true
}

func meanAndMaxError(times []float64) (mean, maxErr float64) {
	for _, t := range times {
		mean += t
	}
	mean /= float64(len(times))
	for _, t := range times {
		maxErr = math.Max(maxErr, math.Abs(t-mean)/mean)
	}
	return mean, maxErr
}

// rebalance is the proportional update b_k ← b_k·t̄/t_k, re-split so that the
// global batch and the bounds hold.
func (c *Controller) rebalance(mean float64) ([]int, error) {
	global := c.global
	weights := make([]float64, len(c.win.batches))
	for k, b := range c.win.batches {
		weights[k] = float64(b) * math.Pow(mean/c.win.ema[k], c.gain)
	}
	min, max, err := Bounds{Min: c.cfg.MinBatch, Max: c.cfg.MaxBatch}.perReplica(len(weights))
	if err != nil {
		return nil, err
	}
	return Split(global, weights, min, max)
}

// replicaDecisions reports the window's times (before decide may end it).
func (c *Controller) replicaDecisions(ids, batches []int) []ReplicaDecision {
	out := make([]ReplicaDecision, len(batches))
	for k := range out {
		out[k] = ReplicaDecision{ID: ids[k], Batch: batches[k], Seconds: c.win.ema[k], Samples: c.win.samples[k]}
		if out[k].Seconds > 0 {
			out[k].Throughput = float64(batches[k]) / out[k].Seconds
		}
	}
	return out
}
