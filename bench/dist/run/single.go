package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/internal/cpuset"
	"github.com/heterps/heterps/native"
)

// Targets of issue 15 for one process.
const (
	targetOfLimit = 0.70 // heterps train against its GEMM-bound limit, at every thread count
	targetScaling = 1.7  // 2 threads against 1
)

// singleBlock prints single-process training at 1 and 2 threads (best of
// singleRuns each), the process on as many CPUs as threads (onCPUs), beside
// the GEMM-bound limit at the same thread count
// and batch: the model's own GEMMs (those one training step issues,
// recorded from a step) run alone, back to back, through native.CPU, for
// as many steps as the training run and timed as a whole, in samples/s
// (best of singleRuns) — measured as the training is, so that the host's
// slow spells weigh on both alike. The fastest single pass is printed
// beside it as the peak. It returns the faster thread count: the
// distributed runs' reference trains with as many (nodeArms).
func singleBlock(ctx context.Context, model *config.Model, batch, steps int, w io.Writer) (int, error) {
	calls, err := recordGemms(model, batch)
	if err != nil {
		return 0, fmt.Errorf("recording the model's GEMMs: %w", err)
	}
	rates := map[int]float64{}
	limits, peaks := map[int]float64{}, map[int]float64{}
	// The best of a few, the thread counts interleaved: the reference must
	// not be a slow outlier of this noisy machine, and both thread counts
	// should see the same load.
	for range singleRuns {
		for _, threads := range []int{1, 2} {
			restore := onCPUs(threads)
			r, err := singleProcess(ctx, model, threads, batch, steps)
			if err != nil {
				restore()
				return 0, fmt.Errorf("single process, %d threads: %w", threads, err)
			}
			rates[threads] = max(rates[threads], r)
			l, err := gemmBound(calls, threads, batch, steps)
			restore()
			if err != nil {
				return 0, fmt.Errorf("GEMM-bound limit, %d threads: %w", threads, err)
			}
			limits[threads] = max(limits[threads], l.sustained)
			peaks[threads] = max(peaks[threads], l.peak)
		}
	}
	for _, threads := range []int{1, 2} {
		fmt.Fprintf(w, "single process (nn.Trainer), %d thread(s): %8.0f samples/s (best of %d); GEMM-bound limit %8.0f samples/s (its %d GEMMs a step alone for %d steps; fastest step %.0f); %.2f of the limit (target %.2f), %.2f of the fastest step\n",
			threads, rates[threads], singleRuns, limits[threads], len(calls), steps, peaks[threads],
			rates[threads]/limits[threads], targetOfLimit, rates[threads]/peaks[threads])
	}
	fmt.Fprintf(w, "single process, 2 threads against 1: %.2fx (target %.1fx); the GEMM-bound limit scales %.2fx\n",
		rates[2]/rates[1], targetScaling, limits[2]/limits[1])
	if err := phasesBlock(model, batch, w); err != nil {
		return 0, err
	}
	if rates[1] > rates[2] {
		return 1, nil
	}
	return 2, nil
}

// gemmCall is one Gemm a training step issues, without its operands.
type gemmCall struct {
	transA, transB bool
	m, n, k        int
	lda, ldb, ldc  int
	beta           float32
}

// gemmRecorder is a CPU backend that notes every Gemm it runs.
type gemmRecorder struct {
	*native.CPU
	calls []gemmCall
}

func (r *gemmRecorder) Gemm(transA, transB bool, m, n, k int, alpha float32, a native.Buffer, lda int,
	b native.Buffer, ldb int, beta float32, c native.Buffer, ldc int) error {
	r.calls = append(r.calls, gemmCall{transA, transB, m, n, k, lda, ldb, ldc, beta})
	return r.CPU.Gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// recordGemms runs one training step of model on a batch of the bench's
// data and returns the GEMMs it issued, in order.
func recordGemms(model *config.Model, batch int) ([]gemmCall, error) {
	rec := &gemmRecorder{CPU: native.MustCPU().WithThreads(1)}
	tr, src, err := benchTrainer(rec, model, 1, 1)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	b, err := src.Next(context.Background(), batch)
	if err != nil {
		return nil, err
	}
	if _, err := tr.Step(b); err != nil {
		return nil, err
	}
	return rec.calls, nil
}

// gemmLimit is the GEMM-bound limit in samples/s: sustained over a run,
// and at the fastest step of it.
type gemmLimit struct{ sustained, peak float64 }

// gemmBound runs calls back to back through a CPU backend of threads
// threads, each on operands of its own, steps times, and returns batch
// over the mean and over the fastest pass, in samples/s.
func gemmBound(calls []gemmCall, threads, batch, steps int) (gemmLimit, error) {
	be, err := native.NewCPU(native.CPUOptions{Threads: threads, Pin: native.PinAuto})
	if err != nil {
		return gemmLimit{}, err
	}
	defer be.PinCaller()() // as the training it bounds runs
	type operands struct{ a, b, c native.Buffer }
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) native.Buffer {
		h := make(native.HostBuffer, n)
		for i := range h {
			h[i] = rng.Float32() - 0.5
		}
		return h
	}
	ops := make([]operands, len(calls))
	for i, c := range calls {
		aRows, bRows := c.m, c.k
		if c.transA {
			aRows = c.k
		}
		if c.transB {
			bRows = c.n
		}
		ops[i] = operands{random(aRows * c.lda), random(bRows * c.ldb), random(c.m * c.ldc)}
	}
	best := time.Duration(1<<63 - 1)
	run := time.Now()
	for range steps {
		start := time.Now()
		for i, c := range calls {
			o := ops[i]
			if err := be.Gemm(c.transA, c.transB, c.m, c.n, c.k, 1, o.a, c.lda, o.b, c.ldb, c.beta, o.c, c.ldc); err != nil {
				return gemmLimit{}, fmt.Errorf("GEMM %d (%+v): %w", i, c, err)
			}
		}
		best = min(best, time.Since(start))
	}
	mean := time.Since(run) / time.Duration(steps)
	return gemmLimit{sustained: float64(batch) / mean.Seconds(), peak: float64(batch) / best.Seconds()}, nil
}

// onCPUs runs this process on its first threads CPUs (all of them when it
// may use no more), as `taskset` would a t-thread heterps train, with as
// many Go processors: a 1-thread run's batch generator and garbage
// collector share its one core, as the 2-thread run's share its two. It
// returns what gives the process its CPUs back. Where the CPUs cannot be
// set (off Linux), only GOMAXPROCS is.
func onCPUs(threads int) (restore func()) {
	old := runtime.GOMAXPROCS(0)
	cpus, err := cpuset.Allowed()
	if err == nil && threads < len(cpus) {
		if back, err := cpuset.Restrict(cpus[:threads]); err == nil {
			return func() { _ = back() }
		}
	}
	runtime.GOMAXPROCS(threads)
	return func() { runtime.GOMAXPROCS(old) }
}
