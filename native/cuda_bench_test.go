//go:build cuda

package native

import (
	"fmt"
	"testing"
)

// Per-op GPU benchmarks. Each reports the bytes its op must move (reads plus
// writes of the tensors, counted once) per second as GB/s, or FLOP/s for
// GEMM; bench/gpu/run.sh sets them beside the device-to-device copy
// (BenchmarkCUDACopy, the bandwidth ceiling) and cuBLAS SGEMM of the same
// run. The clock covers b.N queued ops and the final Sync, so launch costs
// and the host-side work of each call (validation, index uploads) count.

const benchN = 1 << 26 // 64 Mi floats: 256 MiB per tensor, far past the L2

func benchCUDA(b *testing.B) *CUDA { return cudaOrSkip(b) }

// gpuRand returns n random floats on the device.
func gpuRand(b *testing.B, g *CUDA, n int, lo, hi float32, seed uint64) Buffer {
	buf := gpuZeros(b, g, n)
	if err := g.Upload(buf, randFloats(newRNG(seed), n, lo, hi)); err != nil {
		b.Fatal(err)
	}
	return buf
}

// gpuZeros returns n zeroed floats on the device, freed when the benchmark
// ends (device memory must not wait for the Go garbage collector, which does
// not see it).
func gpuZeros(b *testing.B, g *CUDA, n int) Buffer {
	buf := g.Alloc(n)
	if err := buf.(DeviceBuffer).Err(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Free(buf) })
	return buf
}

