package alloc

import (
	"errors"
	"fmt"
	"math"
)

// StepModel predicts seconds per iteration on u units: C/u + O, where C is
// the iteration's divisible work (c·S) and O the per-job overhead.
type StepModel struct {
	C, O float64
}

// Seconds returns the predicted seconds of one iteration on u units (u > 0).
func (m StepModel) Seconds(u float64) float64 { return m.C/u + m.O }

// StepSample is one measured iteration time.
type StepSample struct {
	Units   int
	Seconds float64
}

// FitStepModel fits C and O by least squares on x = 1/units. With a single
// distinct unit count the overhead cannot be told apart and is taken as 0.
// Both are kept non-negative.
func FitStepModel(s []StepSample) (StepModel, error) {
	if len(s) == 0 {
		return StepModel{}, errors.New("step model: no samples")
	}
	var n, sx, sy, sxx, sxy float64
	for i, v := range s {
		if v.Units <= 0 || !(v.Seconds > 0) || math.IsInf(v.Seconds, 0) {
			return StepModel{}, fmt.Errorf("step model: sample %d: %d units, %v s: want positive and finite", i, v.Units, v.Seconds)
		}
		x := 1 / float64(v.Units)
		n, sx, sy, sxx, sxy = n+1, sx+x, sy+v.Seconds, sxx+x*x, sxy+x*v.Seconds
	}
	den := n*sxx - sx*sx
	if den <= 1e-15*n*sxx {
		return StepModel{C: sy / sx}, nil
	}
	c := (n*sxy - sx*sy) / den
	o := (sy - c*sx) / n
	switch {
	case o < 0:
		return StepModel{C: sxy / sxx}, nil
	case c < 0:
		return StepModel{O: sy / n}, nil
	}
	return StepModel{C: c, O: o}, nil
}
