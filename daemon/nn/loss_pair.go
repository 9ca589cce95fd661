package nn

import (
	"fmt"
)

// Hinge is the pairwise hinge loss of a matching model whose output is
// [rows x 2] (positive score, in-batch negative score; see Similarity):
// the mean over rows of max(0, Margin - pos + neg).
type Hinge struct {
	Margin float64
	grad   scratch
	g      []float32
}

// NewHinge builds a hinge loss; the margin must be finite and >= 0.
func NewHinge(margin float64) (*Hinge, error) {
	if !(margin >= 0) || margin > 1e30 {
		return nil, fmt.Errorf("hinge: margin %g, want a finite value >= 0", margin)
	}
	return &Hinge{Margin: margin}, nil
}

func (l *Hinge) Name() string { return "hinge" }

func (l *Hinge) Forward(s *Step, out Activation) (float64, Activation, error) {
	h, err := l.pairs(s, out)
	if err != nil {
		return 0, Activation{}, err
	}
	n := out.Rows
	l.g = grow(l.g, 2*n)
	scale := 1 / float32(n)
	sum := 0.0
	for i := range n {
		v := l.Margin - float64(h[2*i]) + float64(h[2*i+1])
		l.g[2*i], l.g[2*i+1] = 0, 0
		if v > 0 {
			sum += v
			l.g[2*i], l.g[2*i+1] = -scale, scale
		}
	}
	d, err := hostOrUpload(s.Backend, &l.grad, l.g)
	if err != nil {
		return 0, Activation{}, fmt.Errorf("hinge: %w", err)
	}
	return sum, Activation{Rows: n, Parts: []Part{{Buf: d, Width: 2, NeedGrad: true}}}, nil
}

// Scores are the margins pos - neg: positive when the sample's own
// document outscores the in-batch negative.
func (l *Hinge) Scores(s *Step, out Activation) ([]float32, error) {
	h, err := l.pairs(s, out)
	if err != nil {
		return nil, err
	}
	m := make([]float32, out.Rows)
	for i := range m {
		m[i] = h[2*i] - h[2*i+1]
	}
	return m, nil
}

// pairs returns the [rows x 2] scores on the host.
func (l *Hinge) pairs(s *Step, out Activation) ([]float32, error) {
	buf, err := out.Single("hinge")
	if err != nil {
		return nil, err
	}
	if out.Width() != 2 || out.Rows == 0 {
		return nil, fmt.Errorf("hinge: %d scores per sample for %d samples; want 2 (positive, negative) from a cosine or dot layer", out.Width(), out.Rows)
	}
	return hostFloats(s.Backend, buf)
}
