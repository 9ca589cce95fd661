package native

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// softmax64 is the float64 formula: the row softmax (or log-softmax) of x.
func softmax64(x []float32, log bool) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		if log {
			out[i] = float64(v) - m - math.Log(s)
		} else {
			out[i] = math.Exp(float64(v)-m) / s
		}
	}
	return out
}

func runSoftmax(t *testing.T, b *CPU, rows, cols int, x []float32, log bool) []float32 {
	t.Helper()
	xb, xfull := guarded(rows*cols, x)
	yb, yfull := guarded(rows*cols, nil)
	mustOK(t, "Softmax", b.Softmax(rows, cols, xb, yb, log))
	checkGuards(t, "x", xfull)
	checkGuards(t, "y", yfull)
	return yb
}

// softmaxTol is the tolerance of softmax outputs. Probabilities inherit the
// float32 rounding of x-m (up to 2 ulp of 60 relative to 1) and are compared
// relatively; log-probabilities near 0 need an absolute floor.
func softmaxTol(log bool, rtol float64) (float64, float64) {
	if log {
		return rtol, rtol
	}
	return 4 * rtol, tinyAtol
}

func TestSoftmaxScalarMatchesFloat64(t *testing.T) {
	ref := scalarCPU(t)
	rng := newRNG(11)
	for _, s := range pointwiseShapes() {
		rows, cols := s[0], s[1]
		x := randFloats(rng, rows*cols, -30, 30)
		for _, log := range []bool{false, true} {
			got := runSoftmax(t, ref, rows, cols, x, log)
			for r := range rows {
				want := float32s(softmax64(x[r*cols:(r+1)*cols], log))
				rtol, atol := softmaxTol(log, refRtol)
				assertClose(t, "softmax", got[r*cols:(r+1)*cols], want, rtol, atol)
			}
		}
	}
}

func TestSoftmaxMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(12)
		for _, s := range pointwiseShapes() {
			rows, cols := s[0], s[1]
			x := randFloats(rng, rows*cols, -30, 30)
			for _, log := range []bool{false, true} {
				rtol, atol := softmaxTol(log, isaRtol)
				got := runSoftmax(t, b, rows, cols, x, log)
				assertClose(t, "softmax", got, runSoftmax(t, ref, rows, cols, x, log), rtol, atol)
			}
		}
	})
}

func TestSoftmaxInPlace(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(13)
		rows, cols := 19, 45
		x := randFloats(rng, rows*cols, -5, 5)
		for _, log := range []bool{false, true} {
			want := runSoftmax(t, b, rows, cols, x, log)
			buf := HostBuffer(append([]float32(nil), x...))
			mustOK(t, "in place", b.Softmax(rows, cols, buf, buf, log))
			assertClose(t, "in place", buf, want, 0, 0)
		}
	})
}

// TestSoftmaxExtremeRows: rows of huge magnitude stay finite (the max shift),
// and a NaN poisons exactly its own row.
func TestSoftmaxExtremeRows(t *testing.T) {
	nan := float32(math.NaN())
	const cols = 21
	rows := [][]float32{
		make([]float32, cols), // uniform
		randFloats(newRNG(14), cols, -3e38, 3e38),
		randFloats(newRNG(15), cols, 80, 200),
		randFloats(newRNG(16), cols, -1e4, -9e3),
		append([]float32{nan}, make([]float32, cols-1)...),
	}
	var x []float32
	for _, r := range rows {
		x = append(x, r...)
	}
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, log := range []bool{false, true} {
			got := runSoftmax(t, b, len(rows), cols, x, log)
			for r, row := range rows {
				rtol, atol := softmaxTol(log, vecRtol)
				assertClose(t, "softmax", got[r*cols:(r+1)*cols], float32s(softmax64(row, log)), rtol, atol)
			}
		}
	})
}

func TestSoftmaxRejectsBadInput(t *testing.T) {
	b := MustCPU()
	x := make(HostBuffer, 6)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"negative rows", b.Softmax(-2, 3, x, x, false), ErrArg},
		{"negative cols", b.Softmax(2, -3, x, x, true), ErrArg},
		{"short x", b.Softmax(2, 3, x[:5], x, false), ErrShape},
		{"long y", b.Softmax(2, 3, x, make(HostBuffer, 9), false), ErrShape},
		{"nil x", b.Softmax(2, 3, nil, x, false), ErrArg},
		{"nil y", b.Softmax(2, 3, x, nil, false), ErrArg},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want an error wrapping %v", c.name, c.err, c.want)
		}
	}
}

// ---- binary cross-entropy with logits -------------------------------------

// cancelAtol is the absolute error, per unit of scale, of a gradient that
// subtracts two O(1) float32 numbers (p - y, p - onehot): a few ulp of 1.
const cancelAtol = 5e-7

