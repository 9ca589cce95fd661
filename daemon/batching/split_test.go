package batching

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name     string
		global   int
		weights  []float64
		min, max []int
		want     []int
	}{
		{"proportional", 100, []float64{1, 3}, nil, nil, []int{25, 75}},
		{"largest remainder", 10, []float64{1, 1, 1}, nil, nil, []int{4, 3, 3}},                   // 3.33 each: tie to index 0
		{"remainder to the largest fraction", 10, []float64{2, 3, 5.5}, nil, nil, []int{2, 3, 5}}, // 1.90 2.86 5.24
		{"ties go to the lower index", 3, []float64{1, 1, 1, 1}, nil, nil, []int{1, 1, 1, 0}},
		{"max frees samples for the others", 100, []float64{8, 1, 1}, nil, []int{50, 100, 100}, []int{50, 25, 25}},
		{"min takes samples from the others", 100, []float64{1, 9, 10}, []int{20, 0, 0}, nil, []int{20, 38, 42}},
		{"clipping cascades", 100, []float64{10, 5, 1}, []int{1, 1, 30}, []int{40, 100, 100}, []int{40, 30, 30}},
		{"zero weight gets its min", 10, []float64{0, 1}, []int{2, 0}, nil, []int{2, 8}},
		{"zero weight takes what the others cannot", 10, []float64{0, 0, 1}, nil, []int{10, 10, 4}, []int{3, 3, 4}},
		{"all zero weights are equal", 9, []float64{0, 0, 0}, nil, nil, []int{3, 3, 3}},
		{"sum of mins equals global", 6, []float64{5, 1}, []int{3, 3}, nil, []int{3, 3}},
		{"sum of maxes equals global", 6, []float64{5, 1}, nil, []int{3, 3}, []int{3, 3}},
		{"no replicas", 0, nil, nil, nil, []int{}},
		{"ties among many go to the lower indexes", 30, make([]float64, 20), nil, nil,
			[]int{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Split(tt.global, tt.weights, tt.min, tt.max)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Split(%d, %v, %v, %v) = %v, want %v", tt.global, tt.weights, tt.min, tt.max, got, tt.want)
			}
		})
	}
}

func TestSplitRefuses(t *testing.T) {
	tests := []struct {
		name     string
		global   int
		weights  []float64
		min, max []int
		want     []string // all in the error
	}{
		{"mins over global", 10, []float64{1, 1}, []int{6, 6}, nil, []string{"min batches sum to 12 > 10"}},
		{"maxes under global", 10, []float64{1, 1}, nil, []int{4, 5}, []string{"max batches sum to 9 < 10"}},
		{"max under min", 10, []float64{1, 1}, []int{0, 5}, []int{10, 4}, []string{"replica 1", "max batch 4 < min batch 5"}},
		{"negative min", 10, []float64{1}, []int{-1}, nil, []string{"min batch -1"}},
		{"negative global", -1, []float64{1}, nil, nil, []string{"global batch -1"}},
		{"NaN weight", 10, []float64{1, math.NaN()}, nil, nil, []string{"replica 1", "NaN"}},
		{"negative weight", 10, []float64{-2, 1}, nil, nil, []string{"replica 0", "-2"}},
		{"infinite weight", 10, []float64{math.Inf(1), 1}, nil, nil, []string{"+Inf"}},
		{"min length", 10, []float64{1, 1}, []int{1}, nil, []string{"1 min batches for 2 replicas"}},
		{"max length", 10, []float64{1, 1}, nil, []int{1, 2, 3}, []string{"3 max batches for 2 replicas"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Split(tt.global, tt.weights, tt.min, tt.max)
			if err == nil {
				t.Fatalf("Split = %v, want an error", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestSplitProperties checks on random inputs that the split sums to global,
// keeps every bound, and is the largest-remainder rounding of the
// water-filled shares: each batch is the floor or the ceiling of its share.
func TestSplitProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		global, w, lo, hi := randomSplitInput(rng)
		got, err := Split(global, w, lo, hi)
		if err != nil {
			t.Fatalf("case %d: Split(%d, %v, %v, %v): %v", i, global, w, lo, hi, err)
		}
		checkSplit(t, global, got, lo, hi)
		shares := waterFill(float64(global), w, lo, hi)
		for k, x := range shares {
			if math.Abs(float64(got[k])-x) >= 1+1e-6 {
				t.Fatalf("case %d: Split(%d, %v, %v, %v) = %v: batch %d is more than 1 from its share %.3f",
					i, global, w, lo, hi, got, k, x)
			}
		}
		checkProportional(t, w, shares, lo, hi)
	}
}

// checkProportional: replicas not at a bound get shares in the ratio of
// their weights.
func checkProportional(t *testing.T, w, shares []float64, lo, hi []int) {
	t.Helper()
	ratio := math.NaN()
	for k, x := range shares {
		if w[k] == 0 || x <= float64(lo[k])+1e-9 || x >= float64(hi[k])-1e-9 {
			continue
		}
		if math.IsNaN(ratio) {
			ratio = x / w[k]
		} else if math.Abs(x/w[k]-ratio) > 1e-6*ratio {
			t.Fatalf("shares %v of weights %v (bounds %v %v): free replica %d has ratio %v, another %v", shares, w, lo, hi, k, x/w[k], ratio)
		}
	}
}

func randomSplitInput(rng *rand.Rand) (global int, w []float64, lo, hi []int) {
	n := 1 + rng.IntN(8)
	w, lo, hi = make([]float64, n), make([]int, n), make([]int, n)
	sumLo, sumHi := 0, 0
	for k := range n {
		switch rng.IntN(6) {
		case 0:
			w[k] = 0
		case 1:
			w[k] = 1 // ties
		default:
			w[k] = math.Exp(rng.NormFloat64() * 2)
		}
		lo[k] = rng.IntN(20)
		hi[k] = lo[k] + rng.IntN(300)
		sumLo += lo[k]
		sumHi += hi[k]
	}
	return sumLo + rng.IntN(sumHi-sumLo+1), w, lo, hi
}

func checkSplit(t *testing.T, global int, got, lo, hi []int) {
	t.Helper()
	sum := 0
	for k, b := range got {
		sum += b
		if b < lo[k] || b > hi[k] {
			t.Fatalf("split %v: batch %d = %d outside [%d, %d]", got, k, b, lo[k], hi[k])
		}
	}
	if sum != global {
		t.Fatalf("split %v sums to %d, want %d", got, sum, global)
	}
}

func TestVariable(t *testing.T) {
	got, err := Variable(1000, []float64{400, 100, 500}, Bounds{Min: 150})
	if err != nil {
		t.Fatal(err)
	}
	// 400:100:500 gives 400, 100, 500; the min lifts replica 1 to 150 and
	// the 50 comes from the others in proportion (4:5).
	if want := []int{378, 150, 472}; !slices.Equal(got, want) {
		t.Errorf("Variable = %v, want %v", got, want)
	}
	got, err = Variable(1000, []float64{1, 1}, Bounds{Min: 1, Max: []int{300, 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{300, 700}; !slices.Equal(got, want) {
		t.Errorf("Variable with max = %v, want %v", got, want)
	}
	if _, err := Variable(1000, []float64{1, 1}, Bounds{Max: []int{300}}); err == nil || !strings.Contains(err.Error(), "1 entries for 2 replicas") {
		t.Errorf("Variable with a short max: %v", err)
	}
}
