package sched

import (
	"math"
	"strings"
	"testing"
)

// handProblem is small enough to cost by hand: B/B_o = 2, two layers, a CPU
// type and a GPU type.
func handProblem() *Problem {
	return &Problem{
		Batch: 512, ProfileBatch: 256, Epochs: 2, Samples: 1e6, PSType: -1,
		Types: []Type{{Name: "cpu", Kind: CPU, Price: 0.04, MaxUnits: 64}, {Name: "gpu", Kind: GPU, Price: 2, MaxUnits: 8}},
		Layers: []Layer{
			{Name: "emb", OCT: []float64{0.01, 0.02}, ODT: []float64{0.002, 0.001}, Alpha: []float64{0.9, 0.5}, Beta: []float64{0.5, 1}},
			{Name: "fc", OCT: []float64{0.1, 0.004}, ODT: []float64{0.3, 0.3}, Alpha: []float64{0.95, 0.75}, Beta: []float64{0.5, 0.5}},
		},
	}
}

func TestCostHandComputed(t *testing.T) {
	p := handProblem()
	segs := []Segment{{First: 0, Last: 0, Type: 0, Units: 4}, {First: 1, Last: 1, Type: 1, Units: 2}}
	// Stage 0: CT = 0.01*2*(0.1 + 0.9/4) = 0.0065, DT = 0.002*2*(0.5 + 0.5/4) = 0.0025.
	// Stage 1: CT = 0.004*2*(0.25 + 0.75/2) = 0.005; last stage, so DT = 0 (its odt is ignored).
	checks := []struct {
		name      string
		got, want float64
	}{
		{"CT0", p.CT(segs[0]), 0.0065},
		{"DT0", p.DT(segs[0]), 0.0025},
		{"ET0", p.ET(segs[0]), 0.0065},
		{"CT1", p.CT(segs[1]), 0.005},
		{"DT1", p.DT(segs[1]), 0},
		{"X0", p.StageThroughput(segs[0]), 512 / 0.0065},
		{"X1", p.StageThroughput(segs[1]), 512 / 0.005},
		{"X", p.PipelineThroughput(segs), 512 / 0.0065},
	}
	for _, c := range checks {
		if !relClose(c.got, c.want, 1e-12) {
			t.Errorf("%s = %.15g, want %.15g", c.name, c.got, c.want)
		}
	}
	// T = 2 * 1e6 / (512/0.0065) = 25.390625 s; price 0.04*4 + 2*2 = 4.16 per hour.
	c := p.Cost(segs, 0)
	if !relClose(c.TimeS, 25.390625, 1e-12) || !relClose(c.Cost, 25.390625*4.16/3600, 1e-12) {
		t.Errorf("cost %+v, want T 25.390625 and cost %.12g", c, 25.390625*4.16/3600)
	}
	// With half a CPU core of PS per unit: ceil(0.5*6) = 3 PS cores at 0.04.
	p.PSType, p.PSRatio = 0, 0.5
	if ps := p.PSCores(6); ps != 3 {
		t.Fatalf("PSCores(6) = %d, want 3", ps)
	}
	if c := p.Cost(segs, 3); !relClose(c.Cost, 25.390625*4.28/3600, 1e-12) {
		t.Errorf("cost with PS %.12g, want %.12g", c.Cost, 25.390625*4.28/3600)
	}
}

func TestTransferBoundStage(t *testing.T) {
	p := handProblem()
	p.Layers[0].ODT[0] = 0.02
	s := Segment{First: 0, Last: 0, Type: 0, Units: 4}
	// DT = 0.02*2*(0.5 + 0.125) = 0.025 > CT = 0.0065: the transfer sets the pace.
	if !relClose(p.ET(s), 0.025, 1e-12) || !relClose(p.StageThroughput(s), 512/0.025, 1e-12) {
		t.Fatalf("ET %.15g X %.15g", p.ET(s), p.StageThroughput(s))
	}
}

