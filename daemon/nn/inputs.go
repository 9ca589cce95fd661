package nn

import (
	"fmt"

	"github.com/heterps/heterps/config"
)

// DenseInput makes the batch's dense features the activation ("dense"
// layers), or appends them to the input ("concat" layers).
type DenseInput struct {
	shape  config.LayerShape
	append bool
	buf    scratch
}

// NewDenseInput builds a "dense" (append false) or "concat" (append true) layer.
func NewDenseInput(shape config.LayerShape, appendToInput bool) *DenseInput {
	return &DenseInput{shape: shape, append: appendToInput}
}

func (l *DenseInput) Shape() config.LayerShape { return l.shape }
func (l *DenseInput) Params() []*Param         { return nil }

// Forward uploads the dense features (no copy on the CPU backend).
func (l *DenseInput) Forward(s *Step, in Activation) (Activation, error) {
	bt, want := s.Batch, l.denseWidth()
	if bt == nil || bt.NumDense != want || len(bt.Dense) != bt.Size*bt.NumDense {
		return Activation{}, fmt.Errorf("%s: batch dense features do not match the model's %d", l.shape.Name, want)
	}
	buf, err := hostOrUpload(s.Backend, &l.buf, bt.Dense)
	if err != nil {
		return Activation{}, fmt.Errorf("%s: %w", l.shape.Name, err)
	}
	part := Part{Buf: buf, Width: bt.NumDense}
	if !l.append {
		return Activation{Rows: bt.Size, Parts: []Part{part}}, nil
	}
	if len(in.Parts) > 0 && in.Rows != bt.Size {
		return Activation{}, fmt.Errorf("%s: input has %d rows, batch %d", l.shape.Name, in.Rows, bt.Size)
	}
	return Activation{Rows: bt.Size, Parts: append(append([]Part(nil), in.Parts...), part)}, nil
}

// Backward drops the dense features' gradient: they are data.
func (l *DenseInput) Backward(s *Step, dout Activation) (Activation, error) {
	if !l.append {
		return Activation{Rows: dout.Rows}, nil
	}
	if len(dout.Parts) == 0 {
		return Activation{}, fmt.Errorf("%s: backward got no gradient", l.shape.Name)
	}
	return Activation{Rows: dout.Rows, Parts: dout.Parts[:len(dout.Parts)-1]}, nil
}

// denseWidth is the number of dense features the layer expects: its whole
// output, or what it adds to its input when it appends.
func (l *DenseInput) denseWidth() int {
	if l.append {
		return l.shape.Out - l.shape.In
	}
	return l.shape.Out
}
