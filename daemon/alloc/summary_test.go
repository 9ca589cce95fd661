package alloc

import "testing"

func TestSummarise(t *testing.T) {
	v := make([]float64, 20)
	for i := range v {
		v[i] = float64(20 - i) // 20, 19, ..., 1: unsorted on purpose
	}
	mean, p50, p95 := Summarise(v)
	if mean != 10.5 || p50 != 11 || p95 != 20 {
		t.Errorf("Summarise(1..20) = %v %v %v, want 10.5 11 20", mean, p50, p95)
	}
	if v[0] != 20 {
		t.Error("Summarise sorted its argument in place")
	}
	if m, a, b := Summarise(nil); m != 0 || a != 0 || b != 0 {
		t.Errorf("empty: %v %v %v", m, a, b)
	}
}