// timed runs op b.N times, waits for the GPU, and reports bytes per op as GB/s.
func timed(b *testing.B, g *CUDA, bytes float64, op func() error) {
	b.Helper()
	if err := op(); err != nil { // warm-up: first-use costs stay out of the clock
		b.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	if err := g.Sync(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if bytes > 0 {
		b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	}
}

func BenchmarkCUDACopy(b *testing.B) {
	g := benchCUDA(b)
	src, dst := gpuRand(b, g, benchN, -1, 1, 1), gpuZeros(b, g, benchN)
	timed(b, g, 2*4*benchN, func() error { return g.Copy(dst, src) })
}

func BenchmarkCUDAFill(b *testing.B) {
	g := benchCUDA(b)
	dst := gpuZeros(b, g, benchN)
	timed(b, g, 4*benchN, func() error { return g.Fill(dst, 1) })
}

func BenchmarkCUDABiasAct(b *testing.B) {
	g := benchCUDA(b)
	const cols = 1024
	x, bias, y := gpuRand(b, g, benchN, -1, 1, 2), gpuRand(b, g, cols, -1, 1, 3), gpuZeros(b, g, benchN)
	timed(b, g, 2*4*benchN, func() error { return g.BiasAct(ReLU, benchN/cols, cols, x, bias, y) })
}

func BenchmarkCUDABiasActBackward(b *testing.B) {
	g := benchCUDA(b)
	const cols = 1024
	y, dy := gpuRand(b, g, benchN, 0, 1, 4), gpuRand(b, g, benchN, -1, 1, 5)
	dx, dbias := gpuZeros(b, g, benchN), gpuZeros(b, g, cols)
	timed(b, g, 3*4*benchN, func() error { return g.BiasActBackward(Sigmoid, benchN/cols, cols, y, dy, dx, dbias) })
}

func BenchmarkCUDAWeightedSum(b *testing.B) {
	g := benchCUDA(b)
	const k = 4
	in := make([]Buffer, k)
	for i := range in {
		in[i] = gpuRand(b, g, benchN/2, -1, 1, uint64(10+i))
	}
	out, w := gpuZeros(b, g, benchN/2), []float32{0.1, 0.2, 0.3, 0.4}
	timed(b, g, (k+1)*4*benchN/2, func() error { return g.WeightedSum(out, w, in) })
}

func BenchmarkCUDAAdam(b *testing.B) {
	g := benchCUDA(b)
	n := benchN / 2
	w, grad := gpuRand(b, g, n, -1, 1, 20), gpuRand(b, g, n, -1, 1, 21)
	m, v := gpuZeros(b, g, n), gpuZeros(b, g, n)
	o := Optim{Kind: Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
	timed(b, g, 7*4*float64(n), func() error { return g.Update(o, w, grad, m, v) })
}

func BenchmarkCUDAAdagradRows(b *testing.B) {
	g := benchCUDA(b)
	const tableRows, dim, nrows = 1 << 22, 16, 1 << 16
	table, acc := gpuRand(b, g, tableRows*dim, -1, 1, 30), gpuZeros(b, g, tableRows*dim)
	grad := gpuRand(b, g, nrows*dim, -1, 1, 31)
	rows := make([]int64, nrows)
	for i, r := range newRNG(32).Perm(tableRows)[:nrows] {
		rows[i] = int64(r)
	}
	o := Optim{Kind: Adagrad, LR: 0.01, Eps: 1e-8}
	// w and the accumulator read and written, the gradient read, the row ids uploaded.
	timed(b, g, float64(nrows*(5*4*dim+8)), func() error { return g.UpdateRows(o, table, tableRows, dim, rows, grad, acc) })
}

// ctrBags is a CTR batch: 4096 samples x 26 slots, one to three ids each,
// over a table of 4 Mi rows (Criteo-like).
func ctrBags() (offsets, ids []int64) {
	const batch, slots, tableRows = 4096, 26, 1 << 22
	rng := newRNG(40)
	offsets = make([]int64, 1, batch*slots+1)
	for range batch * slots {
		for range 1 + rng.IntN(3) {
			ids = append(ids, int64(rng.IntN(tableRows)))
		}
		offsets = append(offsets, int64(len(ids)))
	}
	return offsets, ids
}

func BenchmarkCUDAEmbeddingBag(b *testing.B) {
	for _, dim := range []int{16, 64} {
		b.Run(fmt.Sprintf("dim=%d", dim), func(b *testing.B) {
			g := benchCUDA(b)
			const tableRows = 1 << 22
			offsets, ids := ctrBags()
			nbags := len(offsets) - 1
			table, out := gpuRand(b, g, tableRows*dim, -1, 1, 41), gpuZeros(b, g, nbags*dim)
			bytes := float64(len(ids)*(4*dim+8) + 4*nbags*dim + 8*len(offsets))
			timed(b, g, bytes, func() error { return g.EmbeddingBag(PoolSum, table, tableRows, dim, offsets, ids, out) })
		})
	}
}

func BenchmarkCUDAEmbeddingBagBackward(b *testing.B) {
	for _, dim := range []int{16, 64} {
		b.Run(fmt.Sprintf("dim=%d", dim), func(b *testing.B) {
			g := benchCUDA(b)
			offsets, ids := ctrBags()
			nbags := len(offsets) - 1
			dout := gpuRand(b, g, nbags*dim, -1, 1, 42)
			// dout read once per id, one gradient row written per id (upper
			// bound: duplicates are few at this table size), ids uploaded.
			bytes := float64(len(ids)*(8*dim+8) + 8*len(offsets))
			timed(b, g, bytes, func() error {
				_, err := g.EmbeddingBagBackward(PoolSum, dim, offsets, ids, dout)
				return err
			})
		})
	}
}

func BenchmarkCUDASoftmax(b *testing.B) {
	g := benchCUDA(b)
	const cols = 1000
	rows := benchN / cols
	x, y := gpuRand(b, g, rows*cols, -5, 5, 50), gpuZeros(b, g, rows*cols)
	timed(b, g, 2*4*float64(rows*cols), func() error { return g.Softmax(rows, cols, x, y, false) })
}

func BenchmarkCUDASoftmaxCrossEntropy(b *testing.B) {
	g := benchCUDA(b)
	const cols = 1000
	rows := benchN / cols
	x, dx := gpuRand(b, g, rows*cols, -5, 5, 51), gpuZeros(b, g, rows*cols)
	labels := make([]int64, rows)
	for i := range labels {
		labels[i] = int64(i % cols)
	}
	timed(b, g, 2*4*float64(rows*cols)+8*float64(rows), func() error {
		_, err := g.SoftmaxCrossEntropy(rows, cols, x, labels, 1, dx)
		return err
	})
}

func BenchmarkCUDABCEWithLogits(b *testing.B) {
	g := benchCUDA(b)
	x, y := gpuRand(b, g, benchN, -5, 5, 60), gpuRand(b, g, benchN, 0, 1, 61)
	timed(b, g, 2*4*benchN, func() error {
		_, err := g.BCEWithLogits(benchN, x, y)
		return err
	})
}

func BenchmarkCUDABCEWithLogitsBackward(b *testing.B) {
	g := benchCUDA(b)
	x, y, dx := gpuRand(b, g, benchN, -5, 5, 62), gpuRand(b, g, benchN, 0, 1, 63), gpuZeros(b, g, benchN)
	timed(b, g, 3*4*benchN, func() error { return g.BCEWithLogitsBackward(benchN, x, y, 1, dx) })
}

func BenchmarkCUDALSTMForward(b *testing.B) {
	g := benchCUDA(b)
	const batch, hidden = 8192, 1024
	n := batch * hidden
	z, cPrev := gpuRand(b, g, 4*n, -2, 2, 70), gpuRand(b, g, n, -1, 1, 71)
	gates, c, h := gpuZeros(b, g, 4*n), gpuZeros(b, g, n), gpuZeros(b, g, n)
	timed(b, g, 11*4*float64(n), func() error { return g.LSTMForward(batch, hidden, z, nil, cPrev, gates, c, h) })
}

func BenchmarkCUDALSTMBackward(b *testing.B) {
	g := benchCUDA(b)
	const batch, hidden = 8192, 1024
	n := batch * hidden
	gates, cPrev, c := gpuRand(b, g, 4*n, 0, 1, 72), gpuRand(b, g, n, -1, 1, 73), gpuRand(b, g, n, -1, 1, 74)
	dh, dc := gpuRand(b, g, n, -1, 1, 75), gpuRand(b, g, n, -1, 1, 76)
	dz, dcPrev := gpuZeros(b, g, 4*n), gpuZeros(b, g, n)
	timed(b, g, 13*4*float64(n), func() error { return g.LSTMBackward(batch, hidden, gates, cPrev, c, dh, dc, dz, dcPrev) })
}

// BenchmarkCUDAGemm reports TFLOP/s of cuBLAS SGEMM through the backend: the
// square case is the FP32 ceiling the other figures are set against; the
// others are ctrdnn's layer shapes (batch x out x in) and TF32.
func BenchmarkCUDAGemm(b *testing.B) {
	cases := []struct {
		m, n, k int
		tf32    bool
	}{
		{4096, 4096, 4096, false},
		{4096, 4096, 4096, true},
		{4096, 512, 1024, false},
		{4096, 256, 512, false},
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("%dx%dx%d/tf32=%v", c.m, c.n, c.k, c.tf32), func(b *testing.B) {
			g, err := NewCUDA(CUDAOptions{TF32: c.tf32})
			if err != nil {
				b.Skipf("no CUDA device: %v", err)
			}
			defer g.Close()
			x, w, y := gpuRand(b, g, c.m*c.k, -1, 1, 80), gpuRand(b, g, c.k*c.n, -1, 1, 81), gpuZeros(b, g, c.m*c.n)
			op := func() error { return g.Gemm(false, false, c.m, c.n, c.k, 1, x, c.k, w, c.n, 0, y, c.n) }
			timed(b, g, 0, op)
			b.ReportMetric(2*float64(c.m)*float64(c.n)*float64(c.k)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
		})
	}
}