func bceTerm64(x, y float64) float64 {
	return max(x, 0) - x*y + math.Log1p(math.Exp(-math.Abs(x)))
}

func bceInputs(rng *rand.Rand, n int) (logits, labels []float32) {
	logits = randFloats(rng, n, -25, 25)
	labels = make([]float32, n)
	for i := range labels {
		switch i % 3 {
		case 0:
			labels[i] = 1
		case 1:
			labels[i] = rng.Float32() // soft label
		}
	}
	return logits, labels
}

var bceSizes = append(append([]int(nil), oddSizes...), 3*elementGrain+17)

func runBCE(t *testing.T, b *CPU, x, y []float32) float64 {
	t.Helper()
	xb, xfull := guarded(len(x), x)
	yb, yfull := guarded(len(y), y)
	loss, err := b.BCEWithLogits(len(x), xb, yb)
	mustOK(t, "BCEWithLogits", err)
	checkGuards(t, "logits", xfull)
	checkGuards(t, "labels", yfull)
	return loss
}

func runBCEBackward(t *testing.T, b *CPU, x, y []float32, scale float32) []float32 {
	t.Helper()
	xb, xfull := guarded(len(x), x)
	yb, yfull := guarded(len(y), y)
	dxb, dxfull := guarded(len(x), nil)
	mustOK(t, "BCEWithLogitsBackward", b.BCEWithLogitsBackward(len(x), xb, yb, scale, dxb))
	checkGuards(t, "logits", xfull)
	checkGuards(t, "labels", yfull)
	checkGuards(t, "dx", dxfull)
	return dxb
}

func assertCloseScalar(t *testing.T, name string, got, want, rtol, atol float64) {
	t.Helper()
	if math.IsNaN(got) != math.IsNaN(want) || math.Abs(got-want) > atol+rtol*math.Abs(want) {
		t.Fatalf("%s = %v, want %v (rtol %g, atol %g)", name, got, want, rtol, atol)
	}
}

func TestBCEScalarMatchesFloat64(t *testing.T) {
	ref := scalarCPU(t)
	rng := newRNG(21)
	for _, n := range bceSizes {
		x, y := bceInputs(rng, n)
		var want float64
		for i := range x {
			want += bceTerm64(float64(x[i]), float64(y[i]))
		}
		assertCloseScalar(t, "loss", runBCE(t, ref, x, y), want, refRtol, 0)
		dx := runBCEBackward(t, ref, x, y, 0.5)
		wantDx := make([]float32, n)
		for i := range x {
			wantDx[i] = float32(0.5 * (sigmoid64(float64(x[i])) - float64(y[i])))
		}
		assertClose(t, "dx", dx, wantDx, refRtol, cancelAtol*0.5)
	}
}

func TestBCEMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(22)
		for _, n := range bceSizes {
			x, y := bceInputs(rng, n)
			assertCloseScalar(t, "loss", runBCE(t, b, x, y), runBCE(t, ref, x, y), isaRtol, 0)
			for _, scale := range []float32{1, -0.25} {
				assertClose(t, "dx", runBCEBackward(t, b, x, y, scale), runBCEBackward(t, ref, x, y, scale),
					isaRtol, cancelAtol*math.Abs(float64(scale)))
			}
		}
	})
}

// TestBCEExtremeLogits: logits far beyond exp's range give finite, accurate
// terms, and NaN propagates.
func TestBCEExtremeLogits(t *testing.T) {
	logits := []float32{1e4, -1e4, 100, -100, 88.7, -88.7, 17, -17, 1e-20, 0, 3e38, -3e38}
	forEachISA(t, func(t *testing.T, b *CPU) {
		for _, label := range []float32{0, 1, 0.5} {
			for _, x := range logits {
				got := runBCE(t, b, []float32{x}, []float32{label})
				assertCloseScalar(t, "term", got, bceTerm64(float64(x), float64(label)), vecRtol, 1e-30)
				dx := runBCEBackward(t, b, []float32{x}, []float32{label}, 1)
				assertClose(t, "dx", dx, []float32{float32(sigmoid64(float64(x)) - float64(label))}, vecRtol, 1e-30)
			}
		}
		nan := float32(math.NaN())
		if got := runBCE(t, b, []float32{1, nan, 2}, []float32{0, 1, 1}); !math.IsNaN(got) {
			t.Fatalf("loss with a NaN logit = %v, want NaN", got)
		}
	})
}

func TestBCEBackwardFiniteDifferences(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		x, y := bceInputs(newRNG(23), 333)
		const scale = 1.0 / 333
		dx := runBCEBackward(t, b, x, y, scale)
		want := make([]float32, len(x))
		for i := range x {
			label := float64(y[i])
			want[i] = float32(scale * centralDiff(func(v float64) float64 { return bceTerm64(v, label) }, float64(x[i])))
		}
		assertClose(t, "dx", dx, want, fdRtol, fdAtol*scale)
	})
}

