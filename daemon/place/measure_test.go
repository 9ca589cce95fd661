package place

import (
	"math"
	"testing"

	"github.com/heterps/heterps/native"
)

// TestMeasureTimesTheKernelsOfAModel: every op of mlp-digits, ctrdnn-like,
// nce and matchnet steps but the input gets a measured time (the host loops
// of the similarity and NCE layers included), and only the local device's
// simulated times take it.
func TestMeasureTimesTheKernelsOfAModel(t *testing.T) {
	be, err := native.NewCPU(native.CPUOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"mlp-digits", "2emb", "nce", "matchnet"} {
		g := loadGraph(t, model, 32)
		m, err := Measure(t.Context(), g, be, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, op := range g.Ops {
			unmeasured := op.Kind == KindInput
			if got := m.Seconds[i]; unmeasured != math.IsNaN(got) || (!unmeasured && !(got > 0)) {
				t.Errorf("%s: op %s (%s): measured %g s", model, op.Name, op.Kind, got)
			}
		}
		local, remote := testDevice("local", 1e9, 1<<40, 1e10), testDevice("remote", 1e9, 1<<40, 1e10)
		local.Local = true
		s := newSim(t, g, local, remote)
		s.UseMeasured(m)
		for i := range g.Ops {
			if !math.IsNaN(m.Seconds[i]) && (s.Time(i, 0) != m.Seconds[i] || s.Time(i, 1) != Roofline(g.Ops[i], remote)) {
				t.Errorf("%s: op %d: local %g s remote %g s, measured %g s", model, i, s.Time(i, 0), s.Time(i, 1), m.Seconds[i])
			}
		}
	}
}

// TestLSTMKernelsAreMeasured: the NMT-like graph's cells time the native
// LSTM kernels.
func TestLSTMKernelsAreMeasured(t *testing.T) {
	be, err := native.NewCPU(native.CPUOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NMTGraph(NMTConfig{Batch: 4, Hidden: 8, Vocab: 50, Layers: 1, Steps: 2, Chunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Measure(t.Context(), g, be, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, op := range g.Ops {
		if (op.Kind == KindLSTM || op.Kind == KindLSTMGrad) && !(m.Seconds[i] > 0) {
			t.Errorf("%s: %g", op.Name, m.Seconds[i])
		}
	}
}

// TestMeasureInStepTimesEveryOpInsideAStep: every op but the input gets
// the time it took inside a step executed on one device.
func TestMeasureInStepTimesEveryOpInsideAStep(t *testing.T) {
	g := loadGraph(t, "2emb", 32)
	m, err := MeasureInStep(t.Context(), g, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, op := range g.Ops {
		if got := m.Seconds[i]; (op.Kind == KindInput) != math.IsNaN(got) || (op.Kind != KindInput && !(got > 0)) {
			t.Errorf("op %s (%s): %g s", op.Name, op.Kind, got)
		}
	}
	if m.Measured != len(g.Ops)-1 {
		t.Errorf("%d of %d ops measured", m.Measured, len(g.Ops))
	}
}

// TestCalibrateAddsUpToTheFastestStep: per-op minima from different steps
// are scaled and given their share of the hand-offs so that they add up
// to the fastest step; the input keeps no time.
func TestCalibrateAddsUpToTheFastestStep(t *testing.T) {
	for _, c := range []struct {
		step, overhead float64
		want           []float64
	}{
		{5, 1, []float64{1.5, 3.5}}, // minima already add up to the step's kernels
		{9, 1, []float64{2.5, 6.5}}, // the fastest step was twice as slow as its ops' minima
	} {
		m := &Measured{Seconds: []float64{math.NaN(), 1, 3}, Measured: 2}
		calibrate(m, &Executed{Step: c.step, Overhead: c.overhead})
		if !math.IsNaN(m.Seconds[0]) || m.Seconds[1] != c.want[0] || m.Seconds[2] != c.want[1] {
			t.Errorf("step %g, overhead %g: %v, want [NaN %v]", c.step, c.overhead, m.Seconds, c.want)
		}
	}
}

// TestUseMeasuredTakesEachDevicesOwnTimes: with times per device, each
// local device gets its own; devices without any keep the shared ones.
func TestUseMeasuredTakesEachDevicesOwnTimes(t *testing.T) {
	g := chain([]float64{1e6, 1e6}, 8)
	a, b, c := testDevice("core0", 1e10, 1<<30, 1e9), testDevice("core1", 1e10, 1<<30, 1e9), testDevice("core2", 1e10, 1<<30, 1e9)
	a.Local, b.Local, c.Local = true, true, true
	s := newSim(t, g, a, b, c)
	s.UseMeasured(&Measured{Seconds: []float64{1, 2}, ByDevice: [][]float64{{3, 4}, nil}})
	for _, want := range []struct {
		dev  int
		secs [2]float64
	}{{0, [2]float64{3, 4}}, {1, [2]float64{1, 2}}, {2, [2]float64{1, 2}}} {
		if got := [2]float64{s.Time(0, want.dev), s.Time(1, want.dev)}; got != want.secs {
			t.Errorf("device %d: %v, want %v", want.dev, got, want.secs)
		}
	}
}

// TestHasKernelAgreesWithKernelOf: the two lists of kinds with a kernel
// (hasKernel's, which MeasureLocal decides by, and kernelOf's switch) give
// every kind but the input and the softmax a kernel, small enough to run.
func TestHasKernelAgreesWithKernelOf(t *testing.T) {
	be, err := native.NewCPU(native.CPUOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range Kinds {
		op := Op{Name: kind, Kind: kind, Dims: [3]int{4, 4, 2}}
		run, err := kernelOf(be, op)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		want := kind != KindInput && kind != KindSoftmax
		if hasKernel(op) != want || (run != nil) != want {
			t.Errorf("%s: hasKernel %t, kernelOf gives a kernel: %t; want %t", kind, hasKernel(op), run != nil, want)
		}
	}
}
