package nn

import (
	"fmt"
	"math"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

// Loss turns the model's output into the summed loss over the batch and the
// gradient of the MEAN loss with respect to the output. Scores gives one
// number per sample for metrics (a probability for CTR, the predicted class
// for classifiers, the positive-minus-negative margin for matching).
type Loss interface {
	Name() string
	Forward(s *Step, out Activation) (sum float64, dout Activation, err error)
	Scores(s *Step, out Activation) ([]float32, error)
}

// NewLoss builds the loss a model file names.
func NewLoss(cfg config.Loss) (Loss, error) {
	switch cfg.Kind {
	case "bce":
		return &BCE{}, nil
	case "softmax":
		return &SoftmaxXent{}, nil
	case "mse":
		return &MSE{}, nil
	case "hinge":
		return NewHinge(cfg.Margin)
	case "nce":
		return &NCELoss{}, nil
	}
	return nil, fmt.Errorf("loss %q: %w", cfg.Kind, errNotBuilt)
}

// BCE is binary cross-entropy on one logit per sample against Batch.Labels.
type BCE struct {
	labels, grad scratch
}

func (l *BCE) Name() string { return "bce" }

func (l *BCE) Forward(s *Step, out Activation) (float64, Activation, error) {
	logits, labels, err := l.inputs(s, out)
	if err != nil {
		return 0, Activation{}, err
	}
	n := out.Rows
	sum, err := s.Backend.BCEWithLogits(n, logits, labels)
	if err != nil {
		return 0, Activation{}, fmt.Errorf("bce: %w", err)
	}
	d := l.grad.get(s.Backend, n)
	if err := s.Backend.BCEWithLogitsBackward(n, logits, labels, 1/float32(max(n, 1)), d); err != nil {
		return 0, Activation{}, fmt.Errorf("bce: %w", err)
	}
	return sum, Activation{Rows: n, Parts: []Part{{Buf: d, Width: 1, NeedGrad: true}}}, nil
}

func (l *BCE) inputs(s *Step, out Activation) (native.Buffer, native.Buffer, error) {
	logits, err := out.Single("bce")
	if err != nil {
		return nil, nil, err
	}
	if out.Width() != 1 || len(s.Batch.Labels) != out.Rows {
		return nil, nil, fmt.Errorf("bce: %d outputs per sample and %d labels for %d samples; want 1 logit and one label each", out.Width(), len(s.Batch.Labels), out.Rows)
	}
	labels, err := hostOrUpload(s.Backend, &l.labels, s.Batch.Labels)
	return logits, labels, err
}

// Scores are click probabilities.
func (l *BCE) Scores(s *Step, out Activation) ([]float32, error) {
	logits, err := out.Single("bce")
	if err != nil {
		return nil, err
	}
	h, err := hostFloats(s.Backend, logits)
	if err != nil {
		return nil, err
	}
	p := make([]float32, len(h))
	for i, x := range h {
		p[i] = float32(1 / (1 + math.Exp(-float64(x))))
	}
	return p, nil
}

// SoftmaxXent is softmax cross-entropy against Batch.Classes.
type SoftmaxXent struct{ grad scratch }

func (l *SoftmaxXent) Name() string { return "softmax" }

func (l *SoftmaxXent) Forward(s *Step, out Activation) (float64, Activation, error) {
	logits, err := out.Single("softmax")
	if err != nil {
		return 0, Activation{}, err
	}
	rows, cols := out.Rows, out.Width()
	if len(s.Batch.Classes) != rows {
		return 0, Activation{}, fmt.Errorf("softmax: %d class labels for %d samples", len(s.Batch.Classes), rows)
	}
	d := l.grad.get(s.Backend, rows*cols)
	sum, err := s.Backend.SoftmaxCrossEntropy(rows, cols, logits, s.Batch.Classes, 1/float32(max(rows, 1)), d)
	if err != nil {
		return 0, Activation{}, fmt.Errorf("softmax: %w", err)
	}
	return sum, Activation{Rows: rows, Parts: []Part{{Buf: d, Width: cols, NeedGrad: true}}}, nil
}

// Scores are the predicted classes (argmax).
func (l *SoftmaxXent) Scores(s *Step, out Activation) ([]float32, error) {
	logits, err := out.Single("softmax")
	if err != nil {
		return nil, err
	}
	h, err := hostFloats(s.Backend, logits)
	if err != nil {
		return nil, err
	}
	cols := out.Width()
	pred := make([]float32, out.Rows)
	for r := range pred {
		row := h[r*cols : (r+1)*cols]
		best := 0
		for c, v := range row {
			if v > row[best] {
				best = c
			}
		}
		pred[r] = float32(best)
	}
	return pred, nil
}

// MSE is the mean squared error of one output per sample against Batch.Labels.
type MSE struct{ grad scratch }

func (l *MSE) Name() string { return "mse" }

func (l *MSE) Forward(s *Step, out Activation) (float64, Activation, error) {
	y, err := out.Single("mse")
	if err != nil {
		return 0, Activation{}, err
	}
	n := out.Rows
	if out.Width() != 1 || len(s.Batch.Labels) != n {
		return 0, Activation{}, fmt.Errorf("mse: want one output and one label per sample")
	}
	h, err := hostFloats(s.Backend, y)
	if err != nil {
		return 0, Activation{}, err
	}
	d := l.grad.get(s.Backend, n)
	g := make([]float32, n)
	sum := 0.0
	for i, v := range h {
		e := float64(v) - float64(s.Batch.Labels[i])
		sum += e * e
		g[i] = float32(2 * e / float64(n))
	}
	if err := s.Backend.Upload(d, g); err != nil {
		return 0, Activation{}, err
	}
	return sum, Activation{Rows: n, Parts: []Part{{Buf: d, Width: 1, NeedGrad: true}}}, nil
}

func (l *MSE) Scores(s *Step, out Activation) ([]float32, error) {
	y, err := out.Single("mse")
	if err != nil {
		return nil, err
	}
	h, err := hostFloats(s.Backend, y)
	return append([]float32(nil), h...), err
}

// hostOrUpload returns v as a backend buffer: v itself on the CPU backend,
// an uploaded copy in sc elsewhere.
func hostOrUpload(b native.Backend, sc *scratch, v []float32) (native.Buffer, error) {
	if _, ok := b.(*native.CPU); ok {
		return native.HostBuffer(v), nil
	}
	buf := sc.get(b, len(v))
	return buf, b.Upload(buf, v)
}