func TestBCERejectsBadInput(t *testing.T) {
	b := MustCPU()
	x := make(HostBuffer, 5)
	lossErr := func(_ float64, err error) error { return err }
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"negative n", lossErr(b.BCEWithLogits(-1, x, x)), ErrArg},
		{"short logits", lossErr(b.BCEWithLogits(5, x[:4], x)), ErrShape},
		{"long labels", lossErr(b.BCEWithLogits(5, x, make(HostBuffer, 6))), ErrShape},
		{"nil labels", lossErr(b.BCEWithLogits(5, x, nil)), ErrArg},
		{"bwd negative n", b.BCEWithLogitsBackward(-5, x, x, 1, x), ErrArg},
		{"bwd short dx", b.BCEWithLogitsBackward(5, x, x, 1, x[:3]), ErrShape},
		{"bwd nil dx", b.BCEWithLogitsBackward(5, x, x, 1, nil), ErrArg},
		{"bwd nil logits", b.BCEWithLogitsBackward(5, nil, x, 1, x), ErrArg},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want an error wrapping %v", c.name, c.err, c.want)
		}
	}
}

// ---- softmax cross-entropy --------------------------------------------------

// xent64 is the float64 summed cross-entropy of rows of x against labels.
func xent64(rows, cols int, x []float32, labels []int64) float64 {
	var loss float64
	for r := range rows {
		loss -= softmax64(x[r*cols:(r+1)*cols], true)[labels[r]]
	}
	return loss
}

func xentInputs(rng *rand.Rand, rows, cols int) ([]float32, []int64) {
	x := randFloats(rng, rows*cols, -15, 15)
	labels := make([]int64, rows)
	for r := range labels {
		labels[r] = rng.Int64N(int64(max(cols, 1)))
	}
	return x, labels
}

// runXent returns the loss and, when withDx, the gradient.
func runXent(t *testing.T, b *CPU, rows, cols int, x []float32, labels []int64, scale float32,
	withDx bool) (float64, []float32) {
	t.Helper()
	xb, xfull := guarded(rows*cols, x)
	var dxb HostBuffer
	var dxfull []float32
	var dx Buffer
	if withDx {
		dxb, dxfull = guarded(rows*cols, nil)
		dx = dxb
	}
	loss, err := b.SoftmaxCrossEntropy(rows, cols, xb, labels, scale, dx)
	mustOK(t, "SoftmaxCrossEntropy", err)
	checkGuards(t, "logits", xfull)
	if withDx {
		checkGuards(t, "dx", dxfull)
	}
	return loss, dxb
}

// xentShapes are pointwiseShapes without cols = 0 (no label is valid there).
func xentShapes() [][2]int {
	var out [][2]int
	for _, s := range pointwiseShapes() {
		if s[1] > 0 {
			out = append(out, s)
		}
	}
	return out
}

func TestSoftmaxCrossEntropyScalarMatchesFloat64(t *testing.T) {
	ref := scalarCPU(t)
	rng := newRNG(31)
	for _, s := range xentShapes() {
		rows, cols := s[0], s[1]
		x, labels := xentInputs(rng, rows, cols)
		loss, dx := runXent(t, ref, rows, cols, x, labels, 0.5, true)
		assertCloseScalar(t, "loss", loss, xent64(rows, cols, x, labels), refRtol, 1e-6*float64(rows))
		want := make([]float32, len(x))
		for r := range rows {
			for i, p := range softmax64(x[r*cols:(r+1)*cols], false) {
				if int64(i) == labels[r] {
					p--
				}
				want[r*cols+i] = float32(0.5 * p)
			}
		}
		assertClose(t, "dx", dx, want, 4*refRtol, cancelAtol*0.5)
	}
}

func TestSoftmaxCrossEntropyMatchesScalar(t *testing.T) {
	ref := scalarCPU(t)
	forEachISA(t, func(t *testing.T, b *CPU) {
		rng := newRNG(32)
		for _, s := range xentShapes() {
			rows, cols := s[0], s[1]
			x, labels := xentInputs(rng, rows, cols)
			wantLoss, wantDx := runXent(t, ref, rows, cols, x, labels, 2, true)
			loss, dx := runXent(t, b, rows, cols, x, labels, 2, true)
			assertCloseScalar(t, "loss", loss, wantLoss, isaRtol, 1e-6*float64(rows))
			assertClose(t, "dx", dx, wantDx, 4*isaRtol, cancelAtol*2)
			lossOnly, _ := runXent(t, b, rows, cols, x, labels, 2, false)
			if lossOnly != loss {
				t.Fatalf("loss without dx = %v, with dx %v", lossOnly, loss)
			}
		}
	})
}

