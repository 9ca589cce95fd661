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
