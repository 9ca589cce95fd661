package native

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// Tolerances of the pointwise kernels (act, softmax, lstm):
//
//   - the scalar reference (libm expf/tanhf/log1pf) against float64 formulas:
//     relative 1e-6;
//   - vector exp/sigmoid/tanh against float64: relative 2e-6 (a few ulp);
//   - vector variants against the scalar reference: relative 4e-6 for
//     transcendental outputs, 1e-6 for plain arithmetic;
//   - backward kernels against central finite differences of the float64
//     forward formula (step 1e-5): relative 1e-4, absolute 1e-5, limited by
//     the float32 inputs (y, gates) the backward kernels take.
const (
	refRtol  = 1e-6
	vecRtol  = 1e-6
	isaRtol  = 2e-6
	fdStep   = 1e-5
	fdRtol   = 1e-4
	fdAtol   = 1e-5
	tinyAtol = 1e-44 // subnormal results compare absolutely, to a few units of 2^-149
)

// pointwiseShapes pairs every odd size with another, keeping rows*cols under
// 2^18 floats; wide rows still span several pieces, so threads get work.
func pointwiseShapes() [][2]int {
	shapes := [][2]int{{0, 5}, {5, 0}, {1, 1}, {300, 1}}
	for i, cols := range oddSizes {
		rows := oddSizes[(i*5+3)%len(oddSizes)]
		if cols > 0 && rows*cols > 1<<18 {
			rows = (1 << 18) / cols
		}
		shapes = append(shapes, [2]int{rows, cols})
	}
	return shapes
}

var allActs = []Act{Identity, ReLU, Sigmoid, Tanh}

func sigmoid64(v float64) float64 {
	if v >= 0 {
		return 1 / (1 + math.Exp(-v))
	}
	e := math.Exp(v)
	return e / (1 + e)
}

// act64 is the float64 formula every activation kernel is checked against.
func act64(act Act, v float64) float64 {
	switch act {
	case ReLU:
		if v < 0 {
			return 0
		}
		return v
	case Sigmoid:
		return sigmoid64(v)
	case Tanh:
		return math.Tanh(v)
	}
	return v
}

// centralDiff is (f(x+h) - f(x-h)) / 2h with h = fdStep*max(1, |x|).
func centralDiff(f func(float64) float64, x float64) float64 {
	h := fdStep * max(1, math.Abs(x))
	return (f(x+h) - f(x-h)) / (2 * h)
}

// outputsFor returns plausible forward outputs y of act: in its range, with
// some exact zeros for ReLU.
func outputsFor(act Act, rng *rand.Rand, n int) []float32 {
	y := make([]float32, n)
	for i := range y {
		u := rng.Float32()
		switch act {
		case Sigmoid:
			y[i] = u
		case Tanh:
			y[i] = 2*u - 1
		case ReLU:
			y[i] = max(0, 3*u-1)
		default:
			y[i] = 4*u - 2
		}
	}
	return y
}

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func runBiasAct(t *testing.T, b *CPU, act Act, rows, cols int, x, bias []float32) []float32 {
	t.Helper()
	xb, xfull := guarded(rows*cols, x)
	yb, yfull := guarded(rows*cols, nil)
	var bb Buffer
	var bfull []float32
	if bias != nil {
		bb, bfull = guarded(cols, bias)
	}
	mustOK(t, "BiasAct", b.BiasAct(act, rows, cols, xb, bb, yb))
	checkGuards(t, "x", xfull)
	checkGuards(t, "y", yfull)
	if bias != nil {
		checkGuards(t, "bias", bfull)
	}
	return yb
}

func TestBiasActScalarMatchesFloat64(t *testing.T) {
	ref := scalarCPU(t)
	rng := newRNG(1)
	for _, s := range pointwiseShapes() {
		rows, cols := s[0], s[1]
		x := randFloats(rng, rows*cols, -20, 20)
		bias := randFloats(rng, cols, -2, 2)
		for _, act := range allActs {
			got := runBiasAct(t, ref, act, rows, cols, x, bias)
			want := make([]float32, len(x))
			for i := range x {
				want[i] = float32(act64(act, float64(x[i]+bias[i%cols])))
			}
			assertClose(t, act.String(), got, want, refRtol, tinyAtol)
		}
	}
}

func TestBiasActMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(2)
		for _, s := range pointwiseShapes() {
			rows, cols := s[0], s[1]
			x := randFloats(rng, rows*cols, -12, 12)
			bias := randFloats(rng, cols, -1, 1)
			for _, act := range allActs {
				for _, bv := range [][]float32{nil, bias} {
					got := runBiasAct(t, b, act, rows, cols, x, bv)
					want := runBiasAct(t, ref, act, rows, cols, x, bv)
					assertClose(t, act.String(), got, want, isaRtol, tinyAtol)
				}
			}
		}
	})
}

// TestBiasActExtremeInputs feeds values that overflow a naive exp, and NaN,
// and checks every variant against float64 (1e-6 relative, a few units of
// 2^-149 for subnormal results). For x <= -17, sigmoid(x) = exp(x) to float32
// precision, so the grid down to -104 checks the vector exp itself, subnormal
// results included.
func TestBiasActExtremeInputs(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	x := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 1e-3, -0.6249, 0.6251,
		20, -20, 88.7, -88.7, 100, -100, -104, -110, 1e4, -1e4, 3e38, -3e38, inf, -inf, nan}
	for v := -104.0; v <= 12; v += 0.0131 {
		x = append(x, float32(v))
	}
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, act := range allActs {
			got := runBiasAct(t, b, act, 1, len(x), x, nil)
			want := make([]float32, len(x))
			for i, v := range x {
				want[i] = float32(act64(act, float64(v)))
			}
			assertClose(t, act.String(), got, want, vecRtol, tinyAtol)
		}
	})
}

func TestBiasActInPlace(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(3)
		rows, cols := 37, 29
		x := randFloats(rng, rows*cols, -5, 5)
		bias := randFloats(rng, cols, -1, 1)
		want := runBiasAct(t, b, Tanh, rows, cols, x, bias)
		buf := HostBuffer(append([]float32(nil), x...))
		mustOK(t, "in place", b.BiasAct(Tanh, rows, cols, buf, HostBuffer(bias), buf))
		assertClose(t, "in place", buf, want, 0, 0)
	})
}

func runBiasActBackward(t *testing.T, b *CPU, act Act, rows, cols int, y, dy []float32,
	withBias bool) (dx, dbias []float32) {
	t.Helper()
	yb, yfull := guarded(rows*cols, y)
	dyb, dyfull := guarded(rows*cols, dy)
	dxb, dxfull := guarded(rows*cols, nil)
	var dbb Buffer
	var dbh HostBuffer
	var dbfull []float32
	if withBias {
		dbh, dbfull = guarded(cols, randFloats(newRNG(99), cols, 5, 6)) // stale values
		dbb = dbh
	}
	mustOK(t, "BiasActBackward", b.BiasActBackward(act, rows, cols, yb, dyb, dxb, dbb))
	for name, full := range map[string][]float32{"y": yfull, "dy": dyfull, "dx": dxfull, "dbias": dbfull} {
		if full != nil {
			checkGuards(t, name, full)
		}
	}
	return dxb, dbh
}

func TestBiasActBackwardMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(4)
		for _, s := range pointwiseShapes() {
			rows, cols := s[0], s[1]
			dy := randFloats(rng, rows*cols, -1, 1)
			for _, act := range allActs {
				y := outputsFor(act, rng, rows*cols)
				dx, db := runBiasActBackward(t, b, act, rows, cols, y, dy, true)
				wdx, wdb := runBiasActBackward(t, ref, act, rows, cols, y, dy, true)
				assertClose(t, act.String()+" dx", dx, wdx, refRtol, 1e-7)
				assertClose(t, act.String()+" dbias", db, wdb, refRtol, 1e-6*float64(rows))
				dx, _ = runBiasActBackward(t, b, act, rows, cols, y, dy, false)
				assertClose(t, act.String()+" dx without dbias", dx, wdx, refRtol, 1e-7)
			}
		}
	})
}

// TestBiasActBackwardFiniteDifferences checks dx against dy times the central
// difference of the float64 activation at the forward's input, and dbias
// against the column sums of that.
func TestBiasActBackwardFiniteDifferences(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(5)
		rows, cols := 23, 41
		x := randFloats(rng, rows*cols, -3, 3)
		for i, v := range x {
			if math.Abs(float64(v)) < 0.01 { // keep away from ReLU's kink
				x[i] = 0.5
			}
		}
		bias := randFloats(rng, cols, -0.5, 0.5)
		dy := randFloats(rng, rows*cols, -1, 1)
		for _, act := range allActs {
			y := runBiasAct(t, b, act, rows, cols, x, bias)
			dx, db := runBiasActBackward(t, b, act, rows, cols, y, dy, true)
			wantDx := make([]float32, len(x))
			wantDb := make([]float64, cols)
			for i := range x {
				pre := float64(x[i] + bias[i%cols])
				g := float64(dy[i]) * centralDiff(func(v float64) float64 { return act64(act, v) }, pre)
				wantDx[i] = float32(g)
				wantDb[i%cols] += g
			}
			assertClose(t, act.String()+" dx", dx, wantDx, fdRtol, fdAtol)
			assertClose(t, act.String()+" dbias", db, float32s(wantDb), fdRtol, fdAtol)
		}
	})
}

