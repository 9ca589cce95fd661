package nn

import (
	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/data"
	"github.com/heterps/heterps/native"
)

// Step is what every layer sees of the current training or evaluation step.
type Step struct {
	Backend native.Backend
	Batch   *data.Batch
	Train   bool // false: forward only, layers may skip saving for backward
	// Source, if set, is the batch as the data gave it, when Batch has its
	// ids renumbered for a pipeline stage's local tables: what depends on
	// the batch's content (NCE's negatives) is drawn from Source, so that it
	// does not depend on where the step runs.
	Source *data.Batch
	// Ready, if set, is called with each layer's index before the
	// layer's forward runs, and an error it returns ends the forward: a
	// pipeline stage waits there for the layer's parameters, which the
	// previous step may still be synchronising.
	Ready func(layer int) error
	// side, during a backward pass with lanes, takes the work off the
	// critical path (see lane).
	side *lane
}

// ready calls s.Ready for layer i, if set.
func (s *Step) ready(i int) error {
	if s.Ready == nil {
		return nil
	}
	return s.Ready(i)
}

// source is the batch whose content seeds per-batch draws.
func (s *Step) source() *data.Batch {
	if s.Source != nil {
		return s.Source
	}
	return s.Batch
}

// Layer is one model layer. Forward consumes the previous layer's
// activation (input layers may ignore it and read the batch); Backward gets
// the gradient of the loss with respect to the layer's output and returns
// the gradient with respect to its input — only for parts that NeedGrad —
// having written its parameters' gradients.
type Layer interface {
	Shape() config.LayerShape
	Forward(s *Step, in Activation) (Activation, error)
	Backward(s *Step, dout Activation) (Activation, error)
	Params() []*Param
}

// Joiner is a layer that joins two towers (cosine, dot).
type Joiner interface {
	Shape() config.LayerShape
	ForwardJoin(s *Step, a, b Activation) (Activation, error)
	BackwardJoin(s *Step, dout Activation) (da, db Activation, err error)
}
