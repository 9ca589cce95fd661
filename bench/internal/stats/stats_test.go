package stats

import (
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7}, 7},
		{nil, 0},
	} {
		before := slices.Clone(c.xs)
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
		if !slices.Equal(c.xs, before) {
			t.Errorf("Median reordered its input: %v, was %v", c.xs, before)
		}
	}
}

func TestRates(t *testing.T) {
	if got := Rates([]float64{61200.4, 58100, 63049.6}); got != "61200 58100 63050" {
		t.Errorf("Rates = %q", got)
	}
	if got := Rates(nil); got != "" {
		t.Errorf("Rates(nil) = %q, want empty", got)
	}
}
