package nn

import (
	"fmt"
	"math"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

// normEps bounds a vector's norm from below in the cosine, so that a zero
// vector scores 0 instead of NaN. Below it the norm is the constant normEps
// and contributes no gradient of its own.
const normEps = 1e-6

// Similarity joins two towers ("cosine" or "dot") into TWO scores per
// sample, [rows x 2]: column 0 is the similarity of query i with its own
// document i (the positive pair), column 1 its similarity with document
// (i+1) mod rows, an in-batch negative. A batch of one sample is its own
// negative, so both columns are equal.
//
// Both scores are s(q, d) = (q·d) u(q) u(d), with u(x) = 1/max(|x|, normEps)
// for the cosine and u = 1 for the dot product.
type Similarity struct {
	shape  config.LayerShape
	cosine bool

	qAct, dAct Activation
	q, d       []float32 // [rows x width] host views of the towers' outputs
	qBuf, dBuf []float32 // gathering space for multi-part towers
	uq, ud     []float64 // u(q_i), u(d_i)
	scores     []float32 // [rows x 2]
	out        scratch
	dq, dd     []float32
	dqParts    []scratch
	ddParts    []scratch
}

// NewSimilarity builds a "cosine" or "dot" join.
func NewSimilarity(shape config.LayerShape, kind string) (*Similarity, error) {
	if kind != "cosine" && kind != "dot" {
		return nil, fmt.Errorf("%s: unknown similarity %q (want cosine or dot)", shape.Name, kind)
	}
	return &Similarity{shape: shape, cosine: kind == "cosine"}, nil
}

func (l *Similarity) Shape() config.LayerShape { return l.shape }

// ForwardJoin scores every query against its own and its neighbour's document.
func (l *Similarity) ForwardJoin(s *Step, a, b Activation) (Activation, error) {
	width, rows := l.shape.In, a.Rows
	if a.Width() != width || b.Width() != width || b.Rows != rows || rows == 0 {
		return Activation{}, fmt.Errorf("%s: towers give [%d x %d] and [%d x %d], want two [rows x %d]",
			l.shape.Name, a.Rows, a.Width(), b.Rows, b.Width(), width)
	}
	var err error
	if l.q, err = hostMatrix(s.Backend, a, &l.qBuf); err != nil {
		return Activation{}, fmt.Errorf("%s: %w", l.shape.Name, err)
	}
	if l.d, err = hostMatrix(s.Backend, b, &l.dBuf); err != nil {
		return Activation{}, fmt.Errorf("%s: %w", l.shape.Name, err)
	}
	l.qAct, l.dAct = a, b
	l.uq, l.ud = l.inverseNorms(l.uq, l.q, rows), l.inverseNorms(l.ud, l.d, rows)
	l.scores = grow(l.scores, 2*rows)
	for i := range rows {
		j := (i + 1) % rows
		l.scores[2*i] = float32(l.score(i, i))
		l.scores[2*i+1] = float32(l.score(i, j))
	}
	out, err := hostOrUpload(s.Backend, &l.out, l.scores)
	if err != nil {
		return Activation{}, fmt.Errorf("%s: %w", l.shape.Name, err)
	}
	return Activation{Rows: rows, Parts: []Part{{Buf: out, Width: 2, NeedGrad: a.NeedGrad() || b.NeedGrad()}}}, nil
}

// BackwardJoin differentiates both scores. Document j receives gradient
// from its positive pair (query j) and from its use as the negative of
// query j-1:
//
//	dq_i = g_i,pos ∂s(q_i, d_i)/∂q_i + g_i,neg ∂s(q_i, d_i+1)/∂q_i
//	dd_j = g_j,pos ∂s(q_j, d_j)/∂d_j + g_j-1,neg ∂s(q_j-1, d_j)/∂d_j
func (l *Similarity) BackwardJoin(s *Step, dout Activation) (Activation, Activation, error) {
	rows, width := l.qAct.Rows, l.shape.In
	if err := checkRows(l.shape.Name, dout, rows); err != nil {
		return Activation{}, Activation{}, err
	}
	gbuf, err := dout.Single(l.shape.Name)
	if err != nil {
		return Activation{}, Activation{}, err
	}
	g, err := hostFloats(s.Backend, gbuf)
	if err != nil {
		return Activation{}, Activation{}, fmt.Errorf("%s: backward: %w", l.shape.Name, err)
	}
	if len(g) != 2*rows {
		return Activation{}, Activation{}, fmt.Errorf("%s: backward got %d values, want %d", l.shape.Name, len(g), 2*rows)
	}
	l.dq, l.dd = grow(l.dq, rows*width), grow(l.dd, rows*width)
	for i := range rows {
		next, prev := (i+1)%rows, (i+rows-1)%rows
		l.addGrad(l.dq, l.q, l.uq, i, l.d, l.ud, i, float64(g[2*i]), float64(l.scores[2*i]), true)
		l.addGrad(l.dq, l.q, l.uq, i, l.d, l.ud, next, float64(g[2*i+1]), float64(l.scores[2*i+1]), false)
		l.addGrad(l.dd, l.d, l.ud, i, l.q, l.uq, i, float64(g[2*i]), float64(l.scores[2*i]), true)
		l.addGrad(l.dd, l.d, l.ud, i, l.q, l.uq, prev, float64(g[2*prev+1]), float64(l.scores[2*prev+1]), false)
	}
	da, err := splitParts(s.Backend, l.qAct, l.dq, &l.dqParts)
	if err != nil {
		return Activation{}, Activation{}, fmt.Errorf("%s: backward: %w", l.shape.Name, err)
	}
	db, err := splitParts(s.Backend, l.dAct, l.dd, &l.ddParts)
	if err != nil {
		return Activation{}, Activation{}, fmt.Errorf("%s: backward: %w", l.shape.Name, err)
	}
	return da, db, nil
}

// score is s(q_i, d_j).
func (l *Similarity) score(i, j int) float64 {
	w := l.shape.In
	return dot64(l.q[i*w:(i+1)*w], l.d[j*w:(j+1)*w]) * l.uq[i] * l.ud[j]
}

// addGrad adds g ∂s(x_i, y_j)/∂x_i to dx_i (overwriting it when first),
// where s = sim is the score of the pair:
//
//	∂s/∂x = u(x) u(y) y - s u(x)² x   (the second term only for a cosine
//	                                    with |x| above normEps)
func (l *Similarity) addGrad(dx, x []float32, ux []float64, i int, y []float32, uy []float64, j int, g, sim float64, first bool) {
	w := l.shape.In
	xi, yj, di := x[i*w:(i+1)*w], y[j*w:(j+1)*w], dx[i*w:(i+1)*w]
	a := g * ux[i] * uy[j]
	b := 0.0
	if l.cosine && ux[i] < 1/normEps {
		b = g * sim * ux[i] * ux[i]
	}
	for k := range di {
		v := a*float64(yj[k]) - b*float64(xi[k])
		if !first {
			v += float64(di[k])
		}
		di[k] = float32(v)
	}
}

// inverseNorms fills u(x_i) for every row of x.
func (l *Similarity) inverseNorms(u []float64, x []float32, rows int) []float64 {
	u = grow(u, rows)
	w := l.shape.In
	for i := range rows {
		u[i] = 1
		if l.cosine {
			row := x[i*w : (i+1)*w]
			u[i] = 1 / max(math.Sqrt(dot64(row, row)), normEps)
		}
	}
	return u
}

func dot64(a, b []float32) float64 {
	s := 0.0
	for k := range a {
		s += float64(a[k]) * float64(b[k])
	}
	return s
}

// grow returns s resized to n elements, reusing its memory when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// hostMatrix returns an activation as one [rows x width] host matrix: the
// part's own memory when it has one part on the CPU backend, else a copy in
// *buf.
func hostMatrix(b native.Backend, a Activation, buf *[]float32) ([]float32, error) {
	if len(a.Parts) == 1 {
		return hostFloats(b, a.Parts[0].Buf)
	}
	width := a.Width()
	*buf = grow(*buf, a.Rows*width)
	col := 0
	for _, p := range a.Parts {
		h, err := hostFloats(b, p.Buf)
		if err != nil {
			return nil, err
		}
		for i := range a.Rows {
			copy((*buf)[i*width+col:i*width+col+p.Width], h[i*p.Width:(i+1)*p.Width])
		}
		col += p.Width
	}
	return *buf, nil
}

// splitParts turns a [rows x width] host gradient into an activation
// shaped like a (same parts), with buffers only for parts that need them.
func splitParts(b native.Backend, a Activation, grad []float32, sc *[]scratch) (Activation, error) {
	if len(*sc) < len(a.Parts) {
		*sc = make([]scratch, len(a.Parts))
	}
	out := Activation{Rows: a.Rows}
	width, col := a.Width(), 0
	for i, p := range a.Parts {
		part := Part{Width: p.Width, NeedGrad: p.NeedGrad}
		if p.NeedGrad {
			h := grad
			if len(a.Parts) > 1 {
				h = make([]float32, a.Rows*p.Width)
				for r := range a.Rows {
					copy(h[r*p.Width:(r+1)*p.Width], grad[r*width+col:r*width+col+p.Width])
				}
			}
			buf, err := hostOrUpload(b, &(*sc)[i], h)
			if err != nil {
				return Activation{}, err
			}
			part.Buf = buf
		}
		col += p.Width
		out.Parts = append(out.Parts, part)
	}
	return out, nil
}
