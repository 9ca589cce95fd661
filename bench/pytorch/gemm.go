package main

import (
	"math/rand/v2"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/native"
)

// gemmLimit is the samples/s that raw sgemm alone allows: the FC layers'
// forward and backward GEMMs (3 per layer) at the benchmark's batch size,
// timed with t threads, against the FLOPs they do per sample.
func gemmLimit(cfg *config.Model, t int) (samplesPerS, gflops float64) {
	b, err := native.NewCPU(native.CPUOptions{Threads: t})
	check(err)
	rng := rand.New(rand.NewPCG(9, 9))
	type shape struct{ in, out int }
	var shapes []shape
	for _, s := range cfg.Shapes() {
		if s.Kind == "fc" {
			shapes = append(shapes, shape{s.In, s.Out})
		}
	}
	rows := *batch
	bufs := func(n int) native.HostBuffer {
		h := make(native.HostBuffer, n)
		for i := range h {
			h[i] = rng.Float32() - 0.5
		}
		return h
	}
	var flops float64
	type set struct{ x, w, y, dw, dx native.HostBuffer }
	sets := make([]set, len(shapes))
	for i, s := range shapes {
		sets[i] = set{bufs(rows * s.in), bufs(s.in * s.out), bufs(rows * s.out), bufs(s.in * s.out), bufs(rows * s.in)}
		flops += 3 * 2 * float64(rows*s.in*s.out)
	}
	pass := func() {
		for i, s := range shapes {
			z := sets[i]
			check(b.Gemm(false, false, rows, s.out, s.in, 1, z.x, s.in, z.w, s.out, 0, z.y, s.out))
			check(b.Gemm(true, false, s.in, s.out, rows, 1, z.x, s.in, z.y, s.out, 0, z.dw, s.out))
			check(b.Gemm(false, true, rows, s.in, s.out, 1, z.y, s.out, z.w, s.out, 0, z.dx, s.in))
		}
	}
	pass()
	best := 1e300
	for range 5 {
		start := time.Now()
		for range 20 {
			pass()
		}
		best = min(best, time.Since(start).Seconds()/20)
	}
	return float64(rows) / best, flops / best / 1e9
}
