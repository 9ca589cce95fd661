package nn

import (
	"fmt"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

// FC is a fully connected layer y = act(x W + b), W [in x out]. A
// multi-part input multiplies each part by its own row block of W and adds
// the products, which is the same as concatenating the parts first.
type FC struct {
	shape config.LayerShape
	act   native.Act
	W, B  *Param

	in    Activation
	y, dz scratch
	dx    []scratch
	out   native.Buffer
}

// NewFC builds an FC layer with Glorot-uniform weights and zero bias.
func NewFC(b native.Backend, shape config.LayerShape, act string, seed uint64) (*FC, error) {
	a, err := native.ParseAct(act)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", shape.Name, err)
	}
	l := &FC{shape: shape, act: a,
		W: newDense(b, shape.Name+".weight", shape.In, shape.Out),
		B: newDense(b, shape.Name+".bias", 1, shape.Out)}
	if err := initUniform(b, l.W, seed, glorotLimit(shape.In, shape.Out)); err != nil {
		return nil, err
	}
	return l, nil
}

// declaredFC builds an FC layer whose parameters have their shapes and no
// values (0 floats), for a pipeline stage that does not run it.
func declaredFC(b native.Backend, shape config.LayerShape, act string) (*FC, error) {
	a, err := native.ParseAct(act)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", shape.Name, err)
	}
	return &FC{shape: shape, act: a,
		W: declared(b, shape.Name+".weight", shape.In, shape.Out),
		B: declared(b, shape.Name+".bias", 1, shape.Out)}, nil
}

func (l *FC) Shape() config.LayerShape { return l.shape }
func (l *FC) Params() []*Param         { return []*Param{l.W, l.B} }

// Forward computes act(sum_p x_p W_p + b).
func (l *FC) Forward(s *Step, in Activation) (Activation, error) {
	if in.Width() != l.shape.In {
		return Activation{}, fmt.Errorf("%s: input width %d, want %d", l.shape.Name, in.Width(), l.shape.In)
	}
	be, rows, out := s.Backend, in.Rows, l.shape.Out
	y := l.y.get(be, rows*out)
	row := 0
	for i, p := range in.Parts {
		beta := float32(1)
		if i == 0 {
			beta = 0
		}
		wp := l.W.Value.Slice(row*out, (row+p.Width)*out)
		if err := be.Gemm(false, false, rows, out, p.Width, 1, p.Buf, p.Width, wp, out, beta, y, out); err != nil {
			return Activation{}, fmt.Errorf("%s: forward: %w", l.shape.Name, err)
		}
		row += p.Width
	}
	if err := be.BiasAct(l.act, rows, out, y, l.B.Value, y); err != nil {
		return Activation{}, fmt.Errorf("%s: forward: %w", l.shape.Name, err)
	}
	l.in, l.out = in, y
	return Activation{Rows: rows, Parts: []Part{{Buf: y, Width: out, NeedGrad: true}}}, nil
}

// Backward computes dZ = dY * act'(Y), dB = colsum(dZ), dW_p = x_p^T dZ and,
// for parts that need it, dx_p = dZ W_p^T.
func (l *FC) Backward(s *Step, dout Activation) (Activation, error) {
	be, rows, out := s.Backend, l.in.Rows, l.shape.Out
	if err := checkRows(l.shape.Name, dout, rows); err != nil {
		return Activation{}, err
	}
	dy, err := dout.Single(l.shape.Name)
	if err != nil {
		return Activation{}, err
	}
	dz := l.dz.get(be, rows*out)
	if err := be.BiasActBackward(l.act, rows, out, l.out, dy, dz, l.B.Grad); err != nil {
		return Activation{}, fmt.Errorf("%s: backward: %w", l.shape.Name, err)
	}
	if len(l.dx) < len(l.in.Parts) {
		l.dx = make([]scratch, len(l.in.Parts))
	}
	din := Activation{Rows: rows}
	row := 0
	for i, p := range l.in.Parts {
		wp := l.W.Value.Slice(row*out, (row+p.Width)*out)
		gp := l.W.Grad.Slice(row*out, (row+p.Width)*out)
		row += p.Width
		weightGrad := func(be native.Backend) error {
			if err := be.Gemm(true, false, p.Width, out, rows, 1, p.Buf, p.Width, dz, out, 0, gp, out); err != nil {
				return fmt.Errorf("%s: weight gradient: %w", l.shape.Name, err)
			}
			return nil
		}
		if err := s.offPath(weightGrad); err != nil {
			return Activation{}, err
		}
		part := Part{Width: p.Width, NeedGrad: p.NeedGrad}
		if p.NeedGrad {
			part.Buf = l.dx[i].get(be, rows*p.Width)
			if err := be.Gemm(false, true, rows, p.Width, out, 1, dz, out, wp, out, 0, part.Buf, p.Width); err != nil {
				return Activation{}, fmt.Errorf("%s: input gradient: %w", l.shape.Name, err)
			}
		}
		din.Parts = append(din.Parts, part)
	}
	return din, nil
}