// TestBiasActBackwardSameForAnyThreads: dbias is added per piece and the
// pieces in order, so every thread count gives the same bits.
func TestBiasActBackwardSameForAnyThreads(t *testing.T) {
	rng := newRNG(6)
	for _, s := range [][2]int{{3000, 67}, {70, 4099}, {5000, 1}} {
		rows, cols := s[0], s[1]
		y := outputsFor(Sigmoid, rng, rows*cols)
		dy := randFloats(rng, rows*cols, -1, 1)
		for _, isa := range SupportedISAs() {
			var first []float32
			for _, threads := range []int{1, 2, 3, 8} {
				b, err := NewCPU(CPUOptions{ISA: &isa, Threads: threads})
				mustOK(t, "NewCPU", err)
				_, db := runBiasActBackward(t, b, Sigmoid, rows, cols, y, dy, true)
				if first == nil {
					first = db
					continue
				}
				for c := range db {
					if math.Float32bits(db[c]) != math.Float32bits(first[c]) {
						t.Fatalf("%s %dx%d: dbias[%d] = %v with %d threads, %v with 1",
							isa, rows, cols, c, db[c], threads, first[c])
					}
				}
			}
		}
	}
}

func TestBiasActRejectsBadInput(t *testing.T) {
	b := MustCPU()
	x := make(HostBuffer, 6)
	bias := make(HostBuffer, 3)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"negative rows", b.BiasAct(ReLU, -1, 3, x, nil, x), ErrArg},
		{"negative cols", b.BiasAct(ReLU, 2, -3, x, nil, x), ErrArg},
		{"huge shape", b.BiasAct(ReLU, math.MaxInt/2, 3, x, nil, x), ErrArg},
		{"unknown act", b.BiasAct(Act(4), 2, 3, x, nil, x), ErrArg},
		{"negative act", b.BiasAct(Act(-1), 2, 3, x, nil, x), ErrArg},
		{"short x", b.BiasAct(ReLU, 2, 3, x[:5], nil, x), ErrShape},
		{"long y", b.BiasAct(ReLU, 2, 3, x, nil, make(HostBuffer, 7)), ErrShape},
		{"short bias", b.BiasAct(ReLU, 2, 3, x, bias[:2], x), ErrShape},
		{"nil x", b.BiasAct(ReLU, 2, 3, nil, bias, x), ErrArg},
		{"nil y", b.BiasAct(ReLU, 2, 3, x, bias, nil), ErrArg},
		{"bwd negative rows", b.BiasActBackward(Tanh, -2, 3, x, x, x, nil), ErrArg},
		{"bwd unknown act", b.BiasActBackward(Act(9), 2, 3, x, x, x, bias), ErrArg},
		{"bwd short dy", b.BiasActBackward(Tanh, 2, 3, x, x[:4], x, nil), ErrShape},
		{"bwd short dx", b.BiasActBackward(Tanh, 2, 3, x, x, x[:1], nil), ErrShape},
		{"bwd long dbias", b.BiasActBackward(Tanh, 2, 3, x, x, x, make(HostBuffer, 4)), ErrShape},
		{"bwd nil y", b.BiasActBackward(Tanh, 2, 3, nil, x, x, nil), ErrArg},
		{"bwd nil dx", b.BiasActBackward(Tanh, 2, 3, x, x, nil, nil), ErrArg},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want an error wrapping %v", c.name, c.err, c.want)
		}
	}
}

func TestBiasActBackwardNoRowsZeroesDbias(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		db := HostBuffer{1, 2, 3}
		mustOK(t, "BiasActBackward", b.BiasActBackward(ReLU, 0, 3, HostBuffer{}, HostBuffer{}, HostBuffer{}, db))
		assertClose(t, "dbias", db, []float32{0, 0, 0}, 0, 0)
	})
}

func float32s(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}
