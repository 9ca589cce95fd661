package alloc

import "math"

// exponential is a·e^{-b x} + c, b > 0.
type exponential struct{}

func (exponential) nparams() int { return 3 }

func (exponential) eval(x float64, p []float64) float64 { return p[0]*math.Exp(-p[1]*x) + p[2] }

func (exponential) grad(x float64, p []float64, g []float64) {
	e := math.Exp(-p[1] * x)
	g[0], g[1], g[2] = e, -p[0]*x*e, 1
}

func (exponential) valid(p []float64, _ fitData) bool { return p[1] > 0 && p[1] < 1e4 }

// start scans b on a log grid, solving a and c by linear least squares.
func (m exponential) start(d fitData) ([]float64, bool) {
	var best []float64
	bestS := math.Inf(1)
	for _, b := range logGrid(1e-2, 200, 48) {
		ac, ok := linearLS(d.x, d.y, d.w, func(x float64, f []float64) { f[0], f[1] = math.Exp(-b*x), 1 }, 2)
		if !ok {
			continue
		}
		p := []float64{ac[0], b, ac[1]}
		if s := sse(m, d, p); s < bestS {
			best, bestS = p, s
		}
	}
	return best, best != nil
}

func (exponential) unscale(p []float64, s float64) [4]float64 {
	return [4]float64{p[0], p[1] / s, p[2]}
}

// sublinear is 1/(a x² + b x + c) + d with a ≥ 0, c > 0 and the quadratic
// positive and rising over the history.
type sublinear struct{}

func (sublinear) nparams() int { return 4 }

func (sublinear) eval(x float64, p []float64) float64 { return 1/(p[0]*x*x+p[1]*x+p[2]) + p[3] }

func (sublinear) grad(x float64, p []float64, g []float64) {
	q := p[0]*x*x + p[1]*x + p[2]
	iq2 := -1 / (q * q)
	g[0], g[1], g[2], g[3] = x*x*iq2, x*iq2, iq2, 1
}

func (sublinear) valid(p []float64, d fitData) bool {
	if p[0] < 0 || p[2] <= 0 {
		return false
	}
	// q(x) = a x² + b x + c is positive on [0, ∞) and rising at the end of the
	// history, so the predicted loss keeps falling toward d.
	xe := d.x[len(d.x)-1]
	if 2*p[0]*xe+p[1] <= 0 {
		return false
	}
	if p[1] < 0 && p[1]*p[1] >= 4*p[0]*p[2] {
		return false
	}
	return true
}

// start scans d below the smallest loss; for each, 1/(L-d) is a quadratic in x
// fitted by least squares weighted by (L-d)^4 (the delta method: an error e in
// 1/(L-d) is an error (L-d)²·e in L).
func (m sublinear) start(d fitData) ([]float64, bool) {
	lo, hi := minMax(d.y)
	span := math.Max(hi-lo, 1e-12*math.Max(1, math.Abs(hi)))
	inv := make([]float64, len(d.y))
	w := make([]float64, len(d.y))
	var best []float64
	bestS := math.Inf(1)
	for _, gap := range logGrid(1e-3, 1e3, 60) {
		floor := lo - gap*span
		for i, y := range d.y {
			inv[i] = 1 / (y - floor)
			w[i] = d.w[i] * math.Pow(y-floor, 4)
		}
		q, ok := linearLS(d.x, inv, w, func(x float64, f []float64) { f[0], f[1], f[2] = x*x, x, 1 }, 3)
		if !ok {
			continue
		}
		p := []float64{q[0], q[1], q[2], floor}
		if !m.valid(p, d) {
			continue
		}
		if s := sse(m, d, p); s < bestS {
			best, bestS = p, s
		}
	}
	return best, best != nil
}

func (sublinear) unscale(p []float64, s float64) [4]float64 {
	return [4]float64{p[0] / (s * s), p[1] / s, p[2], p[3]}
}
