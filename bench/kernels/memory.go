package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/heterps/heterps/native"
)

// memOp is a memory-bound kernel over n floats and the bytes it moves.
type memOp struct {
	name  string
	bytes func(n int) float64
	run   func(b *native.CPU, n int) func()
}

// memoryBound times pointwise and optimiser kernels on 32 MiB arrays
// against memcpy of one array (reads 32 MiB, writes 32 MiB) in the same
// run, per ISA, and reports each ISA's speed-up over scalar.
func memoryBound() {
	const n = 32 << 20 / 4
	rng := rand.New(rand.NewPCG(3, 4))
	x, y, g := randBuf(rng, n, -4, 4), randBuf(rng, n, -1, 1), randBuf(rng, n, -1, 1)
	m1, m2, out := randBuf(rng, n, 0, 0.1), randBuf(rng, n, 0, 0.1), make(native.HostBuffer, n)
	labels := randBuf(rng, n, 0, 1)
	f32 := func(k int) func(int) float64 { return func(n int) float64 { return float64(k * 4 * n) } }
	adam := native.Optim{Kind: native.Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 10}
	adagrad := native.Optim{Kind: native.Adagrad, LR: 1e-2, Eps: 1e-8}
	sgd := native.Optim{Kind: native.SGD, LR: 1e-2, Momentum: 0.9}
	ops := []memOp{
		{"bias+relu fwd", f32(2), func(b *native.CPU, n int) func() {
			return func() { must(b.BiasAct(native.ReLU, n/1024, 1024, x, y[:1024], out)) }
		}},
		{"bias+sigmoid fwd", f32(2), func(b *native.CPU, n int) func() {
			return func() { must(b.BiasAct(native.Sigmoid, n/1024, 1024, x, y[:1024], out)) }
		}},
		{"tanh bwd", f32(3), func(b *native.CPU, n int) func() {
			return func() { must(b.BiasActBackward(native.Tanh, n/1024, 1024, y, g, out, nil)) }
		}},
		{"bce-logits bwd", f32(3), func(b *native.CPU, n int) func() {
			return func() { must(b.BCEWithLogitsBackward(n, x, labels, 1, out)) }
		}},
		{"weighted sum K=4", f32(5), func(b *native.CPU, n int) func() {
			return func() { must(b.WeightedSum(out, []float32{0.1, 0.2, 0.3, 0.4}, []native.Buffer{x, y, g, m1})) }
		}},
		{"sgd momentum", f32(5), func(b *native.CPU, n int) func() {
			return func() { must(b.Update(sgd, out, g, m1)) }
		}},
		{"adagrad", f32(5), func(b *native.CPU, n int) func() {
			return func() { must(b.Update(adagrad, out, g, m1)) }
		}},
		{"adam", f32(7), func(b *native.CPU, n int) func() {
			return func() { must(b.Update(adam, out, g, m1, m2)) }
		}},
	}
	fmt.Fprintf(output, "Memory-bound kernels on 32 MiB arrays vs memcpy of 32 MiB in the same run (%d threads)\n", *threads)
	w := table()
	fmt.Fprintln(w, "op\tISA\tms\tGB/s\tmemcpy GB/s\tof memcpy\tvs scalar\t")
	for _, op := range ops {
		var scalarT float64
		for _, isa := range native.SupportedISAs() {
			b := backend(isa)
			copyT := measure(func() { must(b.Copy(out, x)) })
			t := measure(op.run(b, n))
			if isa == native.Scalar {
				scalarT = t
			}
			gbs, copyGBs := op.bytes(n)/t/1e9, 2*4*float64(n)/copyT/1e9
			fmt.Fprintf(w, "%s\t%s\t%.2f\t%.1f\t%.1f\t%.0f%%\t%.2fx\t\n", op.name, isa, t*1e3, gbs, copyGBs, 100*gbs/copyGBs, scalarT/t)
		}
	}
	w.Flush()
	fmt.Fprintln(output, "targets: >= 60% of memcpy bandwidth; avx512 >= 1.5x scalar")
	fmt.Fprintln(output)
}