// TestStageTimesMatchDesignFormula checks the factored form used inside the
// package against DESIGN.md's per-layer sum on random stages.
func TestStageTimesMatchDesignFormula(t *testing.T) {
	r := newRand(5)
	for range 200 {
		p := randomProblem(r, 1+r.IntN(6), 1+r.IntN(3))
		first := r.IntN(len(p.Layers))
		last := first + r.IntN(len(p.Layers)-first)
		s := Segment{First: first, Last: last, Type: r.IntN(len(p.Types)), Units: 1 + r.IntN(50)}
		scale, k := p.Batch/p.ProfileBatch, float64(s.Units)
		var ct float64
		for l := first; l <= last; l++ {
			ly := p.Layers[l]
			ct += ly.OCT[s.Type] * scale * ((1 - ly.Alpha[s.Type]) + ly.Alpha[s.Type]/k)
		}
		dt := 0.0
		if last < len(p.Layers)-1 {
			ly := p.Layers[last]
			dt = ly.ODT[s.Type] * scale * ((1 - ly.Beta[s.Type]) + ly.Beta[s.Type]/k)
		}
		if !relClose(p.CT(s), ct, 1e-12) || !relClose(p.DT(s), dt, 1e-12) || p.ET(s) != math.Max(p.CT(s), p.DT(s)) {
			t.Fatalf("stage %+v: CT %.15g vs %.15g, DT %.15g vs %.15g", s, p.CT(s), ct, p.DT(s), dt)
		}
	}
}

func TestSegmentsAreMaximalRuns(t *testing.T) {
	got := Segments([]int{1, 1, 0, 0, 0, 1, 2})
	want := []Segment{{0, 1, 1, 0}, {2, 4, 0, 0}, {5, 5, 1, 0}, {6, 6, 2, 0}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestPSCoresRoundUpExactly(t *testing.T) {
	p := &Problem{PSRatio: 0.1}
	for units, want := range map[int]int{0: 0, 1: 1, 10: 1, 11: 2, 30: 3, 31: 4} {
		if got := p.PSCores(units); got != want {
			t.Errorf("PSCores(%d) = %d, want %d", units, got, want)
		}
	}
}

// A plan names the dense_sync of each type whose layer times were measured
// by a profile that folded one in; estimated types and measured ones
// without a folded method are left out, and nil means none.
func TestMeasuredDenseSyncNamesOnlyMeasuredFoldedTypes(t *testing.T) {
	p := handProblem().Config()
	p.Types[0].DenseSync, p.Types[1].DenseSync = "allreduce", "ps"
	got := MeasuredDenseSync(p, map[string]string{"cpu": SourceMeasured, "gpu": SourceEstimated})
	if len(got) != 1 || got["cpu"] != "allreduce" {
		t.Errorf("cpu measured, gpu estimated: %v, want cpu: allreduce alone", got)
	}
	p.Types[0].DenseSync = ""
	if got := MeasuredDenseSync(p, AllSources(handProblem(), SourceMeasured)); len(got) != 1 || got["gpu"] != "ps" {
		t.Errorf("both measured, only gpu folded: %v, want gpu: ps alone", got)
	}
	if got := MeasuredDenseSync(p, AllSources(handProblem(), SourceGiven)); got != nil {
		t.Errorf("given times: %v, want nil", got)
	}
}

// A problem built in code is held to the problem files' rules.
func TestProblemValidateRefusesWhatAFileCouldNotSay(t *testing.T) {
	if err := handProblem().Validate(); err != nil {
		t.Fatalf("the hand problem: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Problem)
		want   string
	}{
		{"fractional batch", func(p *Problem) { p.Batch = 512.5 }, "batch sizes must be integers, got 512.5 and 256"},
		{"PS type out of range", func(p *Problem) { p.PSType = 2 }, "PS type 2 out of range"},
		{"a layer taking no time", func(p *Problem) { p.Layers[1].OCT[0] = 0 }, "oct"},
	} {
		p := handProblem()
		tc.change(p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
