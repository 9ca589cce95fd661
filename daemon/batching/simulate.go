package batching

import (
	"fmt"
	"slices"
)

// StepTimes models the compute seconds of every replica at one step, given
// the batches it runs.
type StepTimes func(step int64, batches []int) []float64

// LinearTimes is the model t_k = c_k·b_k + o_k: perSample[k] seconds per
// sample and overhead[k] seconds per step (nil: none).
func LinearTimes(perSample, overhead []float64) StepTimes {
	return func(_ int64, batches []int) []float64 {
		times := make([]float64, len(batches))
		for k, b := range batches {
			times[k] = perSample[k] * float64(b)
			if overhead != nil {
				times[k] += overhead[k]
			}
		}
		return times
	}
}

// SimStep is one simulated BSP step.
type SimStep struct {
	Step        int64
	Batches     []int     // the split this step ran
	Seconds     []float64 // each replica's compute time
	StepSeconds float64   // the barrier: the slowest replica's time
	Wait        []float64 // StepSeconds - Seconds[k]: replica k's idle time at the barrier
	Changed     bool      // the controller changed the split after this step
	Decision    Decision
}

// Simulation is a run of the controller against a model of step times.
type Simulation struct {
	Steps       []SimStep
	Adjustments int     // steps after which the split changed
	TotalTime   float64 // Σ StepSeconds
	TotalWait   float64 // Σ_steps Σ_k Wait[k]
}

// AdjustmentBatches returns the split in force after each adjustment, the
// start first.
func (s Simulation) AdjustmentBatches() [][]int {
	if len(s.Steps) == 0 {
		return nil
	}
	out := [][]int{s.Steps[0].Batches}
	for i, st := range s.Steps {
		if st.Changed && i+1 < len(s.Steps) {
			out = append(out, s.Steps[i+1].Batches)
		}
	}
	return out
}

// Simulate runs steps BSP steps from the start split: each step every
// replica computes for times' seconds, all wait for the slowest, and the
// controller's new split (if any) applies from the next step, in place.
func Simulate(c *Controller, start []int, steps int, times StepTimes) (Simulation, error) {
	var sim Simulation
	batches := slices.Clone(start)
	for s := range int64(steps) {
		secs := times(s, slices.Clone(batches))
		if len(secs) != len(batches) {
			return sim, fmt.Errorf("batching: simulate step %d: model gave %d times for %d replicas", s, len(secs), len(batches))
		}
		next, changed, why := c.Observe(s, nil, batches, secs)
		if why.Reason == InvalidInput {
			return sim, fmt.Errorf("batching: simulate step %d: %v", s, why.Notes)
		}
		st := barrierStep(s, batches, secs)
		st.Changed, st.Decision = changed, why
		sim.add(st)
		batches = next
	}
	return sim, nil
}

func barrierStep(step int64, batches []int, secs []float64) SimStep {
	st := SimStep{Step: step, Batches: slices.Clone(batches), Seconds: slices.Clone(secs), Wait: make([]float64, len(secs))}
	for _, t := range secs {
		st.StepSeconds = max(st.StepSeconds, t)
	}
	for k, t := range secs {
		st.Wait[k] = st.StepSeconds - t
	}
	return st
}

func (s *Simulation) add(st SimStep) {
	s.Steps = append(s.Steps, st)
	s.TotalTime += st.StepSeconds
	for _, w := range st.Wait {
		s.TotalWait += w
	}
	if st.Changed {
		s.Adjustments++
	}
}
