package data

import (
	"math"
	"math/rand/v2"
	"testing"
)

// pairwiseAUC is the O(n^2) definition: over all positive-negative pairs,
// the share where the positive scores higher, ties counting one half.
func pairwiseAUC(scores, labels []float32) float64 {
	var wins, pairs float64
	for i := range scores {
		for j := range scores {
			if labels[i] != 1 || labels[j] != 0 {
				continue
			}
			pairs++
			switch {
			case scores[i] > scores[j]:
				wins++
			case scores[i] == scores[j]:
				wins += 0.5
			}
		}
	}
	return wins / pairs
}

func TestAUCMatchesPairwiseDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 2 + rng.IntN(300)
		levels := 1 + rng.IntN(20) // few levels: many ties
		scores, labels := make([]float32, n), make([]float32, n)
		for i := range n {
			scores[i] = float32(rng.IntN(levels)) / float32(levels)
			if rng.Float32() < 0.3+0.4*scores[i] {
				labels[i] = 1
			}
		}
		labels[0], labels[1] = 0, 1
		got, err := AUC(scores, labels)
		if err != nil {
			t.Fatal(err)
		}
		if want := pairwiseAUC(scores, labels); math.Abs(got-want) > 1e-12 {
			t.Fatalf("trial %d (n %d, %d levels): AUC %.15f, pairwise %.15f", trial, n, levels, got, want)
		}
	}
}

func TestAUCKnownCases(t *testing.T) {
	cases := []struct {
		scores, labels []float32
		want           float64
	}{
		{[]float32{0.1, 0.9}, []float32{0, 1}, 1},
		{[]float32{0.9, 0.1}, []float32{0, 1}, 0},
		{[]float32{0.5, 0.5, 0.5}, []float32{0, 1, 1}, 0.5},
	}
	for _, c := range cases {
		if got, err := AUC(c.scores, c.labels); err != nil || got != c.want {
			t.Errorf("AUC(%v, %v) = %v, %v; want %v", c.scores, c.labels, got, err, c.want)
		}
	}
}

func TestAUCErrors(t *testing.T) {
	nan := float32(math.NaN())
	cases := [][2][]float32{
		{{0.1, 0.2}, {0}},    // lengths differ
		{{0.1, 0.2}, {1, 1}}, // no negatives
		{{0.1, 0.2}, {0, 2}}, // not 0/1
		{{nan, 0.2}, {0, 1}}, // NaN score
		{{}, {}},             // nothing at all
	}
	for _, c := range cases {
		if _, err := AUC(c[0], c[1]); err == nil {
			t.Errorf("AUC(%v, %v) has no error", c[0], c[1])
		}
	}
}

func TestAccuracy(t *testing.T) {
	logits := []float32{
		0.1, 0.7, 0.2, // class 1
		0.5, 0.5, 0.0, // tie: first maximum, class 0
		0.0, 0.1, 0.9, // class 2
		1.0, 0.0, 0.0, // class 0
	}
	got, err := Accuracy(logits, 3, []int64{1, 0, 1, 2})
	if err != nil || got != 0.5 {
		t.Fatalf("accuracy %v, %v; want 0.5", got, err)
	}
	if _, err := Accuracy(logits, 3, []int64{1, 0}); err == nil {
		t.Error("accuracy of mismatched shapes has no error")
	}
}

func TestFitKnownCases(t *testing.T) {
	targets := []float32{1, 2, 3, 4} // mean 2.5, sum of squared deviations 5
	cases := []struct {
		preds   []float32
		mse, r2 float64
	}{
		{[]float32{1, 2, 3, 4}, 0, 1},            // perfect
		{[]float32{2.5, 2.5, 2.5, 2.5}, 1.25, 0}, // the mean
		{[]float32{2, 2, 4, 4}, 0.5, 0.6},        // SSE 2
		{[]float32{4, 3, 2, 1}, 5, -3},           // worse than the mean
	}
	for _, c := range cases {
		mse, r2, err := Fit(c.preds, targets)
		if err != nil || math.Abs(mse-c.mse) > 1e-12 || math.Abs(r2-c.r2) > 1e-12 {
			t.Errorf("Fit(%v) = %v, %v, %v; want %v, %v", c.preds, mse, r2, err, c.mse, c.r2)
		}
	}
}

func TestFitErrors(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	cases := [][2][]float32{
		{{0.1, 0.2}, {0}},      // lengths differ
		{{}, {}},               // nothing at all
		{{0.1, 0.2}, {3, 3}},   // constant targets
		{{nan, 0.2}, {0, 1}},   // NaN prediction
		{{0.1, 0.2}, {inf, 1}}, // infinite target
	}
	for _, c := range cases {
		if _, _, err := Fit(c[0], c[1]); err == nil {
			t.Errorf("Fit(%v, %v) has no error", c[0], c[1])
		}
	}
}
