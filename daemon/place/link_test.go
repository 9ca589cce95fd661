package place

import (
	"math"
	"testing"
)

// TestMeasureLinkTimesAHandOffAndACopy: both figures are positive and
// finite, and a hand-off between cores is not free.
func TestMeasureLinkTimesAHandOffAndACopy(t *testing.T) {
	l, err := MeasureLink(t.Context(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if !(l.Latency > 1e-8 && l.Latency < 1) || !(l.Bandwidth > 1e6 && !math.IsInf(l.Bandwidth, 0)) {
		t.Errorf("link %g s + %g B/s", l.Latency, l.Bandwidth)
	}
}

// TestTheMeasuredLinkJoinsOnlyLocalDevices: with a measured link, a
// transfer between two local devices takes its latency and bandwidth; one
// to or from another device keeps the devices' own figures.
func TestTheMeasuredLinkJoinsOnlyLocalDevices(t *testing.T) {
	a, b, gpu := testDevice("core0", 1e10, 1<<30, 1e9), testDevice("core1", 1e10, 1<<30, 1e9), testDevice("gpu", 1e12, 1<<30, 1e9)
	a.Local, b.Local = true, true
	s := newSim(t, chain([]float64{1e6, 1e6}, 4e6), a, b, gpu)
	fileFigures := s.transfer(4e6, 0, 1)
	s.UseMeasured(&Measured{Seconds: []float64{math.NaN(), math.NaN()}, Link: &Link{Latency: 2e-5, Bandwidth: 2e10}})
	if got, want := s.transfer(4e6, 0, 1), 2e-5+4e6/2e10; math.Abs(got-want) > 1e-12 {
		t.Errorf("core0 -> core1: %g s, want the measured link's %g s", got, want)
	}
	for _, pair := range [][2]int{{0, 2}, {2, 1}} {
		if got := s.transfer(4e6, pair[0], pair[1]); got != fileFigures {
			t.Errorf("%d -> %d: %g s, want the devices' own %g s", pair[0], pair[1], got, fileFigures)
		}
	}
}

// TestMeasureLocalFallsBackToKernelsAlone: a graph with an op that cannot
// run here (a softmax has no kernel) is measured op by op; one whose ops
// all run is measured inside a step; both measure the link.
func TestMeasureLocalFallsBackToKernelsAlone(t *testing.T) {
	g := loadGraph(t, "mlp-digits", 16)
	m, err := MeasureLocal(t.Context(), g, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.How != MeasuredInStep || m.Link == nil {
		t.Errorf("mlp-digits: measured %s, link %v; want in-step and a link", m.How, m.Link)
	}
	g.Ops = append(g.Ops, Op{Name: "softmax", Kind: KindSoftmax, Dims: [3]int{16, 10, 0}, Inputs: []int{len(g.Ops) - 1}, Group: 0})
	if m, err = MeasureLocal(t.Context(), g, 1, 1); err != nil {
		t.Fatal(err)
	}
	if m.How != MeasuredAlone || m.Link == nil || !math.IsNaN(m.Seconds[len(g.Ops)-1]) {
		t.Errorf("with a softmax: measured %s, link %v, softmax %g s; want alone, a link, and no time for the softmax", m.How, m.Link, m.Seconds[len(g.Ops)-1])
	}
}

// TestALocalCopyKeepsTheProducerBusy: between two local devices with a
// measured link the producer's core makes the copy (as Execute does), so
// its next op starts after the copy; the consumer has the output the
// link's latency after the copy ends.
func TestALocalCopyKeepsTheProducerBusy(t *testing.T) {
	a, b := testDevice("core0", 1e12, 1<<30, 1e9), testDevice("core1", 1e12, 1<<30, 1e9)
	a.Local, b.Local = true, true
	g := &Graph{Name: "fork", Groups: []string{"p", "local", "remote"}, Ops: []Op{
		{Name: "p", Kind: KindMatMul, FLOPs: 1e9, Out: 4e6},
		{Name: "local", Kind: KindMatMul, FLOPs: 3e9, Inputs: []int{0}, Group: 1},
		{Name: "remote", Kind: KindMatMul, FLOPs: 1e9, Inputs: []int{0}, Group: 2}}}
	s := newSim(t, g, a, b)
	s.UseMeasured(&Measured{Seconds: []float64{math.NaN(), math.NaN(), math.NaN()}, Link: &Link{Latency: 1e-3, Bandwidth: 2e9}})
	// p 1 ms, its copy 2 ms on core0, then local 3 ms: 6 ms; remote starts
	// at 1 + 2 + 1 (latency) ms and ends at 5 ms.
	if r := run(t, s, []int{0, 0, 1}); math.Abs(r.Step-6e-3) > 1e-9 {
		t.Errorf("step %g s, want 6 ms", r.Step)
	}
}
