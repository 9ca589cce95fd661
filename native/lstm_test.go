package native

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// lstmUnit64 is the float64 formula of one LSTM unit, from its four gate
// pre-activations (bias included) and previous cell state.
func lstmUnit64(zi, zf, zg, zo, cPrev float64) (c, h float64) {
	i, f, g, o := sigmoid64(zi), sigmoid64(zf), math.Tanh(zg), sigmoid64(zo)
	c = f*cPrev + i*g
	return c, o * math.Tanh(c)
}

// lstmShapes are pointwiseShapes read as batch x hidden, with batch cut so
// that z holds at most 2^18 floats.
func lstmShapes() [][2]int {
	var out [][2]int
	for _, s := range pointwiseShapes() {
		batch, hidden := s[0], s[1]
		if hidden > 0 && 4*batch*hidden > 1<<18 {
			batch = (1 << 18) / (4 * hidden)
		}
		out = append(out, [2]int{batch, hidden})
	}
	return out
}

type lstmCase struct {
	batch, hidden  int
	z, bias, cPrev []float32 // bias may be nil
	dh, dc         []float32 // dc may be nil
}

func newLSTMCase(rng *rand.Rand, batch, hidden int, withBias, withDc bool) lstmCase {
	n := batch * hidden
	lc := lstmCase{
		batch: batch, hidden: hidden,
		z:     randFloats(rng, 4*n, -3, 3),
		cPrev: randFloats(rng, n, -2, 2),
		dh:    randFloats(rng, n, -1, 1),
	}
	if withBias {
		lc.bias = randFloats(rng, 4*hidden, -0.5, 0.5)
	}
	if withDc {
		lc.dc = randFloats(rng, n, -1, 1)
	}
	return lc
}

// pre returns the pre-activation of gate k of unit j in row r, summed in
// float32 as the kernels do.
func (lc lstmCase) pre(r, k, j int) float32 {
	v := lc.z[r*4*lc.hidden+k*lc.hidden+j]
	if lc.bias != nil {
		v += lc.bias[k*lc.hidden+j]
	}
	return v
}

// guardedOpt is guarded for an optional input: nil stays a nil Buffer.
func guardedOpt(n int, init []float32) (Buffer, []float32) {
	if init == nil {
		return nil, nil
	}
	return guarded(n, init)
}

func checkAllGuards(t *testing.T, fulls map[string][]float32) {
	t.Helper()
	for name, full := range fulls {
		if full != nil {
			checkGuards(t, name, full)
		}
	}
}

func runLSTMForward(t *testing.T, b *CPU, lc lstmCase) (gates, c, h []float32) {
	t.Helper()
	n := lc.batch * lc.hidden
	z, zf := guarded(4*n, lc.z)
	bias, bf := guardedOpt(4*lc.hidden, lc.bias)
	cp, cpf := guarded(n, lc.cPrev)
	g, gf := guarded(4*n, nil)
	cb, cf := guarded(n, nil)
	hb, hf := guarded(n, nil)
	mustOK(t, "LSTMForward", b.LSTMForward(lc.batch, lc.hidden, z, bias, cp, g, cb, hb))
	checkAllGuards(t, map[string][]float32{"z": zf, "bias": bf, "cPrev": cpf, "gates": gf, "c": cf, "h": hf})
	return g, cb, hb
}

func runLSTMBackward(t *testing.T, b *CPU, lc lstmCase, gates, c []float32) (dz, dcPrev []float32) {
	t.Helper()
	n := lc.batch * lc.hidden
	g, gf := guarded(4*n, gates)
	cp, cpf := guarded(n, lc.cPrev)
	cb, cf := guarded(n, c)
	dh, dhf := guarded(n, lc.dh)
	dc, dcf := guardedOpt(n, lc.dc)
	dzb, dzf := guarded(4*n, nil)
	dcp, dcpf := guarded(n, nil)
	mustOK(t, "LSTMBackward", b.LSTMBackward(lc.batch, lc.hidden, g, cp, cb, dh, dc, dzb, dcp))
	checkAllGuards(t, map[string][]float32{"gates": gf, "cPrev": cpf, "c": cf, "dh": dhf, "dc": dcf,
		"dz": dzf, "dcPrev": dcpf})
	return dzb, dcp
}

