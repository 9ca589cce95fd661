package native

import "testing"

func TestArgmaxTakesTheFirstLargest(t *testing.T) {
	for _, c := range []struct {
		probs []float32
		want  int
	}{{nil, 0}, {[]float32{0.2, 0.5, 0.3}, 1}, {[]float32{0.4, 0.1, 0.4}, 0}} {
		if got := Argmax(c.probs); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.probs, got, c.want)
		}
	}
}

func TestSampleCategoricalFollowsTheRunningSum(t *testing.T) {
	probs := []float32{0.25, 0.5, 0.25}
	for _, c := range []struct {
		u    float32
		want int
	}{{0, 0}, {0.24, 0}, {0.25, 1}, {0.74, 1}, {0.75, 2}, {0.9999, 2}} {
		if got := SampleCategorical(probs, c.u); got != c.want {
			t.Errorf("u=%v: %d, want %d", c.u, got, c.want)
		}
	}
	if got := SampleCategorical([]float32{0.3, 0.3}, 0.99); got != 1 {
		t.Errorf("a sum short of u gives %d, want the last index", got)
	}
}
