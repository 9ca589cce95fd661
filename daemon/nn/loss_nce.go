package nn

import (
	"fmt"

	"github.com/heterps/heterps/native"
)

// NCELoss is the loss of an NCE output layer: binary cross-entropy of each
// logit, with label 1 for the target column 0 and 0 for the K negatives,
// summed over a sample's 1+K columns and averaged over the batch.
// Accidental hits (see maskedLogit) add exactly 0.
type NCELoss struct {
	labels, grad scratch
	ones         []float32 // host labels: 1 in column 0 of each row
	cols         int
}

func (l *NCELoss) Name() string { return "nce" }

func (l *NCELoss) Forward(s *Step, out Activation) (float64, Activation, error) {
	logits, err := l.logits(out)
	if err != nil {
		return 0, Activation{}, err
	}
	rows, cols := out.Rows, out.Width()
	labels, err := l.labelBuffer(s, rows, cols)
	if err != nil {
		return 0, Activation{}, fmt.Errorf("nce: %w", err)
	}
	n := rows * cols
	sum, err := s.Backend.BCEWithLogits(n, logits, labels)
	if err != nil {
		return 0, Activation{}, fmt.Errorf("nce: %w", err)
	}
	d := l.grad.get(s.Backend, n)
	if err := s.Backend.BCEWithLogitsBackward(n, logits, labels, 1/float32(rows), d); err != nil {
		return 0, Activation{}, fmt.Errorf("nce: %w", err)
	}
	return sum, Activation{Rows: rows, Parts: []Part{{Buf: d, Width: cols, NeedGrad: true}}}, nil
}

// Scores are the target's logit minus the largest negative logit: positive
// when the true class outranks every sampled negative (sampled top-1
// accuracy; accidental hits never outrank anything).
func (l *NCELoss) Scores(s *Step, out Activation) ([]float32, error) {
	logits, err := l.logits(out)
	if err != nil {
		return nil, err
	}
	h, err := hostFloats(s.Backend, logits)
	if err != nil {
		return nil, err
	}
	cols := out.Width()
	margins := make([]float32, out.Rows)
	for i := range margins {
		row := h[i*cols : (i+1)*cols]
		best := row[1]
		for _, v := range row[2:] {
			best = max(best, v)
		}
		margins[i] = row[0] - best
	}
	return margins, nil
}

// logits returns the [rows x (1+K)] output of an NCE layer.
func (l *NCELoss) logits(out Activation) (native.Buffer, error) {
	buf, err := out.Single("nce")
	if err != nil {
		return nil, err
	}
	if out.Width() < 2 || out.Rows == 0 {
		return nil, fmt.Errorf("nce: %d logits per sample for %d samples; want 1+K from an nce layer", out.Width(), out.Rows)
	}
	return buf, nil
}

// labelBuffer returns [rows x cols] labels, 1 in column 0 and 0 elsewhere,
// rebuilt only when the shape changes.
func (l *NCELoss) labelBuffer(s *Step, rows, cols int) (native.Buffer, error) {
	if l.cols != cols || len(l.ones) != rows*cols {
		l.ones = make([]float32, rows*cols)
		for i := range rows {
			l.ones[i*cols] = 1
		}
		l.cols = cols
	}
	return hostOrUpload(s.Backend, &l.labels, l.ones)
}
