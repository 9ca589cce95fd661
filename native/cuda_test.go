//go:build cuda

package native

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// GPU parity tests: every op of the CUDA backend against the CPU backend on
// random shapes (empty, one, odd, and sizes that span several thread blocks),
// with buffers both aligned and shifted by one float (which takes the
// kernels' scalar paths instead of their float4 paths). Tolerances, relative
// to the CPU result unless stated:
//
//	elementwise ops with exp/tanh/sqrt (activations, LSTM, optimisers, BCE
//	gradient, softmax):   |gpu-cpu| <= 2e-6 + 2e-5*|cpu|
//	sums over rows or bags (dbias, embedding bags, weighted sums): 1e-5 per
//	added term, relative to the sum of the terms' magnitudes
//	GEMM:                 1e-5 * k * max|A| * max|B| (FP32 cuBLAS, no TF32)
//	loss sums (float64):  1e-6 relative
//
// Without a GPU (no driver, no device) every test skips, saying why.

// cudaOrSkip returns a CUDA backend on device 0, or skips the test.
func cudaOrSkip(t testing.TB) *CUDA {
	t.Helper()
	b, err := NewCUDA(CUDAOptions{})
	if errors.Is(err, ErrNoGPU) {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatalf("NewCUDA: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// TestCUDANewReportsWhyNoGPU runs everywhere: without a GPU, NewCUDA must fail
// with ErrNoGPU and a reason (this is what makes the other tests skip rather
// than fail); with one, it must name the device.
func TestCUDANewReportsWhyNoGPU(t *testing.T) {
	b, err := NewCUDA(CUDAOptions{})
	if err != nil {
		if !errors.Is(err, ErrNoGPU) {
			t.Fatalf("NewCUDA without a usable GPU: %v does not wrap ErrNoGPU", err)
		}
		if len(err.Error()) <= len(ErrNoGPU.Error())+len("cuda: : ") {
			t.Fatalf("NewCUDA error %q does not say why", err)
		}
		t.Logf("no GPU here, as reported: %v", err)
		return
	}
	defer b.Close()
	if !strings.HasPrefix(b.Name(), "cuda/") || len(b.Name()) == len("cuda/") {
		t.Fatalf("Name() = %q, want cuda/<device>", b.Name())
	}
	if info := b.Device(); info.Multiprocessors <= 0 || info.TotalMem <= 0 {
		t.Fatalf("device info %+v has no SMs or memory", info)
	}
}

// cudaEnv holds a GPU and a CPU backend and the random source of a test.
type cudaEnv struct {
	t   *testing.T
	gpu *CUDA
	cpu *CPU
	rng *rand.Rand
}

func newCUDAEnv(t *testing.T, seed uint64) *cudaEnv {
	return &cudaEnv{t: t, gpu: cudaOrSkip(t), cpu: MustCPU(), rng: newRNG(seed)}
}

// pair returns data as a GPU buffer that starts shift floats into its
// allocation, and as a CPU buffer (a copy).
func (e *cudaEnv) pair(data []float32, shift int) (Buffer, HostBuffer) {
	e.t.Helper()
	n := len(data)
	g := e.gpu.Alloc(n+shift).Slice(shift, shift+n)
	if err := e.gpu.Upload(g, data); err != nil {
		e.t.Fatalf("upload: %v", err)
	}
	return g, HostBuffer(slices.Clone(data))
}

func (e *cudaEnv) rand(n int, lo, hi float32, shift int) (Buffer, HostBuffer) {
	return e.pair(randFloats(e.rng, n, lo, hi), shift)
}

func (e *cudaEnv) get(b Buffer) []float32 {
	e.t.Helper()
	out := make([]float32, b.Len())
	if err := e.gpu.Download(out, b); err != nil {
		e.t.Fatalf("download: %v", err)
	}
	return out
}

func (e *cudaEnv) ok(what string, err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// near fails unless |got-want| <= atol + rtol*|want| elementwise (NaN must
// meet NaN).
func (e *cudaEnv) near(what string, got, want []float32, atol, rtol float64) {
	e.t.Helper()
	if len(got) != len(want) {
		e.t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) && math.IsNaN(g) {
			continue
		}
		if !(math.Abs(g-w) <= atol+rtol*math.Abs(w)) {
			e.t.Fatalf("%s: [%d] = %g, CPU %g (|diff| %.3g > %.3g)", what, i, g, w, math.Abs(g-w), atol+rtol*math.Abs(w))
		}
	}
}

// nearSum checks sums against float64 references: |got-ref| <= 2e-5*mag +
// 1e-6, mag being the sum of the magnitudes of the terms. 2e-5 covers the
// float32 rounding of a few hundred additions in any order; a term dropped
// or added twice out of a few thousand is caught.
func (e *cudaEnv) nearSum(what string, got []float32, ref, mag []float64) {
	e.t.Helper()
	for i := range got {
		tol := 2e-5*mag[i] + 1e-6
		if d := math.Abs(float64(got[i]) - ref[i]); !(d <= tol) {
			e.t.Fatalf("%s: [%d] = %g, exact %g (|diff| %.3g > %.3g)", what, i, got[i], ref[i], d, tol)
		}
	}
}

var cudaShifts = []int{0, 1}

// matrixShapes spans empty, single, odd and multi-block shapes.
var matrixShapes = [][2]int{{0, 5}, {3, 0}, {1, 1}, {1, 7}, {7, 13}, {33, 4}, {64, 128}, {300, 33}, {1000, 96}, {3000, 5}}

func TestCUDAUploadDownloadCopyFill(t *testing.T) {
	e := newCUDAEnv(t, 1)
	for _, n := range oddSizes {
		for _, shift := range cudaShifts {
			data := randFloats(e.rng, n, -1, 1)
			g, _ := e.pair(data, shift)
			e.near(fmt.Sprintf("round trip n=%d", n), e.get(g), data, 0, 0)
			dst := e.gpu.Alloc(n+shift).Slice(shift, shift+n)
			e.ok("copy", e.gpu.Copy(dst, g))
			e.near(fmt.Sprintf("copy n=%d", n), e.get(dst), data, 0, 0)
			e.ok("fill", e.gpu.Fill(dst, 2.5))
			want := make([]float32, n)
			for i := range want {
				want[i] = 2.5
			}
			e.near(fmt.Sprintf("fill n=%d", n), e.get(dst), want, 0, 0)
		}
	}
	if z := e.get(e.gpu.Alloc(1000)); slices.ContainsFunc(z, func(v float32) bool { return v != 0 }) {
		t.Fatal("Alloc did not zero its memory")
	}
}

// TestCUDAUploadsThroughThePinnedRing: uploads larger than the staging
// ring (four 4 MiB chunks) arrive whole, and Upload's source may be
// overwritten as soon as it returns, while earlier copies are still queued
// behind a long kernel: the ring must not hand a chunk back before its copy
// has run.
func TestCUDAUploadsThroughThePinnedRing(t *testing.T) {
	e := newCUDAEnv(t, 4)
	if err := e.gpu.PinnedStaging(); err != nil {
		t.Fatalf("no pinned staging: %v", err)
	}
	checkUploadsArriveWhole(e)
}

// TestCUDAUploadsWithoutPinnedStaging: the same with plain copies, the
// fallback of a backend that cannot have pinned memory.
func TestCUDAUploadsWithoutPinnedStaging(t *testing.T) {
	b, err := NewCUDA(CUDAOptions{PageableUploads: true})
	if errors.Is(err, ErrNoGPU) {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.PinnedStaging() == nil {
		t.Fatal("PageableUploads: PinnedStaging reports staging")
	}
	checkUploadsArriveWhole(&cudaEnv{t: t, gpu: b, cpu: MustCPU(), rng: newRNG(6)})
}

// checkUploadsArriveWhole uploads past the ring (and its source changed right
// after) behind a busy stream, then reads both copies back.
func checkUploadsArriveWhole(e *cudaEnv) {
	e.t.Helper()
	const n = 5<<20 + 3         // 20 MiB and a tail: five chunks, the ring wraps
	big := e.gpu.Alloc(1 << 28) // 1 GiB filled 40 times: the stream stays busy ~10 ms
	for range 40 {
		e.ok("fill", e.gpu.Fill(big, 1))
	}
	src := randFloats(e.rng, n, -1, 1)
	want := slices.Clone(src)
	first, second := e.gpu.Alloc(n), e.gpu.Alloc(n)
	e.ok("upload", e.gpu.Upload(first, src))
	for i := range src {
		src[i] = -src[i]
	}
	e.ok("upload", e.gpu.Upload(second, src))
	e.near("first upload", e.get(first), want, 0, 0)
	e.near("second upload", e.get(second), src, 0, 0)
	e.ok("free", e.gpu.Free(big))
}

// TestCUDAWritesStayInside checks that ops write nothing outside their output
// views: the floats around a view keep their sentinel (gonum's guard idea).
func TestCUDAWritesStayInside(t *testing.T) {
	e := newCUDAEnv(t, 2)
	const pad = 16
	for _, n := range []int{1, 5, 33, 1027} {
		full := make([]float32, n+2*pad)
		for i := range full {
			full[i] = guardSentinel
		}
		whole, _ := e.pair(full, 0)
		out := whole.Slice(pad, pad+n)
		x, _ := e.rand(n, -2, 2, 1)
		e.ok("bias-act", e.gpu.BiasAct(Tanh, 1, n, x, nil, out))
		e.ok("softmax", e.gpu.Softmax(1, n, x, out, true))
		e.ok("fill", e.gpu.Fill(out, 1))
		e.ok("weighted sum", e.gpu.WeightedSum(out, []float32{1, 2}, []Buffer{x, x}))
		g, _ := e.rand(n, -1, 1, 0)
		e.ok("adam", e.gpu.Update(Optim{Kind: Adam, LR: 0.1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, Step: 1}, out, g,
			e.gpu.Alloc(n), e.gpu.Alloc(n)))
		got := e.get(whole)
		for i := range pad {
			for _, j := range []int{i, pad + n + i} {
				if math.Float32bits(got[j]) != math.Float32bits(guardSentinel) {
					t.Fatalf("n=%d: float %d outside the output view was overwritten (%g)", n, j, got[j])
				}
			}
		}
	}
}

func TestCUDAGemm(t *testing.T) {
	e := newCUDAEnv(t, 3)
	shapes := [][3]int{{0, 3, 4}, {3, 0, 2}, {5, 7, 0}, {1, 1, 1}, {2, 3, 5}, {33, 17, 65}, {128, 96, 64}, {257, 129, 31}}
	for _, s := range shapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, pad := range []int{0, 3} {
					m, n, k := s[0], s[1], s[2]
					ar, ac := m, k
					if ta {
						ar, ac = k, m
					}
					br, bc := k, n
					if tb {
						br, bc = n, k
					}
					// A row stride is at least 1, also for a matrix of no columns (BLAS's rule).
					lda, ldb, ldc := max(ac, 1)+pad, max(bc, 1)+pad, max(n, 1)+pad
					ag, ah := e.rand(max(0, (ar-1)*lda+ac), -1, 1, pad%2)
					bg, bh := e.rand(max(0, (br-1)*ldb+bc), -1, 1, 0)
					cg, ch := e.rand(max(0, (m-1)*ldc+n), -1, 1, 0)
					alpha, beta := float32(0.7), float32(-0.3)
					e.ok("gpu gemm", e.gpu.Gemm(ta, tb, m, n, k, alpha, ag, lda, bg, ldb, beta, cg, ldc))
					e.ok("cpu gemm", e.cpu.Gemm(ta, tb, m, n, k, alpha, ah, lda, bh, ldb, beta, ch, ldc))
					e.near(fmt.Sprintf("gemm %v ta=%v tb=%v pad=%d", s, ta, tb, pad), e.get(cg), ch,
						1e-5*float64(k+1), 1e-5)
				}
			}
		}
	}
	// beta == 0 ignores whatever C held, NaN included, also when k == 0.
	for _, k := range []int{0, 4} {
		ag, _ := e.rand(2*k, -1, 1, 0)
		bg, _ := e.rand(k*3, -1, 1, 0)
		nan := float32(math.NaN())
		cg, _ := e.pair([]float32{nan, nan, nan, nan, nan, nan}, 0)
		e.ok("gemm beta=0", e.gpu.Gemm(false, false, 2, 3, k, 1, ag, max(k, 1), bg, 3, 0, cg, 3))
		for _, v := range e.get(cg) {
			if math.IsNaN(float64(v)) {
				t.Fatalf("k=%d beta=0: C kept a NaN", k)
			}
		}
	}
}

func TestCUDABiasAct(t *testing.T) {
	e := newCUDAEnv(t, 4)
	for _, act := range []Act{Identity, ReLU, Sigmoid, Tanh} {
		for _, s := range matrixShapes {
			for _, shift := range cudaShifts {
				for _, withBias := range []bool{false, true} {
					rows, cols := s[0], s[1]
					name := fmt.Sprintf("%v %dx%d shift=%d bias=%v", act, rows, cols, shift, withBias)
					xg, xh := e.rand(rows*cols, -6, 6, shift)
					var bg, bh Buffer
					if withBias {
						bg, bh = e.rand(cols, -1, 1, shift)
					}
					yg := e.gpu.Alloc(rows * cols)
					yh := make(HostBuffer, rows*cols)
					e.ok(name, e.gpu.BiasAct(act, rows, cols, xg, bg, yg))
					e.ok(name, e.cpu.BiasAct(act, rows, cols, xh, bh, yh))
					e.near(name, e.get(yg), yh, 2e-6, 2e-5)
					// In place.
					e.ok(name, e.gpu.BiasAct(act, rows, cols, xg, bg, xg))
					e.near(name+" in place", e.get(xg), yh, 2e-6, 2e-5)
				}
			}
		}
	}
}

func TestCUDABiasActBackward(t *testing.T) {
	e := newCUDAEnv(t, 5)
	for _, act := range []Act{Identity, ReLU, Sigmoid, Tanh} {
		for _, s := range matrixShapes {
			for _, shift := range cudaShifts {
				rows, cols := s[0], s[1]
				name := fmt.Sprintf("%v %dx%d shift=%d", act, rows, cols, shift)
				yg, yh := e.rand(rows*cols, 0, 1, shift)
				dyg, dyh := e.rand(rows*cols, -1, 1, shift)
				dxg, dxh := e.gpu.Alloc(rows*cols), make(HostBuffer, rows*cols)
				dbg, dbh := e.pair(randFloats(e.rng, cols, 5, 6), shift) // overwritten
				e.ok(name, e.gpu.BiasActBackward(act, rows, cols, yg, dyg, dxg, dbg))
				e.ok(name, e.cpu.BiasActBackward(act, rows, cols, yh, dyh, dxh, dbh))
				e.near(name+" dx", e.get(dxg), dxh, 1e-7, 1e-6)
				ref, mag := make([]float64, cols), make([]float64, cols)
				for r := range rows {
					for c := range cols {
						v := float64(dxh[r*cols+c])
						ref[c] += v
						mag[c] += math.Abs(v)
					}
				}
				e.nearSum(name+" dbias", e.get(dbg), ref, mag)
				e.nearSum(name+" CPU dbias", dbh, ref, mag) // the reference is right
				// Without dbias, and in place.
				e.ok(name, e.gpu.BiasActBackward(act, rows, cols, yg, dyg, dyg, nil))
				e.near(name+" dx in place", e.get(dyg), dxh, 1e-7, 1e-6)
			}
		}
	}
}

// cudaBags returns random CSR bags (some empty, with duplicate ids) over a
// table of rows rows.
func cudaBags(rng *rand.Rand, nbags, maxLen, rows int) (offsets, ids []int64) {
	offsets = make([]int64, nbags+1)
	for j := range nbags {
		l := rng.IntN(maxLen + 1)
		for range l {
			ids = append(ids, int64(rng.IntN(rows)))
		}
		offsets[j+1] = offsets[j] + int64(l)
	}
	return offsets, ids
}

var cudaBagShapes = []struct{ rows, dim, nbags, maxLen int }{
	{5, 0, 3, 2}, {1, 1, 1, 1}, {7, 3, 10, 4}, {50, 4, 33, 6}, {1000, 16, 500, 9}, {20, 33, 64, 30}, {100000, 64, 2048, 3},
}

func TestCUDAEmbeddingBag(t *testing.T) {
	e := newCUDAEnv(t, 6)
	for _, s := range cudaBagShapes {
		for _, pool := range []Pool{PoolSum, PoolMean} {
			for _, shift := range cudaShifts {
				name := fmt.Sprintf("pool=%d %+v shift=%d", pool, s, shift)
				offsets, ids := cudaBags(e.rng, s.nbags, s.maxLen, s.rows)
				tg, th := e.rand(s.rows*s.dim, -1, 1, shift)
				og, oh := e.gpu.Alloc(s.nbags*s.dim), make(HostBuffer, s.nbags*s.dim)
				e.ok(name, e.gpu.EmbeddingBag(pool, tg, s.rows, s.dim, offsets, ids, og))
				e.ok(name, e.cpu.EmbeddingBag(pool, th, s.rows, s.dim, offsets, ids, oh))
				e.near(name, e.get(og), oh, 1e-6*float64(s.maxLen+1), 1e-5)
			}
		}
	}
}

func TestCUDAEmbeddingBagBackward(t *testing.T) {
	e := newCUDAEnv(t, 7)
	for _, s := range cudaBagShapes {
		for _, pool := range []Pool{PoolSum, PoolMean} {
			for _, shift := range cudaShifts {
				name := fmt.Sprintf("pool=%d %+v shift=%d", pool, s, shift)
				offsets, ids := cudaBags(e.rng, s.nbags, s.maxLen, s.rows)
				dg, dh := e.rand(s.nbags*s.dim, -1, 1, shift)
				gs, err := e.gpu.EmbeddingBagBackward(pool, s.dim, offsets, ids, dg)
				e.ok(name, err)
				cs, err := e.cpu.EmbeddingBagBackward(pool, s.dim, offsets, ids, dh)
				e.ok(name, err)
				if !slices.Equal(gs.IDs, cs.IDs) {
					t.Fatalf("%s: ids %v, CPU %v", name, gs.IDs, cs.IDs)
				}
				if gs.Dim != s.dim || gs.Rows.Len() != len(gs.IDs)*s.dim {
					t.Fatalf("%s: dim %d, %d floats for %d ids", name, gs.Dim, gs.Rows.Len(), len(gs.IDs))
				}
				want, _ := Host(cs.Rows)
				// Duplicates of one id add up to ~nbags*maxLen/rows terms.
				terms := 1 + len(ids)/max(1, len(gs.IDs))
				e.near(name, e.get(gs.Rows), want, 1e-6*float64(terms), 1e-5)
			}
		}
	}
}

func TestCUDAEmbeddingBagRejectsWhatCPURejects(t *testing.T) {
	e := newCUDAEnv(t, 8)
	table := e.gpu.Alloc(4 * 2)
	out := e.gpu.Alloc(2 * 2)
	cases := []struct {
		name    string
		offsets []int64
		ids     []int64
		want    error
	}{
		{"id past the table", []int64{0, 1, 2}, []int64{0, 4}, ErrRange},
		{"negative id", []int64{0, 1, 2}, []int64{-1, 0}, ErrRange},
		{"offsets not from 0", []int64{1, 1, 2}, []int64{0, 1}, ErrArg},
		{"offsets decrease", []int64{0, 2, 1}, []int64{0, 1}, ErrArg},
		{"offsets past ids", []int64{0, 1, 3}, []int64{0, 1}, ErrRange},
	}
	for _, c := range cases {
		if err := e.gpu.EmbeddingBag(PoolSum, table, 4, 2, c.offsets, c.ids, out); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := e.gpu.EmbeddingBag(PoolSum, table, 4, 2, []int64{0, 1, 2}, []int64{0, 1}, e.gpu.Alloc(3)); !errors.Is(err, ErrShape) {
		t.Errorf("short out: %v, want ErrShape", err)
	}
	if err := e.gpu.EmbeddingBag(PoolSum, make(HostBuffer, 8), 4, 2, []int64{0, 1, 2}, []int64{0, 1}, out); !errors.Is(err, ErrArg) {
		t.Errorf("CPU buffer given to the GPU: %v, want ErrArg", err)
	}
}

func TestCUDAWeightedSum(t *testing.T) {
	e := newCUDAEnv(t, 9)
	for _, n := range []int{0, 1, 5, 1027, 70001} {
		for _, k := range []int{0, 1, 3, 32, 33, 70} {
			for _, shift := range cudaShifts {
				for _, inPlace := range []bool{false, true} {
					if inPlace && k == 0 {
						continue
					}
					name := fmt.Sprintf("n=%d k=%d shift=%d in-place=%v", n, k, shift, inPlace)
					w := randFloats(e.rng, k, -1, 1)
					gg, gh := make([]Buffer, k), make([]Buffer, k)
					ref, mag := make([]float64, n), make([]float64, n)
					for q := range k {
						g, h := e.rand(n, -1, 1, (shift+q)%2)
						gg[q], gh[q] = g, h
						for i := range n {
							v := float64(w[q]) * float64(h[i])
							ref[i] += v
							mag[i] += math.Abs(v)
						}
					}
					og, oh := e.gpu.Alloc(n), make(HostBuffer, n)
					if inPlace {
						og, oh = gg[k-1], slices.Clone(gh[k-1].(HostBuffer))
						gh[k-1] = oh
					}
					e.ok(name, e.gpu.WeightedSum(og, w, gg))
					e.ok(name, e.cpu.WeightedSum(oh, w, gh))
					e.nearSum(name, e.get(og), ref, mag)
					e.nearSum(name+" CPU", oh, ref, mag)
				}
			}
		}
	}
}

func cudaOptims() []Optim {
	return []Optim{
		{Kind: SGD, LR: 0.1},
		{Kind: SGD, LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3},
		{Kind: Adagrad, LR: 0.1, Eps: 1e-8},
		{Kind: Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 1e-4, Step: 1},
		{Kind: Adam, LR: 1e-3, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, Step: 17},
	}
}

func TestCUDAUpdate(t *testing.T) {
	e := newCUDAEnv(t, 10)
	for _, o := range cudaOptims() {
		for _, n := range oddSizes {
			for _, shift := range cudaShifts {
				name := fmt.Sprintf("%+v n=%d shift=%d", o, n, shift)
				wg, wh := e.rand(n, -1, 1, shift)
				gg, gh := e.rand(n, -1, 1, shift)
				sg, sh := make([]Buffer, o.StateBuffers()), make([]Buffer, o.StateBuffers())
				for i := range sg {
					sg[i], sh[i] = e.rand(n, 0, 1, shift) // valid for every optimiser's state
				}
				for step := range int64(3) { // the state carries over
					os := o
					os.Step += step
					e.ok(name, e.gpu.Update(os, wg, gg, sg...))
					e.ok(name, e.cpu.Update(os, wh, gh, sh...))
				}
				e.near(name+" w", e.get(wg), wh, 2e-6, 2e-5)
				for i := range sg {
					e.near(fmt.Sprintf("%s state %d", name, i), e.get(sg[i]), sh[i].(HostBuffer), 2e-6, 2e-5)
				}
			}
		}
	}
}

func TestCUDAUpdateRows(t *testing.T) {
	e := newCUDAEnv(t, 11)
	for _, o := range cudaOptims() {
		for _, s := range [][3]int{{1, 1, 1}, {10, 3, 0}, {10, 3, 4}, {1000, 16, 300}, {50, 33, 50}} {
			for _, shift := range cudaShifts {
				tableRows, dim, nrows := s[0], s[1], s[2]
				name := fmt.Sprintf("%+v %v shift=%d", o, s, shift)
				rows := make([]int64, nrows)
				for i, r := range e.rng.Perm(tableRows)[:nrows] {
					rows[i] = int64(r)
				}
				tg, th := e.rand(tableRows*dim, -1, 1, shift)
				gg, gh := e.rand(nrows*dim, -1, 1, shift)
				sg, sh := make([]Buffer, o.StateBuffers()), make([]Buffer, o.StateBuffers())
				for i := range sg {
					sg[i], sh[i] = e.rand(tableRows*dim, 0, 1, shift)
				}
				e.ok(name, e.gpu.UpdateRows(o, tg, tableRows, dim, rows, gg, sg...))
				e.ok(name, e.cpu.UpdateRows(o, th, tableRows, dim, rows, gh, sh...))
				e.near(name+" table", e.get(tg), th, 2e-6, 2e-5)
				for i := range sg {
					e.near(fmt.Sprintf("%s state %d", name, i), e.get(sg[i]), sh[i].(HostBuffer), 2e-6, 2e-5)
				}
			}
		}
	}
	tbl := e.gpu.Alloc(4 * 2)
	o := Optim{Kind: SGD, LR: 1}
	if err := e.gpu.UpdateRows(o, tbl, 4, 2, []int64{1, 1}, e.gpu.Alloc(4)); !errors.Is(err, ErrArg) {
		t.Errorf("duplicate rows: %v, want ErrArg", err)
	}
	if err := e.gpu.UpdateRows(o, tbl, 4, 2, []int64{4}, e.gpu.Alloc(2)); !errors.Is(err, ErrRange) {
		t.Errorf("row past the table: %v, want ErrRange", err)
	}
}

func TestCUDALSTM(t *testing.T) {
	e := newCUDAEnv(t, 12)
	for _, s := range [][2]int{{0, 4}, {3, 0}, {1, 1}, {5, 7}, {64, 33}, {300, 128}} {
		for _, withBias := range []bool{false, true} {
			for _, withDc := range []bool{false, true} {
				for _, shift := range cudaShifts {
					batch, hidden := s[0], s[1]
					n := batch * hidden
					name := fmt.Sprintf("%dx%d bias=%v dc=%v shift=%d", batch, hidden, withBias, withDc, shift)
					zg, zh := e.rand(4*n, -3, 3, shift)
					var bg, bh Buffer
					if withBias {
						bg, bh = e.rand(4*hidden, -1, 1, shift)
					}
					cpg, cph := e.rand(n, -2, 2, shift)
					gates, c, h := e.gpu.Alloc(4*n), e.gpu.Alloc(n), e.gpu.Alloc(n)
					gatesH, cH, hH := make(HostBuffer, 4*n), make(HostBuffer, n), make(HostBuffer, n)
					e.ok(name, e.gpu.LSTMForward(batch, hidden, zg, bg, cpg, gates, c, h))
					e.ok(name, e.cpu.LSTMForward(batch, hidden, zh, bh, cph, gatesH, cH, hH))
					e.near(name+" gates", e.get(gates), gatesH, 2e-6, 2e-5)
					e.near(name+" c", e.get(c), cH, 2e-6, 2e-5)
					e.near(name+" h", e.get(h), hH, 2e-6, 2e-5)

					dhg, dhh := e.rand(n, -1, 1, shift)
					var dcg, dch Buffer
					if withDc {
						dcg, dch = e.rand(n, -1, 1, shift)
					}
					dz, dcp := e.gpu.Alloc(4*n), e.gpu.Alloc(n)
					dzH, dcpH := make(HostBuffer, 4*n), make(HostBuffer, n)
					e.ok(name, e.gpu.LSTMBackward(batch, hidden, gates, cpg, c, dhg, dcg, dz, dcp))
					e.ok(name, e.cpu.LSTMBackward(batch, hidden, gatesH, cph, cH, dhh, dch, dzH, dcpH))
					e.near(name+" dz", e.get(dz), dzH, 2e-6, 2e-5)
					e.near(name+" dcPrev", e.get(dcp), dcpH, 2e-6, 2e-5)
				}
			}
		}
	}
}

func TestCUDASoftmax(t *testing.T) {
	e := newCUDAEnv(t, 13)
	for _, s := range [][2]int{{0, 3}, {4, 0}, {1, 1}, {3, 5}, {17, 1024}, {9, 1025}, {5, 3000}, {2000, 10}} {
		for _, log := range []bool{false, true} {
			for _, shift := range cudaShifts {
				rows, cols := s[0], s[1]
				name := fmt.Sprintf("%dx%d log=%v shift=%d", rows, cols, log, shift)
				xg, xh := e.rand(rows*cols, -20, 20, shift)
				yg, yh := e.gpu.Alloc(rows*cols), make(HostBuffer, rows*cols)
				e.ok(name, e.gpu.Softmax(rows, cols, xg, yg, log))
				e.ok(name, e.cpu.Softmax(rows, cols, xh, yh, log))
				e.near(name, e.get(yg), yh, 2e-6, 2e-5)
				e.ok(name, e.gpu.Softmax(rows, cols, xg, xg, log))
				e.near(name+" in place", e.get(xg), yh, 2e-6, 2e-5)
			}
		}
	}
	// A NaN in a row makes the whole row NaN, as on the CPU.
	x, _ := e.pair([]float32{1, float32(math.NaN()), 3, 1, 2, 3}, 0)
	y := e.gpu.Alloc(6)
	e.ok("nan", e.gpu.Softmax(2, 3, x, y, false))
	got := e.get(y)
	for i, v := range got {
		if (i < 3) != math.IsNaN(float64(v)) {
			t.Fatalf("softmax with a NaN in row 0: %v", got)
		}
	}
}

func TestCUDABCEWithLogits(t *testing.T) {
	e := newCUDAEnv(t, 14)
	for _, n := range append(slices.Clone(oddSizes), 300001) {
		for _, shift := range cudaShifts {
			name := fmt.Sprintf("n=%d shift=%d", n, shift)
			xg, xh := e.rand(n, -30, 30, shift)
			labels := make([]float32, n)
			for i := range labels {
				labels[i] = float32(e.rng.IntN(2))
			}
			yg, yh := e.pair(labels, shift)
			got, err := e.gpu.BCEWithLogits(n, xg, yg)
			e.ok(name, err)
			want, err := e.cpu.BCEWithLogits(n, xh, yh)
			e.ok(name, err)
			if math.Abs(got-want) > 1e-6*math.Abs(want)+1e-9 {
				t.Fatalf("%s: loss %.10g, CPU %.10g", name, got, want)
			}
			again, err := e.gpu.BCEWithLogits(n, xg, yg)
			e.ok(name, err)
			if math.Float64bits(again) != math.Float64bits(got) {
				t.Fatalf("%s: loss not deterministic: %v then %v", name, got, again)
			}
			dg, dh := e.gpu.Alloc(n), make(HostBuffer, n)
			e.ok(name, e.gpu.BCEWithLogitsBackward(n, xg, yg, 0.5, dg))
			e.ok(name, e.cpu.BCEWithLogitsBackward(n, xh, yh, 0.5, dh))
			e.near(name+" dx", e.get(dg), dh, 1e-7, 2e-5)
		}
	}
}

func TestCUDASoftmaxCrossEntropy(t *testing.T) {
	e := newCUDAEnv(t, 15)
	for _, s := range [][2]int{{0, 3}, {1, 1}, {3, 5}, {17, 1024}, {9, 1025}, {3000, 10}} {
		for _, withDx := range []bool{false, true} {
			for _, shift := range cudaShifts {
				rows, cols := s[0], s[1]
				name := fmt.Sprintf("%dx%d dx=%v shift=%d", rows, cols, withDx, shift)
				xg, xh := e.rand(rows*cols, -10, 10, shift)
				labels := make([]int64, rows)
				for i := range labels {
					labels[i] = int64(e.rng.IntN(cols))
				}
				var dg, dh Buffer
				if withDx {
					dg, dh = e.gpu.Alloc(rows*cols), make(HostBuffer, rows*cols)
				}
				got, err := e.gpu.SoftmaxCrossEntropy(rows, cols, xg, labels, 0.25, dg)
				e.ok(name, err)
				want, err := e.cpu.SoftmaxCrossEntropy(rows, cols, xh, labels, 0.25, dh)
				e.ok(name, err)
				if math.Abs(got-want) > 1e-5*math.Abs(want)+1e-6 {
					t.Fatalf("%s: loss %.10g, CPU %.10g", name, got, want)
				}
				if withDx {
					e.near(name+" dx", e.get(dg), dh.(HostBuffer), 1e-7, 2e-5)
				}
			}
		}
	}
	if _, err := e.gpu.SoftmaxCrossEntropy(2, 3, e.gpu.Alloc(6), []int64{0, 3}, 1, nil); !errors.Is(err, ErrRange) {
		t.Errorf("label past the classes: %v, want ErrRange", err)
	}
}

// TestCUDAStreamsOrderWithAfter hands a buffer from one backend's stream to
// another's.
func TestCUDAStreamsOrderWithAfter(t *testing.T) {
	e := newCUDAEnv(t, 16)
	other := cudaOrSkip(t)
	const n = 1 << 22
	buf := e.gpu.Alloc(n)
	e.ok("fill", e.gpu.Fill(buf, 3))
	e.ok("after", other.After(e.gpu))
	dst := other.Alloc(n)
	e.ok("copy", other.Copy(dst, buf))
	got := make([]float32, n)
	e.ok("download", other.Download(got, dst))
	if i := slices.IndexFunc(got, func(v float32) bool { return v != 3 }); i >= 0 {
		t.Fatalf("value %d is %g after After, want 3", i, got[i])
	}
}

func TestCUDAClosedBackendRefuses(t *testing.T) {
	b := cudaOrSkip(t)
	buf := b.Alloc(4)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Fill(buf, 1); !errors.Is(err, ErrClosedBackend) {
		t.Fatalf("Fill after Close: %v, want ErrClosedBackend", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCUDADeviceBufferViews runs everywhere: views share the allocation, keep
// their offset, and refuse bounds outside the view as slicing does.
func TestCUDADeviceBufferViews(t *testing.T) {
	base := DeviceBuffer{mem: &deviceMem{alloc: &deviceAlloc{}}, n: 10}
	v := base.Slice(2, 9).(DeviceBuffer)
	w := v.Slice(1, 4).(DeviceBuffer)
	if v.Len() != 7 || w.Len() != 3 || w.off != 3 || w.mem != base.mem {
		t.Fatalf("views: v=%+v w=%+v", v, w)
	}
	if e := base.Slice(10, 10).Len(); e != 0 {
		t.Fatalf("empty view at the end has %d floats", e)
	}
	for _, b := range [][2]int{{-1, 2}, {3, 2}, {0, 11}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Slice(%d, %d) of 10 floats did not panic", b[0], b[1])
				}
			}()
			base.Slice(b[0], b[1])
		}()
	}
	var b CUDA
	bad := b.Alloc(-1).(DeviceBuffer)
	if !errors.Is(bad.Err(), ErrArg) {
		t.Fatalf("Alloc(-1).Err() = %v, want ErrArg", bad.Err())
	}
	if _, err := b.dev("op", bad, -1); !errors.Is(err, ErrArg) {
		t.Fatalf("using a failed allocation: %v, want its error", err)
	}
	if _, err := b.dev("op", HostBuffer{1}, 1); !errors.Is(err, ErrArg) {
		t.Fatalf("a CPU buffer given to the CUDA backend: %v, want ErrArg", err)
	}
}

// TestCUDAStatusErrors runs everywhere: kernel statuses map to the Backend's
// sentinel errors, and runtime codes to CUDAError with their names.
func TestCUDAStatusErrors(t *testing.T) {
	if err := cudaStatus("op", 0); err != nil {
		t.Fatalf("HPS_OK gave %v", err)
	}
	if err := cudaStatus("op", -1); !errors.Is(err, ErrArg) {
		t.Fatalf("HPS_EINVAL gave %v", err)
	}
	if err := cudaStatus("op", -2); !errors.Is(err, ErrRange) {
		t.Fatalf("HPS_ERANGE gave %v", err)
	}
	oom := cudaStatus("alloc", 2) // cudaErrorMemoryAllocation
	var ce *CUDAError
	if !errors.As(oom, &ce) || !errors.Is(oom, ErrDeviceMemory) || ce.Name != "cudaErrorMemoryAllocation" {
		t.Fatalf("cudaErrorMemoryAllocation gave %#v", oom)
	}
	if err := cudaStatus("init", 100); !errors.Is(err, ErrNoGPU) { // cudaErrorNoDevice
		t.Fatalf("cudaErrorNoDevice gave %v", err)
	}
	blas := cudaStatus("gemm", 100000+13) // CUBLAS_STATUS_EXECUTION_FAILED
	if !errors.As(blas, &ce) || ce.Name != "CUBLAS_STATUS_EXECUTION_FAILED" {
		t.Fatalf("cuBLAS status gave %v", blas)
	}
	if err := cudaStatus("gemm", -10); !strings.Contains(err.Error(), "libcublas") {
		t.Fatalf("HPS_CUDA_ENOBLAS gave %v", err)
	}
}

// TestCUDAFailedCallDoesNotFailTheNextLaunch: a failed runtime call (here
// an allocation larger than any GPU) leaves the error as the thread's last
// one, which the next launch on that thread used to report as its own.
func TestCUDAFailedCallDoesNotFailTheNextLaunch(t *testing.T) {
	runtime.LockOSThread() // the last error is per thread: keep every call on this one
	defer runtime.UnlockOSThread()
	e := newCUDAEnv(t, 5)
	huge := e.gpu.Alloc(1 << 40) // 4 TiB
	if err := huge.(DeviceBuffer).Err(); !errors.Is(err, ErrDeviceMemory) {
		t.Fatalf("a 4 TiB allocation: %v, want ErrDeviceMemory", err)
	}
	buf := e.gpu.Alloc(16)
	e.ok("fill after a failed allocation", e.gpu.Fill(buf, 1))
	e.near("fill", e.get(buf), slices.Repeat([]float32{1}, 16), 0, 0)
}

// TestCUDAReductionsAreDeterministic: the column sums of dbias and the loss
// sums come out bit-identical run after run.
func TestCUDAReductionsAreDeterministic(t *testing.T) {
	e := newCUDAEnv(t, 18)
	const rows, cols = 5000, 37
	y, _ := e.rand(rows*cols, 0, 1, 0)
	dy, _ := e.rand(rows*cols, -1, 1, 0)
	dx, db := e.gpu.Alloc(rows*cols), e.gpu.Alloc(cols)
	var first []float32
	for range 3 {
		e.ok("bwd", e.gpu.BiasActBackward(Sigmoid, rows, cols, y, dy, dx, db))
		got := e.get(db)
		if first == nil {
			first = got
		} else if !slices.Equal(got, first) {
			t.Fatalf("dbias changed between runs: %v then %v", first[:4], got[:4])
		}
	}
	labels := make([]int64, rows)
	var loss float64
	for i := range 3 {
		l, err := e.gpu.SoftmaxCrossEntropy(rows, cols, dy, labels, 1, nil)
		e.ok("xent", err)
		if i > 0 && math.Float64bits(l) != math.Float64bits(loss) {
			t.Fatalf("loss changed between runs: %v then %v", loss, l)
		}
		loss = l
	}
}