// TestSoftmaxCrossEntropyFiniteDifferences checks dx against scale times the
// central difference of the float64 loss, one logit at a time.
func TestSoftmaxCrossEntropyFiniteDifferences(t *testing.T) {
	forEachISA(t, func(t *testing.T, b *CPU) {
		rows, cols := 7, 13
		x, labels := xentInputs(newRNG(33), rows, cols)
		const scale = 0.25
		_, dx := runXent(t, b, rows, cols, x, labels, scale, true)
		want := make([]float32, len(x))
		for r := range rows {
			row := x[r*cols : (r+1)*cols]
			for i := range cols {
				loss := func(v float64) float64 { return rowXent64(row, i, v, labels[r]) }
				want[r*cols+i] = float32(scale * centralDiff(loss, float64(row[i])))
			}
		}
		assertClose(t, "dx", dx, want, fdRtol, fdAtol)
	})
}

// rowXent64 is -log softmax(row)[label] in float64, with row[i] replaced by v.
func rowXent64(row []float32, i int, v float64, label int64) float64 {
	at := func(j int) float64 {
		if j == i {
			return v
		}
		return float64(row[j])
	}
	m := math.Inf(-1)
	for j := range row {
		m = max(m, at(j))
	}
	var s float64
	for j := range row {
		s += math.Exp(at(j) - m)
	}
	return math.Log(s) - (at(int(label)) - m)
}

func TestLossesSameForAnyThreads(t *testing.T) {
	x, y := bceInputs(newRNG(41), 5*elementGrain+3)
	rows, cols := 3000, 67
	lx, labels := xentInputs(newRNG(42), rows, cols)
	for _, isa := range SupportedISAs() {
		var bce0, xent0 float64
		for i, threads := range []int{1, 2, 3, 8} {
			b, err := NewCPU(CPUOptions{ISA: &isa, Threads: threads})
			mustOK(t, "NewCPU", err)
			bce := runBCE(t, b, x, y)
			xent, _ := runXent(t, b, rows, cols, lx, labels, 1, false)
			if i == 0 {
				bce0, xent0 = bce, xent
				continue
			}
			if bce != bce0 || xent != xent0 {
				t.Fatalf("%s, %d threads: bce %v xent %v; with 1 thread: %v %v",
					isa, threads, bce, xent, bce0, xent0)
			}
		}
	}
}

func TestSoftmaxCrossEntropyRejectsBadInput(t *testing.T) {
	b := MustCPU()
	x := make(HostBuffer, 6)
	xent := func(rows, cols int, logits Buffer, labels []int64, dx Buffer) error {
		_, err := b.SoftmaxCrossEntropy(rows, cols, logits, labels, 1, dx)
		return err
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"negative rows", xent(-2, 3, x, []int64{0, 0}, nil), ErrArg},
		{"negative cols", xent(2, -3, x, []int64{0, 0}, nil), ErrArg},
		{"short logits", xent(2, 3, x[:5], []int64{0, 0}, nil), ErrShape},
		{"nil logits", xent(2, 3, nil, []int64{0, 0}, nil), ErrArg},
		{"too few labels", xent(2, 3, x, []int64{0}, nil), ErrShape},
		{"label = cols", xent(2, 3, x, []int64{0, 3}, nil), ErrRange},
		{"negative label", xent(2, 3, x, []int64{-1, 0}, nil), ErrRange},
		{"no classes", xent(2, 0, HostBuffer{}, []int64{0, 0}, nil), ErrRange},
		{"short dx", xent(2, 3, x, []int64{0, 1}, make(HostBuffer, 5)), ErrShape},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want an error wrapping %v", c.name, c.err, c.want)
		}
	}
}

// A bad label anywhere must leave dx untouched: labels are checked before any
// piece runs.
func TestSoftmaxCrossEntropyBadLabelWritesNothing(t *testing.T) {
	b := MustCPU()
	rows, cols := 4000, 50 // several pieces
	x, labels := xentInputs(newRNG(43), rows, cols)
	labels[rows-1] = int64(cols)
	dx, full := guarded(rows*cols, nil)
	for i := range dx {
		dx[i] = 7
	}
	if _, err := b.SoftmaxCrossEntropy(rows, cols, HostBuffer(x), labels, 1, dx); !errors.Is(err, ErrRange) {
		t.Fatalf("got %v, want ErrRange", err)
	}
	checkGuards(t, "dx", full)
	for i, v := range dx {
		if v != 7 {
			t.Fatalf("dx[%d] = %v written despite a bad label", i, v)
		}
	}
}
