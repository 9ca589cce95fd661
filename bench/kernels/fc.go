package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/heterps/heterps/native"
)

// fcLayer times an FC layer's forward and backward (GEMM, bias+ReLU, the
// fused backward with the bias gradient, and the two backward GEMMs)
// against its three raw sgemm calls alone.
func fcLayer() {
	fmt.Fprintln(output, "FC layer forward+backward (bias+ReLU, 3 GEMMs) vs its raw OpenBLAS sgemm calls, batch 512")
	w := table()
	fmt.Fprintln(w, "shape\tISA\tlayer ms\tsgemm ms\tlayer/sgemm\tGFLOP/s\t")
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][3]int{{512, 247, 512}, {512, 512, 256}} {
		rows, in, out := s[0], s[1], s[2]
		x, wt := randBuf(rng, rows*in, -1, 1), randBuf(rng, in*out, -0.1, 0.1)
		bias, dy := randBuf(rng, out, -0.1, 0.1), randBuf(rng, rows*out, -1, 1)
		y, dz, dx := make(native.HostBuffer, rows*out), make(native.HostBuffer, rows*out), make(native.HostBuffer, rows*in)
		dw, db := make(native.HostBuffer, in*out), make(native.HostBuffer, out)
		for _, isa := range native.SupportedISAs() {
			b := backend(isa)
			gemms := func() {
				must(b.Gemm(false, false, rows, out, in, 1, x, in, wt, out, 0, y, out))
				must(b.Gemm(true, false, in, out, rows, 1, x, in, dz, out, 0, dw, out))
				must(b.Gemm(false, true, rows, in, out, 1, dz, out, wt, out, 0, dx, in))
			}
			layer := func() {
				must(b.Gemm(false, false, rows, out, in, 1, x, in, wt, out, 0, y, out))
				must(b.BiasAct(native.ReLU, rows, out, y, bias, y))
				must(b.BiasActBackward(native.ReLU, rows, out, y, dy, dz, db))
				must(b.Gemm(true, false, in, out, rows, 1, x, in, dz, out, 0, dw, out))
				must(b.Gemm(false, true, rows, in, out, 1, dz, out, wt, out, 0, dx, in))
			}
			tl, tg := measure(layer), measure(gemms)
			flops := 3 * 2 * float64(rows*in*out)
			fmt.Fprintf(w, "[%dx%d]x[%dx%d]\t%s\t%.3f\t%.3f\t%.3f\t%.1f\t\n", rows, in, in, out, isa, tl*1e3, tg*1e3, tl/tg, flops/tl/1e9)
		}
	}
	w.Flush()
	fmt.Fprintln(output, "target: layer/sgemm <= 1.15")
	fmt.Fprintln(output)
}
