package alloc

import (
	"errors"
	"fmt"
	"math"
)

// Point is one observation of a job's training loss.
type Point struct {
	Iter, Loss float64
}

// Family names a loss-curve family.
type Family int

const (
	Sublinear   Family = iota + 1 // 1/(a k² + b k + c) + d
	Exponential                   // a e^{-b k} + c
)

func (f Family) String() string {
	switch f {
	case Sublinear:
		return "sublinear"
	case Exponential:
		return "exponential"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

// Curve is a fitted loss curve. P holds (a, b, c, d) for Sublinear and
// (a, b, c) for Exponential, in iteration units; L0 is the job's first loss.
type Curve struct {
	Family Family
	P      [4]float64
	L0     float64
}

// Predict returns the predicted loss after k iterations.
func (c Curve) Predict(k float64) float64 {
	p := c.P
	switch c.Family {
	case Sublinear:
		return 1/(p[0]*k*k+p[1]*k+p[2]) + p[3]
	case Exponential:
		return p[0]*math.Exp(-p[1]*k) + p[2]
	}
	return math.NaN()
}

// Floor is the curve's asymptote, the estimate of L_min.
func (c Curve) Floor() float64 {
	if c.Family == Sublinear {
		return c.P[3]
	}
	return c.P[2]
}

// Quality is the normalised loss reduction predicted after k iterations,
// clamped to [0, 1].
func (c Curve) Quality(k float64) float64 {
	return NormalisedReduction(c.L0, c.Predict(k), c.Floor())
}

// NormalisedReduction is (l0 - lt)/(l0 - lmin), clamped to [0, 1]; 0 when the
// curve predicts no reduction at all (lmin >= l0).
func NormalisedReduction(l0, lt, lmin float64) float64 {
	den := l0 - lmin
	if !(den > 0) {
		return 0
	}
	return math.Min(1, math.Max(0, (l0-lt)/den))
}

// FitOptions tune FitCurve.
type FitOptions struct {
	// Decay is the weight ratio between a point and the next newer one, in
	// (0, 1]; 1 weighs all points alike. 0 means DefaultDecay.
	Decay float64
	// HeldOut is how many of the last points judge the families; 0 means a
	// fifth of the history, at least 2.
	HeldOut int
}

// DefaultDecay halves a point's weight about every 34 newer points.
const DefaultDecay = 0.98

// MinPoints is the shortest history FitCurve accepts.
const MinPoints = 8

// ErrTooFewPoints says a history is too short to fit.
var ErrTooFewPoints = errors.New("too few loss points to fit a curve")

// FitCurve fits both families to h (oldest first, h[0] the first loss) and
// returns the one with the smaller held-out residual, refitted on all of h.
func FitCurve(h []Point, o FitOptions) (Curve, error) {
	if len(h) < MinPoints {
		return Curve{}, fmt.Errorf("fit: %d points, want at least %d: %w", len(h), MinPoints, ErrTooFewPoints)
	}
	if err := checkHistory(h); err != nil {
		return Curve{}, err
	}
	held := o.HeldOut
	if held <= 0 {
		held = max(2, len(h)/5)
	}
	held = min(held, len(h)-5)
	train, test := h[:len(h)-held], h[len(h)-held:]
	best, bestRes := Family(0), math.Inf(1)
	for _, f := range []Family{Sublinear, Exponential} {
		c, err := FitFamily(f, train, o)
		if err != nil {
			continue
		}
		if r := heldOutResidual(c, test); r < bestRes {
			best, bestRes = f, r
		}
	}
	if best == 0 {
		return Curve{}, errors.New("fit: no family fits the history")
	}
	return FitFamily(best, h, o)
}

func checkHistory(h []Point) error {
	for i, p := range h {
		if math.IsNaN(p.Iter) || math.IsInf(p.Iter, 0) || math.IsNaN(p.Loss) || math.IsInf(p.Loss, 0) {
			return fmt.Errorf("fit: point %d is not finite: (%v, %v)", i, p.Iter, p.Loss)
		}
		if i > 0 && p.Iter <= h[i-1].Iter {
			return fmt.Errorf("fit: point %d: iteration %v does not follow %v", i, p.Iter, h[i-1].Iter)
		}
	}
	return nil
}

func heldOutResidual(c Curve, test []Point) float64 {
	var s float64
	for _, p := range test {
		r := c.Predict(p.Iter) - p.Loss
		s += r * r
	}
	if math.IsNaN(s) {
		return math.Inf(1)
	}
	return s / float64(len(test))
}

// FitFamily fits one family to h by weighted least squares.
func FitFamily(f Family, h []Point, o FitOptions) (Curve, error) {
	decay := o.Decay
	if decay <= 0 || decay > 1 {
		decay = DefaultDecay
	}
	d := newFitData(h, decay)
	var m model
	switch f {
	case Sublinear:
		m = sublinear{}
	case Exponential:
		m = exponential{}
	default:
		return Curve{}, fmt.Errorf("fit: unknown family %d", int(f))
	}
	p, ok := m.start(d)
	if !ok {
		return Curve{}, fmt.Errorf("fit %v: no starting point", f)
	}
	p = levenbergMarquardt(m, d, p)
	return Curve{Family: f, P: m.unscale(p, d.scale), L0: h[0].Loss}, nil
}

// fitData is a history with iterations scaled to [0, 1] (x = k/scale) so the
// parameters have comparable magnitudes.
type fitData struct {
	x, y, w []float64
	scale   float64
}

func newFitData(h []Point, decay float64) fitData {
	n := len(h)
	d := fitData{x: make([]float64, n), y: make([]float64, n), w: make([]float64, n)}
	d.scale = math.Max(1, h[n-1].Iter)
	wt := 1.0
	for i := n - 1; i >= 0; i-- {
		d.x[i], d.y[i], d.w[i] = h[i].Iter/d.scale, h[i].Loss, wt
		wt *= decay
	}
	return d
}

// model is a curve family in scaled coordinates.
type model interface {
	nparams() int
	eval(x float64, p []float64) float64
	grad(x float64, p []float64, g []float64)
	valid(p []float64, d fitData) bool
	start(d fitData) ([]float64, bool)
	unscale(p []float64, s float64) [4]float64
}

func sse(m model, d fitData, p []float64) float64 {
	var s float64
	for i := range d.x {
		r := d.y[i] - m.eval(d.x[i], p)
		s += d.w[i] * r * r
	}
	if math.IsNaN(s) {
		return math.Inf(1)
	}
	return s
}

// levenbergMarquardt polishes p, keeping it valid; it never makes the fit worse.
func levenbergMarquardt(m model, d fitData, p []float64) []float64 {
	n := m.nparams()
	cur := sse(m, d, p)
	lambda := 1e-3
	g := make([]float64, n)
	for iter := 0; iter < 60; iter++ {
		jtj := make([][]float64, n)
		for r := range jtj {
			jtj[r] = make([]float64, n)
		}
		jtr := make([]float64, n)
		for i := range d.x {
			m.grad(d.x[i], p, g)
			r := d.y[i] - m.eval(d.x[i], p)
			for a := 0; a < n; a++ {
				jtr[a] += d.w[i] * g[a] * r
				for b := 0; b < n; b++ {
					jtj[a][b] += d.w[i] * g[a] * g[b]
				}
			}
		}
		improved := false
		for try := 0; try < 8 && !improved; try++ {
			a := make([][]float64, n)
			for r := range a {
				a[r] = append([]float64(nil), jtj[r]...)
				a[r][r] += lambda * math.Max(jtj[r][r], 1e-12)
			}
			step, ok := solve(a, append([]float64(nil), jtr...))
			if !ok {
				lambda *= 10
				continue
			}
			next := make([]float64, n)
			for k := range next {
				next[k] = p[k] + step[k]
			}
			if s := sse(m, d, next); m.valid(next, d) && s < cur {
				converged := (cur - s) <= 1e-12*cur
				p, cur, improved = next, s, true
				lambda = math.Max(lambda/10, 1e-9)
				if converged {
					return p
				}
			} else {
				lambda *= 10
			}
		}
		if !improved {
			return p
		}
	}
	return p
}

// solve solves a·x = b by Gaussian elimination with partial pivoting.
func solve(a [][]float64, b []float64) ([]float64, bool) {
	n := len(b)
	for col := 0; col < n; col++ {
		piv := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[piv][col]) {
				piv = r
			}
		}
		if math.Abs(a[piv][col]) < 1e-300 {
			return nil, false
		}
		a[col], a[piv] = a[piv], a[col]
		b[col], b[piv] = b[piv], b[col]
		for r := col + 1; r < n; r++ {
			f := a[r][col] / a[col][col]
			for c := col; c < n; c++ {
				a[r][c] -= f * a[col][c]
			}
			b[r] -= f * b[col]
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for c := r + 1; c < n; c++ {
			s -= a[r][c] * x[c]
		}
		x[r] = s / a[r][r]
	}
	for _, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, false
		}
	}
	return x, true
}

// linearLS solves weighted least squares y ≈ Σ p_j basis_j(x) for a few bases.
func linearLS(x, y, w []float64, basis func(x float64, out []float64), n int) ([]float64, bool) {
	a := make([][]float64, n)
	for r := range a {
		a[r] = make([]float64, n)
	}
	b := make([]float64, n)
	f := make([]float64, n)
	for i := range x {
		basis(x[i], f)
		for r := 0; r < n; r++ {
			b[r] += w[i] * f[r] * y[i]
			for c := 0; c < n; c++ {
				a[r][c] += w[i] * f[r] * f[c]
			}
		}
	}
	return solve(a, b)
}

func minMax(v []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// logGrid returns n points spaced evenly in log between lo and hi.
func logGrid(lo, hi float64, n int) []float64 {
	g := make([]float64, n)
	for i := range g {
		g[i] = lo * math.Pow(hi/lo, float64(i)/float64(n-1))
	}
	return g
}
