package alloc

import (
	"math"
	"math/rand/v2"
	"testing"
)

func synth(c Curve, n int, noise float64, seed uint64) []Point {
	r := rand.New(rand.NewPCG(seed, 1))
	h := make([]Point, n)
	for i := range h {
		k := float64(i * 10)
		h[i] = Point{Iter: k, Loss: c.Predict(k) * (1 + noise*r.NormFloat64())}
	}
	return h
}

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

func TestFitRecoversEachFamily(t *testing.T) {
	cases := []struct {
		name  string
		truth Curve
		tol   [4]float64 // relative tolerance per parameter
	}{
		// 1/(a k² + b k + c) + d: L0 = 2.5, floor 0.5; a k² dominates by the end.
		{"sublinear", Curve{Family: Sublinear, P: [4]float64{1e-5, 2e-3, 0.5, 0.5}}, [4]float64{0.25, 0.25, 0.05, 0.05}},
		{"exponential", Curve{Family: Exponential, P: [4]float64{2, 4e-3, 0.3}}, [4]float64{0.05, 0.05, 0.05}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 5; seed++ {
				h := synth(tc.truth, 80, 0.005, seed)
				c, err := FitCurve(h, FitOptions{Decay: 1})
				if err != nil {
					t.Fatal(err)
				}
				if c.Family != tc.truth.Family {
					t.Fatalf("seed %d: picked %v, want %v", seed, c.Family, tc.truth.Family)
				}
				for i := 0; i < tc.truth.Family.nparams(); i++ {
					if !within(c.P[i], tc.truth.P[i], tc.tol[i]) {
						t.Errorf("seed %d: p[%d] = %.4g, want %.4g ±%.0f%%", seed, i, c.P[i], tc.truth.P[i], 100*tc.tol[i])
					}
				}
				k := h[len(h)-1].Iter + 10
				if got, want := c.Predict(k), tc.truth.Predict(k); !within(got, want, 0.05) {
					t.Errorf("seed %d: L(%v) = %.4f, want %.4f ±5%%", seed, k, got, want)
				}
			}
		})
	}
}

func (f Family) nparams() int {
	if f == Sublinear {
		return 4
	}
	return 3
}

// A job whose loss falls off a cliff (say, after a learning-rate drop) is
// predicted from its new regime when old points fade, not when they don't.
func TestDecayingWeightsFollowARegimeChange(t *testing.T) {
	before := Curve{Family: Exponential, P: [4]float64{1.5, 8e-3, 1.0}}
	after := Curve{Family: Exponential, P: [4]float64{0.8, 1e-2, 0.2}}
	var h []Point
	for k := 0.0; k < 600; k += 10 {
		h = append(h, Point{k, before.Predict(k)})
	}
	for k := 600.0; k < 900; k += 10 {
		h = append(h, Point{k, after.Predict(k - 600)})
	}
	k := 899.0 + 10
	want := after.Predict(k - 600)
	fading, err := FitFamily(Exponential, h, FitOptions{Decay: 0.7})
	if err != nil {
		t.Fatal(err)
	}
	if got := fading.Predict(k); !within(got, want, 0.05) {
		t.Errorf("decay 0.7: L(%v) = %.4f, want %.4f ±5%%", k, got, want)
	}
	flat, err := FitFamily(Exponential, h, FitOptions{Decay: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := flat.Predict(k); within(got, want, 0.05) {
		t.Errorf("without decay the fit should lag the new regime: L(%v) = %.4f, close to %.4f", k, got, want)
	}
}

func TestFitRefusesShortOrBrokenHistories(t *testing.T) {
	if _, err := FitCurve(make([]Point, MinPoints-1), FitOptions{}); err == nil {
		t.Error("short history fitted")
	}
	h := synth(Curve{Family: Exponential, P: [4]float64{1, 1e-2, 0}}, 10, 0, 1)
	h[3].Loss = math.NaN()
	if _, err := FitCurve(h, FitOptions{}); err == nil {
		t.Error("NaN loss fitted")
	}
	h = synth(Curve{Family: Exponential, P: [4]float64{1, 1e-2, 0}}, 10, 0, 1)
	h[4].Iter = h[3].Iter
	if _, err := FitCurve(h, FitOptions{}); err == nil {
		t.Error("repeated iteration fitted")
	}
}

func TestNormalisedReduction(t *testing.T) {
	for _, tc := range []struct{ l0, lt, lmin, want float64 }{
		{2, 1, 0, 0.5}, {2, 2, 0, 0}, {2, 0, 0, 1}, {2, 3, 0, 0}, {2, -1, 0, 1}, {1, 0.5, 1, 0},
	} {
		if got := NormalisedReduction(tc.l0, tc.lt, tc.lmin); got != tc.want {
			t.Errorf("NormalisedReduction(%v, %v, %v) = %v, want %v", tc.l0, tc.lt, tc.lmin, got, tc.want)
		}
	}
}

func TestFitStepModel(t *testing.T) {
	var s []StepSample
	for _, u := range []int{1, 2, 4, 8, 16} {
		s = append(s, StepSample{u, 0.8/float64(u) + 0.02})
	}
	m, err := FitStepModel(s)
	if err != nil {
		t.Fatal(err)
	}
	if !within(m.C, 0.8, 1e-9) || !within(m.O, 0.02, 1e-9) {
		t.Errorf("fit C=%v O=%v, want 0.8, 0.02", m.C, m.O)
	}
	if m, _ := FitStepModel([]StepSample{{4, 0.5}, {4, 0.5}}); m.C != 2 || m.O != 0 {
		t.Errorf("one unit count: C=%v O=%v, want 2, 0", m.C, m.O)
	}
	if _, err := FitStepModel([]StepSample{{0, 1}}); err == nil {
		t.Error("0 units accepted")
	}
}
