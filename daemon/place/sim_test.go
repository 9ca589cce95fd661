package place

import (
	"math"
	"strings"
	"testing"
)

// TestChainOnOneDeviceTakesTheSumOfOpTimes: ops that depend on each other
// run one after another.
func TestChainOnOneDeviceTakesTheSumOfOpTimes(t *testing.T) {
	flops := []float64{3e9, 1e9, 7e9, 2e9, 5e9}
	dev := testDevice("d", 1e12, 1<<30, 1e10)
	s := newSim(t, chain(flops, 1<<20), dev)
	r := run(t, s, make([]int, len(flops)))
	var want float64
	for i := range flops {
		want += s.Time(i, 0)
	}
	if math.Abs(r.Step-want) > 1e-12 || math.Abs(want-18e-3) > 1e-9 {
		t.Errorf("step %g s, want the sum of op times %g s (18 ms)", r.Step, want)
	}
	if !r.Fits || r.Cost != r.Step || r.Moved != 0 {
		t.Errorf("%+v", r)
	}
}

// TestTransfersTakeLinkTime: a chain split over two devices pays each
// crossing's bytes at the slower link's bandwidth.
func TestTransfersTakeLinkTime(t *testing.T) {
	a, b := testDevice("a", 1e12, 1<<30, 1e10), testDevice("b", 1e12, 1<<30, 5e9)
	s := newSim(t, chain([]float64{1e9, 1e9, 1e9}, 5e7), a, b)
	r := run(t, s, []int{0, 1, 0})
	want := 3e-3 + 2*(5e7/5e9)
	if math.Abs(r.Step-want) > 1e-9 || r.Moved != 1e8 {
		t.Errorf("step %g s (want %g), moved %d bytes", r.Step, want, r.Moved)
	}
}

// TestIndependentOpsOverlapOnTwoDevices: two ops with no dependency run at
// the same time on two devices, and one after the other on one.
func TestIndependentOpsOverlapOnTwoDevices(t *testing.T) {
	g := &Graph{Name: "pair", Groups: []string{"a", "b"}, Ops: []Op{
		{Name: "a", Kind: KindMatMul, FLOPs: 4e9}, {Name: "b", Kind: KindMatMul, FLOPs: 4e9, Group: 1}}}
	d := testDevice("d", 1e12, 1<<30, 1e10)
	s := newSim(t, g, d, d)
	if one, two := run(t, s, []int{0, 0}).Step, run(t, s, []int{0, 1}).Step; math.Abs(one-8e-3) > 1e-9 || math.Abs(two-4e-3) > 1e-9 {
		t.Errorf("one device %g s, two %g s", one, two)
	}
}

// TestPlacementThatDoesNotFitIsPenalised: memory above a device's capacity
// multiplies the step by OOMPenalty (times 1 + the overflow), and single
// then prefers a slower device where it fits.
func TestPlacementThatDoesNotFitIsPenalised(t *testing.T) {
	g := chain([]float64{1e9, 1e9}, 1<<10)
	g.Ops[0].Mem, g.Ops[1].Mem = 600, 600 // 1200 bytes in all
	small, big := testDevice("fast-small", 1e12, 1000, 1e10), testDevice("slow-big", 1e11, 1<<30, 1e10)
	s := newSim(t, g, small, big)
	r := run(t, s, []int{0, 0})
	if r.Fits || r.Mem[0] != 1200 {
		t.Fatalf("%+v: should not fit", r)
	}
	if want := r.Step * OOMPenalty * 1.2; math.Abs(r.Cost-want) > 1e-12 {
		t.Errorf("cost %g, want %g", r.Cost, want)
	}
	out, err := Place(t.Context(), "single", s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Result.Fits || out.Placement[0] != 1 {
		t.Errorf("single chose %v (%+v), want the device where it fits", out.Placement, out.Result)
	}
}

func TestMalformedPlacementsAreErrors(t *testing.T) {
	s := newSim(t, chain([]float64{1, 1}, 1), testDevice("d", 1e12, 1<<30, 1e10))
	for _, p := range [][]int{{0}, {0, 1}, {-1, 0}} {
		if _, err := s.Run(p); err == nil {
			t.Errorf("%v accepted", p)
		}
	}
	if !math.IsInf(s.Cost([]int{0}), 1) {
		t.Error("a malformed placement has a finite cost")
	}
	bad := &Graph{Name: "cycle", Groups: []string{"g"}, Ops: []Op{{Name: "a", Inputs: []int{1}}, {Name: "b"}}}
	if _, err := NewSimulator(bad, []Device{testDevice("d", 1, 1, 1)}); err == nil || !strings.Contains(err.Error(), "not an earlier op") {
		t.Errorf("a graph out of topological order: %v", err)
	}
}

// TestNewWeightsMustReachTheNextStepsDevices: an update placed away from
// the op that reads its weights sends them back before the step ends.
func TestNewWeightsMustReachTheNextStepsDevices(t *testing.T) {
	g := chain([]float64{1e9, 1e9}, 5e7) // op 0: the forward, op 1: the update
	g.Ops[1].NextStep = []int{0}
	d := testDevice("d", 1e12, 1<<30, 1e10)
	s := newSim(t, g, d, d)
	together, apart := run(t, s, []int{0, 0}), run(t, s, []int{0, 1})
	if math.Abs(together.Step-2e-3) > 1e-9 {
		t.Errorf("on one device %g s, want 2 ms", together.Step)
	}
	if want := 2e-3 + 2*5e-3; math.Abs(apart.Step-want) > 1e-9 || apart.Moved != 1e8 {
		t.Errorf("apart %g s (want %g: the gradient there, the weights back), moved %d", apart.Step, want, apart.Moved)
	}
}
