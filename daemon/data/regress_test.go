package data

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
)

func newRegress(t *testing.T, cfg RegressConfig, opts Options) *Regress {
	t.Helper()
	g, err := NewRegress(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestRegressDeterministicPerSeed(t *testing.T) {
	a := readAll(t, newRegress(t, DefaultRegress(5), Options{Limit: 400}), 100)
	b := readAll(t, newRegress(t, DefaultRegress(5), Options{Limit: 400}), 33, 71)
	if a.Size != 400 || !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different samples (%d vs %d)", a.Size, b.Size)
	}
	c := readAll(t, newRegress(t, DefaultRegress(6), Options{Limit: 400}), 100)
	if reflect.DeepEqual(a.Dense, c.Dense) || reflect.DeepEqual(a.Labels, c.Labels) {
		t.Fatal("seeds 5 and 6 draw the same samples")
	}
	if reflect.DeepEqual(newRegress(t, DefaultRegress(5), Options{}).Weights(), newRegress(t, DefaultRegress(6), Options{}).Weights()) {
		t.Fatal("seeds 5 and 6 plant the same weights")
	}
}

// plantedPredictions returns Bias + w·x for every sample of b.
func plantedPredictions(g *Regress, b *Batch) []float32 {
	w := g.Weights()
	preds := make([]float32, b.Size)
	for i := range b.Size {
		y := g.Config().Bias
		for j, x := range b.Dense[i*b.NumDense : (i+1)*b.NumDense] {
			y += w[j] * float64(x)
		}
		preds[i] = float32(y)
	}
	return preds
}

// TestRegressTargetsFollowThePlantedModel: over many samples the targets'
// mean is the bias, their variance |w|^2 + σ², and the residual of the
// planted model's prediction has variance σ², so that the planted model's
// MSE and R² are the optimum the generator reports.
func TestRegressTargetsFollowThePlantedModel(t *testing.T) {
	const n = 100000
	for _, seed := range []uint64{1, 2, 3} {
		g := newRegress(t, DefaultRegress(seed), Options{})
		b, err := g.Next(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		var sum, sumSq float64
		for _, y := range b.Labels {
			sum += float64(y)
			sumSq += float64(y) * float64(y)
		}
		mean := sum / n
		variance := sumSq/n - mean*mean
		want := g.TargetVariance()
		if se := want * math.Sqrt(2.0/n); math.Abs(variance-want) > 5*se {
			t.Errorf("seed %d: target variance %.4f, formula %.4f (± %.4f)", seed, variance, want, se)
		}
		if se := math.Sqrt(want / n); math.Abs(mean-g.Config().Bias) > 5*se {
			t.Errorf("seed %d: target mean %.4f, bias %g", seed, mean, g.Config().Bias)
		}
		mse, r2, err := Fit(plantedPredictions(g, b), b.Labels)
		if err != nil {
			t.Fatal(err)
		}
		if opt := g.OptimalMSE(); math.Abs(mse-opt) > 5*opt*math.Sqrt(2.0/n) {
			t.Errorf("seed %d: the planted model's MSE %.4f, optimal MSE %.4f", seed, mse, opt)
		}
		if math.Abs(r2-g.OptimalR2()) > 0.01 {
			t.Errorf("seed %d: the planted model's R² %.4f, optimal R² %.4f", seed, r2, g.OptimalR2())
		}
		if r2 := g.OptimalR2(); r2 < 0.5 || r2 > 0.9 {
			t.Errorf("seed %d: optimal R² %.4f outside [0.5, 0.9]: the task is trivial or hopeless", seed, r2)
		}
	}
}

func TestRegressOptimumFormula(t *testing.T) {
	g := newRegress(t, RegressConfig{Seed: 1, NumDense: 2, WeightStd: 1, NoiseStd: 3}, Options{})
	g.weights = []float64{3, 4} // |w|^2 = 25
	if v, mse, r2 := g.TargetVariance(), g.OptimalMSE(), g.OptimalR2(); v != 34 || mse != 9 || math.Abs(r2-25.0/34) > 1e-12 {
		t.Fatalf("variance %g, optimal MSE %g, R² %g; want 34, 9, 25/34", v, mse, r2)
	}
}

func TestRegressSchemaAndBatches(t *testing.T) {
	g := newRegress(t, DefaultRegress(1), Options{})
	want := Schema{NumDense: 13, Task: TaskRegress}
	if g.Schema() != want {
		t.Fatalf("schema %+v, want %+v", g.Schema(), want)
	}
	b, err := g.Next(context.Background(), 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(want); err != nil || b.Probs != nil || b.Classes != nil {
		t.Fatalf("batch: %v, probs %v, classes %v", err, b.Probs, b.Classes)
	}
}

func TestRegressConfigErrors(t *testing.T) {
	bad := []RegressConfig{
		{NumDense: 0, WeightStd: 1, NoiseStd: 1},
		{NumDense: maxRegressDense + 1, WeightStd: 1, NoiseStd: 1},
		{NumDense: 3, WeightStd: -1, NoiseStd: 1},
		{NumDense: 3, WeightStd: 1, NoiseStd: math.NaN()},
		{NumDense: 3, WeightStd: 1, NoiseStd: 1, Bias: math.Inf(1)},
		{NumDense: 3, WeightStd: 0, NoiseStd: 0},
	}
	for _, cfg := range bad {
		if _, err := NewRegress(cfg, Options{}); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	if _, err := NewRegress(DefaultRegress(1), Options{Shard: 3, Shards: 2}); err == nil {
		t.Error("shard 3 of 2 accepted")
	}
}

func TestRegressSpec(t *testing.T) {
	for in, want := range map[string]Spec{
		"regress":   {Kind: "regress", Seed: DefaultSeed},
		"regress:7": {Kind: "regress", Seed: 7},
	} {
		got, err := ParseSpec(in)
		if err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if again, err := ParseSpec(got.String()); err != nil || again != got {
			t.Errorf("%q does not parse back: %+v, %v", got.String(), again, err)
		}
	}
	var se *SpecError
	if _, err := ParseSpec("regress:x"); !errors.As(err, &se) {
		t.Errorf("regress:x: error %v, want a *SpecError", err)
	}
	src, err := Open("regress:7", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	g, ok := src.(*Regress)
	if !ok || g.Config() != DefaultRegress(7) {
		t.Fatalf("regress:7 opened %T", src)
	}
}
