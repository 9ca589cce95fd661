package sched

import (
	"context"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/heterps/heterps/config"
)

func TestSynthCatalogIsValidAndReproducible(t *testing.T) {
	for _, n := range []int{1, 2, 16, 64} {
		a, err := SynthCatalog(n, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Types) != n || a.Types[0].Kind != config.KindCPU {
			t.Fatalf("%d types: got %d, first %s", n, len(a.Types), a.Types[0].Kind)
		}
		b, _ := SynthCatalog(n, 7)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%d types: same seed, different catalogs", n)
		}
		out, err := a.MarshalTOML()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := config.ParseCatalog("synth.toml", out); err != nil {
			t.Fatalf("printed catalog does not parse: %v\n%s", err, out)
		}
	}
	c, _ := SynthCatalog(8, 1)
	d, _ := SynthCatalog(8, 2)
	if reflect.DeepEqual(c, d) {
		t.Error("different seeds, same catalog")
	}
	speeds := map[float64]bool{}
	for _, ty := range c.Types[1:] {
		speeds[ty.PeakFLOPS] = true
	}
	if len(speeds) < 5 {
		t.Errorf("GPU types should vary in speed, got %d distinct", len(speeds))
	}
	for _, n := range []int{0, 65} {
		if _, err := SynthCatalog(n, 1); err == nil {
			t.Errorf("%d types accepted", n)
		}
	}
}

func TestSynthProblemParsesBack(t *testing.T) {
	c, err := SynthProblem(8, 12, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Types) != 8 || len(c.Layers) != 12 || c.ThroughputLimit <= 0 {
		t.Fatalf("types %d layers %d limit %g", len(c.Types), len(c.Layers), c.ThroughputLimit)
	}
	out, err := c.MarshalTOML()
	if err != nil {
		t.Fatal(err)
	}
	back, err := config.ParseProblem("synth.toml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatal("printed problem reparses differently")
	}
}

func TestCTRDNNShapesMatchTheZoo(t *testing.T) {
	for _, n := range []int{8, 12, 16, 20} {
		shapes, err := CTRDNNShapes(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(shapes) != n || shapes[0].Kind != "embedding" || shapes[n-1].Out != 1 {
			t.Fatalf("ctrdnn-%d: %+v", n, shapes)
		}
		for i := 1; i < n; i++ {
			if shapes[i].In != shapes[i-1].Out {
				t.Fatalf("ctrdnn-%d: layer %d takes %d, previous gives %d", n, i, shapes[i].In, shapes[i-1].Out)
			}
		}
	}
	if _, err := CTRDNNShapes(2); err == nil {
		t.Error("2 layers accepted")
	}
}

func TestEstimatesFollowTheDevices(t *testing.T) {
	cat, _ := SynthCatalog(4, 1)
	shapes, _ := CTRDNNShapes(8)
	c, err := EstimateProblem(shapes, cat, DefaultEstimateSpec())
	if err != nil {
		t.Fatal(err)
	}
	fc := c.Layers[2] // fc1: compute-bound
	fastest, slowest := 1, 1
	for i := 1; i < len(cat.Types); i++ {
		if cat.Types[i].PeakFLOPS > cat.Types[fastest].PeakFLOPS {
			fastest = i
		}
		if cat.Types[i].PeakFLOPS < cat.Types[slowest].PeakFLOPS {
			slowest = i
		}
	}
	if fc.OCT[fastest] > fc.OCT[slowest] {
		t.Errorf("fc1 takes %g on the fastest GPU and %g on the slowest", fc.OCT[fastest], fc.OCT[slowest])
	}
	if fc.OCT[0] < fc.OCT[fastest] {
		t.Errorf("fc1 is faster on a CPU core (%g) than on a GPU (%g)", fc.OCT[0], fc.OCT[fastest])
	}
}

// TestNCEEstimateIgnoresTheClassCount: an NCE output layer touches its
// targets' and K negatives' rows, so its estimate is the same for 10^4 and
// 10^7 classes, and well below a dense layer holding the whole table.
func TestNCEEstimateIgnoresTheClassCount(t *testing.T) {
	cat, _ := SynthCatalog(2, 1)
	spec := DefaultEstimateSpec()
	oct := func(kind string, classes int64) float64 {
		shapes := []config.LayerShape{
			{Name: "emb", Kind: "embedding", Out: 128, Weights: classes * 32},
			{Name: "out", Kind: kind, In: 128, Out: 9, Weights: classes * 129},
		}
		p, err := EstimateProblem(shapes, cat, spec)
		if err != nil {
			t.Fatal(err)
		}
		return p.Layers[1].OCT[0]
	}
	small, large := oct("nce", 10_000), oct("nce", 10_000_000)
	if small != large {
		t.Errorf("nce: %g s for 10^4 classes, %g s for 10^7", small, large)
	}
	if dense := oct("fc", 10_000_000); !(large < dense/100) {
		t.Errorf("nce over 10^7 classes estimated at %g s, a dense layer of that table at %g s", large, dense)
	}
}

// TestWholeModelKeepsStageTimes: the merged layer's compute time on k
// units of a type is the sum of the layers' (Amdahl per layer), for every
// type and unit count, and its transfer is the last layer's.
func TestWholeModelKeepsStageTimes(t *testing.T) {
	cat, _ := SynthCatalog(4, 2)
	shapes, _ := CTRDNNShapes(6)
	pc, err := EstimateProblem(shapes, cat, DefaultEstimateSpec())
	if err != nil {
		t.Fatal(err)
	}
	layers := slices.Clone(pc.Layers)
	wholeModel(pc)
	if len(pc.Layers) != 1 {
		t.Fatalf("%d layers after merging", len(pc.Layers))
	}
	whole, last := pc.Layers[0], layers[len(layers)-1]
	ct := func(oct, alpha float64, k int) float64 { return oct * ((1 - alpha) + alpha/float64(k)) }
	for ty := range whole.OCT {
		for _, k := range []int{1, 2, 7, 64} {
			want := 0.0
			for _, l := range layers {
				want += ct(l.OCT[ty], l.Alpha[ty], k)
			}
			if got := ct(whole.OCT[ty], whole.Alpha[ty], k); math.Abs(got-want) > 1e-12*want {
				t.Errorf("type %d, %d units: merged %g s, layers %g s", ty, k, got, want)
			}
		}
		if whole.ODT[ty] != last.ODT[ty] || whole.Beta[ty] != last.Beta[ty] {
			t.Errorf("type %d: transfer %g/%g, want the last layer's %g/%g", ty, whole.ODT[ty], whole.Beta[ty], last.ODT[ty], last.Beta[ty])
		}
	}
}

// TestAutoLimitIsReachable: the derived throughput floor never exceeds
// what a single-type plan reaches, also when the best type has one unit
// (the geometric mean is then that plan's throughput, and rounding it up
// made the problem infeasible).
func TestAutoLimitIsReachable(t *testing.T) {
	cat, err := config.LoadCatalog("../../config/examples/catalogs/local.toml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := config.LoadModel("matchnet")
	if err != nil {
		t.Fatal(err)
	}
	spec := DefaultEstimateSpec()
	spec.Whole = true
	pc, err := EstimateProblem(m.Shapes(), cat, spec)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProblem(pc)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Run(context.Background(), "exact", p, Options{})
	if err != nil || !plan.Feasible {
		t.Fatalf("exact at the derived floor %g: %+v, %v", pc.ThroughputLimit, plan, err)
	}
}
