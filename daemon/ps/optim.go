package ps

import (
	"fmt"
	"math"

	"github.com/heterps/heterps/native"
)

// OptimConfig is an optimiser and its learning-rate schedule: what
// daemon/nn's NativeOptim turns a model file's optimiser into, step by step.
type OptimConfig struct {
	// Hyper holds the kind and hyper-parameters (momentum, betas, eps,
	// weight decay); its LR and Step are set per step by At.
	Hyper native.Optim
	// LR is the base learning rate. Kept in float64 so that the schedule
	// rounds to float32 exactly where single-process training does.
	LR         float64
	Warmup     int64 // steps of linear warm-up from 0; 0 = none
	Cosine     bool  // cosine decay to 0 over TotalSteps after the warm-up
	TotalSteps int64 // for the cosine schedule; 0 = unknown (constant rate)
}

// Rate returns the learning rate at step (1-based).
func (c OptimConfig) Rate(step int64) float64 {
	if c.Warmup > 0 && step <= c.Warmup {
		return c.LR * float64(step) / float64(c.Warmup)
	}
	if c.Cosine && c.TotalSteps > 0 {
		frac := float64(step-c.Warmup) / float64(max(c.TotalSteps-c.Warmup, 1))
		return c.LR * 0.5 * (1 + math.Cos(math.Pi*min(frac, 1)))
	}
	return c.LR
}

// At returns the kernel parameters of step (1-based).
func (c OptimConfig) At(step int64) native.Optim {
	o := c.Hyper
	o.LR = float32(c.Rate(step))
	o.Step = step
	return o
}

func (c OptimConfig) validate() error {
	h := c.Hyper
	switch h.Kind {
	case native.SGD, native.Adagrad:
	case native.Adam:
		if !(h.Beta1 >= 0 && h.Beta1 < 1 && h.Beta2 >= 0 && h.Beta2 < 1) {
			return fmt.Errorf("adam betas %g, %g, want in [0, 1): %w", h.Beta1, h.Beta2, ErrArg)
		}
	default:
		return fmt.Errorf("optimiser kind %d: %w", int(h.Kind), ErrArg)
	}
	if !(c.LR >= 0) || math.IsInf(c.LR, 1) || c.Warmup < 0 || c.TotalSteps < 0 {
		return fmt.Errorf("learning rate %g, warm-up %d, total steps %d: %w", c.LR, c.Warmup, c.TotalSteps, ErrArg)
	}
	return nil
}

// optimName names an optimiser kind in checkpoint metadata.
func optimName(k native.OptKind) string {
	switch k {
	case native.SGD:
		return "sgd"
	case native.Adagrad:
		return "adagrad"
	case native.Adam:
		return "adam"
	}
	return fmt.Sprintf("kind%d", int(k))
}
