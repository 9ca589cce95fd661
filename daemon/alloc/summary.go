package alloc

import "slices"

// Summarise returns the mean, median and 95th percentile of v (the order
// statistic at ⌊q·n⌋), all 0 for an empty v. The simulator and the
// multi-job benchmark report times to 90 %/95 % loss reduction with it, so
// that their figures compare.
func Summarise(v []float64) (mean, p50, p95 float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	for _, x := range s {
		mean += x
	}
	mean /= float64(len(s))
	pick := func(q float64) float64 { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return mean, pick(0.5), pick(0.95)
}