func TestLSTMForwardScalarMatchesFloat64(t *testing.T) {
	ref := scalarCPU(t)
	rng := newRNG(51)
	for _, s := range lstmShapes() {
		lc := newLSTMCase(rng, s[0], s[1], true, false)
		gates, c, h := runLSTMForward(t, ref, lc)
		H := lc.hidden
		wantG := make([]float32, len(gates))
		wantC, wantH := make([]float32, len(c)), make([]float32, len(h))
		for r := range lc.batch {
			for j := range H {
				pre := func(k int) float64 { return float64(lc.pre(r, k, j)) }
				wantG[r*4*H+j] = float32(sigmoid64(pre(0)))
				wantG[r*4*H+H+j] = float32(sigmoid64(pre(1)))
				wantG[r*4*H+2*H+j] = float32(math.Tanh(pre(2)))
				wantG[r*4*H+3*H+j] = float32(sigmoid64(pre(3)))
				cv, hv := lstmUnit64(pre(0), pre(1), pre(2), pre(3), float64(lc.cPrev[r*H+j]))
				wantC[r*H+j], wantH[r*H+j] = float32(cv), float32(hv)
			}
		}
		assertClose(t, "gates", gates, wantG, refRtol, tinyAtol)
		// c and h add and multiply O(1) terms: absolute error of a few ulp.
		assertClose(t, "c", c, wantC, refRtol, 1e-6)
		assertClose(t, "h", h, wantH, refRtol, 1e-6)
	}
}

func TestLSTMForwardMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(52)
		for _, s := range lstmShapes() {
			for _, withBias := range []bool{false, true} {
				lc := newLSTMCase(rng, s[0], s[1], withBias, false)
				g, c, h := runLSTMForward(t, b, lc)
				wg, wc, wh := runLSTMForward(t, ref, lc)
				assertClose(t, "gates", g, wg, isaRtol, tinyAtol)
				assertClose(t, "c", c, wc, isaRtol, 1e-6)
				assertClose(t, "h", h, wh, isaRtol, 1e-6)
			}
		}
	})
}

func TestLSTMBackwardMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(53)
		for _, s := range lstmShapes() {
			for _, withDc := range []bool{false, true} {
				lc := newLSTMCase(rng, s[0], s[1], true, withDc)
				gates, c, _ := runLSTMForward(t, ref, lc)
				dz, dcp := runLSTMBackward(t, b, lc, gates, c)
				wdz, wdcp := runLSTMBackward(t, ref, lc, gates, c)
				assertClose(t, "dz", dz, wdz, isaRtol, 1e-6)
				assertClose(t, "dcPrev", dcp, wdcp, isaRtol, 1e-6)
			}
		}
	})
}

// TestLSTMBackwardFiniteDifferences checks dz and dcPrev against central
// differences of L = sum(dh*h + dc*c) computed in float64, unit by unit (each
// unit's outputs depend only on its own five inputs).
func TestLSTMBackwardFiniteDifferences(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(54)
		for _, withDc := range []bool{false, true} {
			lc := newLSTMCase(rng, 5, 19, true, withDc)
			gates, c, _ := runLSTMForward(t, b, lc)
			dz, dcp := runLSTMBackward(t, b, lc, gates, c)
			H := lc.hidden
			wantDz, wantDcp := make([]float32, len(dz)), make([]float32, len(dcp))
			for r := range lc.batch {
				for j := range H {
					u := r*H + j
					dc := 0.0
					if lc.dc != nil {
						dc = float64(lc.dc[u])
					}
					in := [5]float64{}
					for k := range 4 {
						in[k] = float64(lc.pre(r, k, j))
					}
					in[4] = float64(lc.cPrev[u])
					for arg := range in {
						loss := func(v float64) float64 {
							a := in
							a[arg] = v
							cv, hv := lstmUnit64(a[0], a[1], a[2], a[3], a[4])
							return float64(lc.dh[u])*hv + dc*cv
						}
						g := float32(centralDiff(loss, in[arg]))
						if arg < 4 {
							wantDz[r*4*H+arg*H+j] = g
						} else {
							wantDcp[u] = g
						}
					}
				}
			}
			assertClose(t, "dz", dz, wantDz, fdRtol, fdAtol)
			assertClose(t, "dcPrev", dcp, wantDcp, fdRtol, fdAtol)
		}
	})
}

// TestLSTMExtremeInputs: pre-activations far outside exp's range saturate the
// gates instead of overflowing, and NaN propagates to the unit's outputs.
func TestLSTMExtremeInputs(t *testing.T) {
	nan := float32(math.NaN())
	const hidden = 5
	lc := lstmCase{batch: 1, hidden: hidden,
		z: []float32{
			1e4, -1e4, 100, 0, nan, // i
			-1e4, 1e4, -100, 0, 0, // f
			1e4, -1e4, 50, 0, 0, // g
			1e4, 1e4, -1e4, 0, 0, // o
		},
		cPrev: []float32{3, 3, 3, 3, 3},
		dh:    []float32{1, 1, 1, 1, 1},
	}
	wantC, wantH := make([]float32, hidden), make([]float32, hidden)
	for j := range hidden {
		cv, hv := lstmUnit64(float64(lc.pre(0, 0, j)), float64(lc.pre(0, 1, j)), float64(lc.pre(0, 2, j)),
			float64(lc.pre(0, 3, j)), float64(lc.cPrev[j]))
		wantC[j], wantH[j] = float32(cv), float32(hv)
	}
	forEachISA(t, func(t *testing.T, b *CPU) {
		_, c, h := runLSTMForward(t, b, lc)
		assertClose(t, "c", c, wantC, vecRtol, 1e-6)
		assertClose(t, "h", h, wantH, vecRtol, 1e-6)
	})
}

func TestLSTMRejectsBadInput(t *testing.T) {
	b := MustCPU()
	const batch, hidden = 2, 3
	n := batch * hidden
	buf := func(k int) HostBuffer { return make(HostBuffer, k) }
	fwd := func(batch, hidden int, z, bias, cp, g, c, h Buffer) error {
		return b.LSTMForward(batch, hidden, z, bias, cp, g, c, h)
	}
	bwd := func(g, cp, c, dh, dc, dz, dcp Buffer) error {
		return b.LSTMBackward(batch, hidden, g, cp, c, dh, dc, dz, dcp)
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"negative batch", fwd(-1, hidden, buf(4*n), nil, buf(n), buf(4*n), buf(n), buf(n)), ErrArg},
		{"negative hidden", fwd(batch, -3, buf(4*n), nil, buf(n), buf(4*n), buf(n), buf(n)), ErrArg},
		{"short z", fwd(batch, hidden, buf(4*n-1), nil, buf(n), buf(4*n), buf(n), buf(n)), ErrShape},
		{"bias of hidden", fwd(batch, hidden, buf(4*n), buf(hidden), buf(n), buf(4*n), buf(n), buf(n)), ErrShape},
		{"short cPrev", fwd(batch, hidden, buf(4*n), nil, buf(n-1), buf(4*n), buf(n), buf(n)), ErrShape},
		{"gates of n", fwd(batch, hidden, buf(4*n), nil, buf(n), buf(n), buf(n), buf(n)), ErrShape},
		{"nil c", fwd(batch, hidden, buf(4*n), nil, buf(n), buf(4*n), nil, buf(n)), ErrArg},
		{"long h", fwd(batch, hidden, buf(4*n), nil, buf(n), buf(4*n), buf(n), buf(n+1)), ErrShape},
		{"bwd negative batch", b.LSTMBackward(-2, hidden, buf(4*n), buf(n), buf(n), buf(n), nil, buf(4*n), buf(n)), ErrArg},
		{"bwd short gates", bwd(buf(4*n-2), buf(n), buf(n), buf(n), nil, buf(4*n), buf(n)), ErrShape},
		{"bwd nil cPrev", bwd(buf(4*n), nil, buf(n), buf(n), nil, buf(4*n), buf(n)), ErrArg},
		{"bwd short c", bwd(buf(4*n), buf(n), buf(1), buf(n), nil, buf(4*n), buf(n)), ErrShape},
		{"bwd nil dh", bwd(buf(4*n), buf(n), buf(n), nil, nil, buf(4*n), buf(n)), ErrArg},
		{"bwd long dc", bwd(buf(4*n), buf(n), buf(n), buf(n), buf(n+1), buf(4*n), buf(n)), ErrShape},
		{"bwd dz of n", bwd(buf(4*n), buf(n), buf(n), buf(n), nil, buf(n), buf(n)), ErrShape},
		{"bwd nil dcPrev", bwd(buf(4*n), buf(n), buf(n), buf(n), nil, buf(4*n), nil), ErrArg},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want an error wrapping %v", c.name, c.err, c.want)
		}
	}
}
